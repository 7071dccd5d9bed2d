import type { SqlError } from "@effect/sql"
import { Effect, type ParseResult, Predicate } from "effect"

/** What is kept of a database failure: the operation and the SQLSTATE, never the driver's message (it can quote parameters). */
export interface StorageFault {
  readonly operation: string
  readonly sqlstate: string
}

const sqlstateOf = (error: SqlError.SqlError): string => {
  const code = (error.cause as { readonly code?: unknown } | undefined)?.code
  return typeof code === "string" ? code : "unknown"
}

/**
 * A database failure is an expected outcome for a delivery system (retry later), so it becomes the
 * package's own typed error; a row that does not decode is a bug and dies. Other errors pass through.
 */
export const storageErrors = <F>(operation: string, toFailure: (fault: StorageFault) => F) =>
<A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, SqlError.SqlError | ParseResult.ParseError> | F, R> =>
  Effect.catchAll(effect, (error): Effect.Effect<never, Exclude<E, SqlError.SqlError | ParseResult.ParseError> | F> => {
    if (Predicate.isTagged(error, "ParseError")) return Effect.die(error)
    if (!Predicate.isTagged(error, "SqlError")) {
      return Effect.fail(error as Exclude<E, SqlError.SqlError | ParseResult.ParseError>)
    }
    const fault = { operation, sqlstate: sqlstateOf(error as unknown as SqlError.SqlError) }
    return Effect.logWarning("storage unavailable").pipe(
      Effect.annotateLogs({ ...fault }),
      Effect.zipRight(Effect.fail(toFailure(fault)))
    )
  })
