import { WorkerRegistry } from "@delivery/core"
import { Context, Effect, Option } from "effect"
import { ApiActivity } from "./ApiActivity.ts"
import type { BlockerEntry } from "./Blockers.ts"
import { DrainGate } from "./DrainGate.ts"
import type { BlockerCode } from "./Protocol.ts"
import type { RuntimeRegistry, RuntimeState } from "./Runtimes.ts"

/** Every runtime registry of this process that the local-work probe reads. */
export class RuntimeRegistries extends Context.Tag("@delivery/idle-wake/RuntimeRegistries")<
  RuntimeRegistries,
  ReadonlyArray<RuntimeRegistry>
>() {}

export type LocalBlocker = BlockerEntry

const runtimeCode: Record<Exclude<RuntimeState, "running">, BlockerCode> = {
  initializing: "runtime-initializing",
  retiring: "runtime-retiring",
  "retirement-failed": "runtime-retirement-failed"
}

/**
 * The local-work probe (spec 001): unsettled runtime initialization or retirement, failed retirements (also once
 * `get` and `list` hide the runtime), a failed full shutdown, the delivery workers' own states, the local API
 * activity hold and the requests in flight. It reads process memory only: no timer, polling, network or SQL.
 */
export class LocalWork extends Effect.Service<LocalWork>()("@delivery/idle-wake/LocalWork", {
  effect: Effect.gen(function* () {
    const activity = yield* ApiActivity
    const gate = yield* DrainGate
    const workers = yield* WorkerRegistry
    const registries = yield* RuntimeRegistries

    const probe = Effect.gen(function* () {
      const blockers: Array<LocalBlocker> = []
      for (const registry of registries) {
        const { runtimes, shutdownFailed } = yield* registry.unsettled
        for (const runtime of runtimes) blockers.push({ code: runtimeCode[runtime.state], ids: [`${registry.name}/${runtime.id}`] })
        if (shutdownFailed) blockers.push({ code: "service-shutdown-failed", ids: [registry.name] })
      }
      // The delivery workers are the process's other registry: they start before the listener and stop after it, so
      // a drain read sees them running, or failed.
      for (const worker of yield* workers.snapshot) {
        const id = [`workers/${worker.name}`]
        if (worker.status === "starting") blockers.push({ code: "runtime-initializing", ids: id })
        else if (worker.status === "stopping") blockers.push({ code: "runtime-retiring", ids: id })
        else if (worker.status === "failed") blockers.push({ code: "runtime-failed", ids: id })
      }
      if (Option.isSome(yield* activity.remaining)) blockers.push({ code: "local-api-activity" })
      const inFlight = yield* gate.inFlight
      if (inFlight > 0) blockers.push({ code: "requests-in-flight", count: inFlight })
      return blockers
    })

    return { probe } as const
  })
}) {}
