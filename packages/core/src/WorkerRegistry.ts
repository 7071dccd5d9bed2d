import { Effect, Ref } from "effect"

export type WorkerStatus = "starting" | "running" | "stopping" | "stopped" | "failed"

export interface WorkerState {
  readonly name: string
  readonly status: WorkerStatus
}

/**
 * Which workers this process started and whether each is running. Workers register before they are forked and
 * mark themselves running from inside their fiber, so `/ready` never reports a worker that has not started.
 */
export class WorkerRegistry extends Effect.Service<WorkerRegistry>()("@delivery/core/WorkerRegistry", {
  effect: Effect.gen(function* () {
    const workers = yield* Ref.make<ReadonlyMap<string, WorkerStatus>>(new Map())
    const set = (name: string, status: WorkerStatus) =>
      Ref.update(workers, (current) => new Map(current).set(name, status))

    return {
      /** Two workers under one name would make readiness ambiguous: that is a composition bug. */
      register: (name: string) =>
        Ref.get(workers).pipe(
          Effect.flatMap((current) =>
            current.has(name) ? Effect.dieMessage(`worker registered twice: ${name}`) : set(name, "starting")
          )
        ),
      markRunning: (name: string) => set(name, "running"),
      markStopping: (name: string) => set(name, "stopping"),
      markStopped: (name: string) => set(name, "stopped"),
      markFailed: (name: string) => set(name, "failed"),
      snapshot: Effect.map(
        Ref.get(workers),
        (current): ReadonlyArray<WorkerState> => [...current].map(([name, status]) => ({ name, status }))
      )
    } as const
  })
}) {}
