import { Data, Effect, Exit, Option } from "effect"

// A process-local registry of runtimes that are started and retired while the process runs (spec 001, "The service
// also keeps its existing local-work probe active while runtime initialization or retirement is unsettled"). The
// local-work probe reads every registry's `unsettled` list: no polling, network or SQL.

export type RuntimeState = "initializing" | "running" | "retiring" | "retirement-failed"

export interface RuntimeView {
  readonly registry: string
  readonly id: string
  readonly owner: string
  readonly state: RuntimeState
}

/** A runtime that is not simply running: what the local-work probe reports. */
export type UnsettledRuntime = RuntimeView & { readonly state: Exclude<RuntimeState, "running"> }

export class RuntimeConflict extends Data.TaggedError("RuntimeConflict")<{ readonly registry: string; readonly id: string }> {}
export class RuntimeNotFound extends Data.TaggedError("RuntimeNotFound")<{ readonly registry: string; readonly id: string }> {}
export class RuntimeNotOwned extends Data.TaggedError("RuntimeNotOwned")<{ readonly registry: string; readonly id: string }> {}

export interface RuntimeRegistry {
  readonly name: string
  /** A runtime starts initializing; an id still registered (in any state) is a conflict. */
  readonly begin: (id: string, owner: string) => Effect.Effect<void, RuntimeConflict>
  /** Initialization settled: the runtime runs. */
  readonly ready: (id: string) => Effect.Effect<void, RuntimeNotFound>
  /** Initialization settled by failing: nothing of it runs, so nothing is owed. */
  readonly initializationFailed: (id: string) => Effect.Effect<void, RuntimeNotFound>
  /**
   * Retires the runtime by running `stop`. From the first attempt on, `get` and `list` no longer show it. When `stop`
   * fails (or is interrupted) the runtime stays as `retirement-failed`: hidden, still reported by `unsettled`, until
   * a retry by the same owner succeeds. Another owner's retry is refused.
   */
  readonly retire: <E, R>(
    id: string,
    owner: string,
    stop: Effect.Effect<void, E, R>
  ) => Effect.Effect<void, E | RuntimeNotFound | RuntimeNotOwned | RuntimeConflict, R>
  /**
   * A full shutdown of the registry: retires every runtime (each with its own `stop`). If any retirement fails the
   * registry keeps reporting `service-shutdown-failed` for the rest of the process, whatever later retries do.
   */
  readonly shutdown: <E, R>(
    stop: (runtime: RuntimeView) => Effect.Effect<void, E, R>
  ) => Effect.Effect<void, E | RuntimeNotFound | RuntimeNotOwned | RuntimeConflict, R>
  readonly get: (id: string) => Effect.Effect<Option.Option<RuntimeView>>
  readonly list: Effect.Effect<ReadonlyArray<RuntimeView>>
  /** Initializing, retiring and failed retirements, and whether a full shutdown failed. */
  readonly unsettled: Effect.Effect<{ readonly runtimes: ReadonlyArray<UnsettledRuntime>; readonly shutdownFailed: boolean }>
}

const visible = (view: RuntimeView) => view.state === "initializing" || view.state === "running"

export const makeRuntimeRegistry = (name: string): RuntimeRegistry => {
  const runtimes = new Map<string, RuntimeView>()
  let shutdownFailed = false

  const set = (id: string, owner: string, state: RuntimeState) => {
    runtimes.set(id, { registry: name, id, owner, state })
  }
  const existing = (id: string) =>
    Effect.suspend(() => {
      const view = runtimes.get(id)
      return view === undefined ? Effect.fail(new RuntimeNotFound({ registry: name, id })) : Effect.succeed(view)
    })

  const retire = <E, R>(id: string, owner: string, stop: Effect.Effect<void, E, R>) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.gen(function* () {
        const view = yield* existing(id)
        if (view.owner !== owner) return yield* Effect.fail(new RuntimeNotOwned({ registry: name, id }))
        // One retirement at a time: a second one while the first runs would race it.
        if (view.state === "retiring" || view.state === "initializing") {
          return yield* Effect.fail(new RuntimeConflict({ registry: name, id }))
        }
        set(id, owner, "retiring")
        const exit = yield* Effect.exit(restore(stop))
        if (Exit.isSuccess(exit)) runtimes.delete(id)
        else set(id, owner, "retirement-failed")
        return yield* exit
      })
    )

  return {
    name,
    begin: (id, owner) =>
      Effect.suspend(() => {
        if (runtimes.has(id)) return Effect.fail(new RuntimeConflict({ registry: name, id }))
        set(id, owner, "initializing")
        return Effect.void
      }),
    ready: (id) =>
      Effect.flatMap(existing(id), (view) =>
        view.state === "initializing" ? Effect.sync(() => set(id, view.owner, "running")) : Effect.void),
    initializationFailed: (id) =>
      Effect.flatMap(existing(id), (view) =>
        view.state === "initializing" ? Effect.sync(() => void runtimes.delete(id)) : Effect.void),
    retire,
    shutdown: (stop) =>
      Effect.gen(function* () {
        const all = [...runtimes.values()].filter((view) => view.state !== "retiring")
        const exits = yield* Effect.forEach(all, (view) => Effect.exit(retire(view.id, view.owner, stop(view))))
        const failed = exits.find(Exit.isFailure)
        if (failed !== undefined) {
          shutdownFailed = true
          return yield* failed
        }
      }),
    get: (id) => Effect.sync(() => Option.filter(Option.fromNullable(runtimes.get(id)), visible)),
    list: Effect.sync(() => [...runtimes.values()].filter(visible)),
    unsettled: Effect.sync(() => ({
      runtimes: [...runtimes.values()].filter((view): view is UnsettledRuntime => view.state !== "running"),
      shutdownFailed
    }))
  }
}
