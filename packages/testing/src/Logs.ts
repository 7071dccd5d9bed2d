import { Cause, Effect, HashMap, Logger, Queue } from "effect"

export interface LogEntry {
  readonly message: string
  readonly annotations: Readonly<Record<string, unknown>>
  /** The cause logged with the message, rendered; absent when none was. */
  readonly cause?: string
}

/**
 * A logger whose entries a test can wait for: the signal that a background loop reached a point (a failed
 * tick, say) instead of sleeping and hoping it did. `layer` replaces the default logger of what it is
 * provided to, forked fibers included.
 */
export const logProbe = Effect.gen(function* () {
  const entries = yield* Queue.unbounded<LogEntry>()
  const logger = Logger.make(({ annotations, cause, message }) => {
    Queue.unsafeOffer(entries, {
      message: (Array.isArray(message) ? message : [message]).map(String).join(" "),
      annotations: Object.fromEntries(HashMap.toEntries(annotations)),
      ...(Cause.isEmpty(cause) ? {} : { cause: Cause.pretty(cause) })
    })
  })
  /** Waits for the next entry that satisfies `predicate`, skipping the others. */
  const next = (predicate: (entry: LogEntry) => boolean): Effect.Effect<LogEntry> =>
    Effect.flatMap(Queue.take(entries), (entry) => (predicate(entry) ? Effect.succeed(entry) : next(predicate)))
  return { layer: Logger.replace(Logger.defaultLogger, logger), next } as const
})
