import { type Duration, Effect } from "effect"

/**
 * Runs `read` every `every` until it answers something other than undefined, and answers that. Unbounded on its own:
 * callers bound it (`Effect.timeoutOption`). (`Effect.repeat` with a schedule answers the schedule's output, not the
 * value that ended it.)
 */
export const pollUntil = <A, E, R>(read: Effect.Effect<A | undefined, E, R>, every: Duration.DurationInput): Effect.Effect<A, E, R> =>
  Effect.gen(function* () {
    while (true) {
      const value = yield* read
      if (value !== undefined) return value
      yield* Effect.sleep(every)
    }
  })
