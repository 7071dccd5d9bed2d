import { Layer } from "effect"
import { ApiActivity } from "./ApiActivity.ts"
import { ConnectorEventInbox } from "./ConnectorEventInbox.ts"
import { Connectors } from "./Connectors.ts"
import { DrainGate } from "./DrainGate.ts"
import { DrainRequests } from "./DrainRequests.ts"
import { type IdleWakeSettings, IdleWakeSettingsTag } from "./IdleWakeConfig.ts"
import { LocalWork, RuntimeRegistries } from "./LocalWork.ts"
import { makeRuntimeRegistry } from "./Runtimes.ts"
import { TenantDrain } from "./TenantDrain.ts"

/** The registry for runtimes that components start and retire while the process runs (the workers have their own). */
export const RUNTIME_REGISTRY = "runtimes"

/**
 * The tenant side of idle wake for one process: its per-process state (idle hold, requests in flight, API activity,
 * runtime registry) is built once here and shared by the drain reads, the local-work probe and the HTTP gate.
 * Needs `SqlClient`, `Identity`, core's `WorkerRegistry` and the backend's `PendingWork` probes.
 */
export const idleWakeLayer = (settings: IdleWakeSettings) =>
  Layer.merge(TenantDrain.Default, ConnectorEventInbox.Default).pipe(
    Layer.provideMerge(LocalWork.Default),
    Layer.provideMerge(Layer.mergeAll(
      ApiActivity.Default,
      DrainGate.Default,
      DrainRequests.Default,
      Connectors.Default,
      Layer.succeed(IdleWakeSettingsTag, settings),
      Layer.sync(RuntimeRegistries, () => [makeRuntimeRegistry(RUNTIME_REGISTRY)])
    ))
  )
