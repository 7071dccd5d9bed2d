import { Cause, Effect, FiberRef, HashSet, Logger } from "effect"
import { type LogFormat, LogFormatConfig } from "./ObservabilityConfig.ts"

const loggers: Record<LogFormat, Logger.Logger<unknown, void>> = {
  pretty: Logger.prettyLoggerDefault,
  logfmt: Logger.withConsoleLog(Logger.logfmtLogger),
  json: Logger.withConsoleLog(Logger.jsonLogger)
}

/**
 * Runs `self` with LOG_FORMAT's logger in place of the runtime's (the runtime adds its pretty logger to the main
 * fiber). Effect's tracer logger stays: log lines inside a span remain span events (never exported, see Telemetry).
 */
export const withLogFormat = (format: LogFormat) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.locallyWith(self, FiberRef.currentLoggers, (current) =>
    current.pipe(
      HashSet.remove(Logger.defaultLogger),
      HashSet.remove(Logger.prettyLoggerDefault),
      HashSet.add(loggers[format])
    ))

/**
 * The process's main effect with its log format, and its failure reported in that format too (so a JSON log stays
 * JSON to its last line); run it with the runtime's own reporting disabled. An invalid LOG_FORMAT leaves the default
 * format in place: the configuration check then stops start-up naming the variable.
 */
export const withProcessLogging = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.orElseSucceed(LogFormatConfig, (): LogFormat => "pretty"), (format) =>
    self.pipe(
      Effect.tapErrorCause((cause) => (Cause.isInterruptedOnly(cause) ? Effect.void : Effect.logError(cause))),
      withLogFormat(format)
    ))
