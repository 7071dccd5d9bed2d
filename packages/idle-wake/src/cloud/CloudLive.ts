import { Layer, Option } from "effect"
import { sleepSchedulerWorker } from "./SleepScheduler.ts"
import { AdmissionLive } from "./Admission.ts"
import { type CloudSettings, CloudSettingsTag } from "./CloudConfig.ts"
import { CloudStacks } from "./CloudStacks.ts"
import { CloudStacksRepo } from "./CloudStacksRepo.ts"
import { connectorEventWorker, ConnectorEvents } from "./ConnectorEvents.ts"
import { DrainClient } from "./DrainClient.ts"
import { localComputeLayer } from "./LocalCompute.ts"
import { Routing } from "./Routing.ts"
import { SleepOperation } from "./SleepOperation.ts"
import { Wakes } from "./Wakes.ts"
import { WakeProxy } from "./WakeProxy.ts"

/**
 * The cloud side of idle wake for one process: the stack registry and its routing table, the sleep operation, the
 * coalesced wakes, the admission bounds, the wake proxy and the connector event queue with its delivery worker, on
 * the local compute provider. Needs `SqlClient`, `PgClient` (the routing table listens for changes) and core's
 * `WorkerRegistry`.
 */
export const cloudLayer = (settings: CloudSettings) =>
  Layer.mergeAll(
    CloudStacks.Default,
    WakeProxy.Default,
    connectorEventWorker,
    Option.match(settings.sleepEvery, { onNone: () => Layer.empty, onSome: sleepSchedulerWorker })
  ).pipe(
    Layer.provideMerge(ConnectorEvents.Default),
    Layer.provideMerge(Layer.mergeAll(SleepOperation.Default, Wakes.Default)),
    Layer.provideMerge(Layer.mergeAll(Routing.Default, DrainClient.Default, AdmissionLive)),
    Layer.provideMerge(CloudStacksRepo.Default),
    Layer.provideMerge(Layer.mergeAll(Layer.succeed(CloudSettingsTag, settings), localComputeLayer(settings.local)))
  )
