import type { SqlError } from "@effect/sql"
import { Effect, Option, type ParseResult, Predicate } from "effect"

/**
 * A statement whose text ends with this comment is sent as a named prepared statement by the backend's pool
 * (packages/backend/src/Database.ts): node-postgres parses it once per connection (and PostgreSQL plans it from then
 * on as it sees fit) and afterwards sends only Bind and Execute. For the few statements that run on every request or
 * batch (the credential lookups, the inbox's ingest, the outbox's peek and claim): their texts are fixed, so each
 * connection holds a handful of them. Never for statements built with a varying shape (lists, `sql.in`), which would
 * pile up prepared statements for the life of the connection, nor for `SELECT *` (a column added by a migration
 * would make the cached plan's result type fail).
 */
export const PREPARED_MARKER = "/* prepared */"

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
 *
 * `@effect/sql` dies with the `SqlError` when a transaction's COMMIT or ROLLBACK fails (the connection lost at that
 * moment). Such a transaction may or may not have committed, like any write whose answer was lost, so it is the same
 * typed failure: the caller answers "try again", and a command sent again is replayed or recorded once.
 */
export const storageErrors = <F>(operation: string, toFailure: (fault: StorageFault) => F) =>
<A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, SqlError.SqlError | ParseResult.ParseError> | F, R> => {
  const unavailable = (error: SqlError.SqlError) => {
    const fault = { operation, sqlstate: sqlstateOf(error) }
    return Effect.logWarning("storage unavailable").pipe(
      Effect.annotateLogs({ ...fault }),
      Effect.zipRight(Effect.fail(toFailure(fault)))
    )
  }
  return Effect.catchAll(effect, (error): Effect.Effect<never, Exclude<E, SqlError.SqlError | ParseResult.ParseError> | F> => {
    if (Predicate.isTagged(error, "ParseError")) return Effect.die(error)
    if (!Predicate.isTagged(error, "SqlError")) {
      return Effect.fail(error as Exclude<E, SqlError.SqlError | ParseResult.ParseError>)
    }
    return unavailable(error as unknown as SqlError.SqlError)
  }).pipe(
    Effect.catchSomeDefect((defect) =>
      Predicate.isTagged(defect, "SqlError") ? Option.some(unavailable(defect as SqlError.SqlError)) : Option.none()
    )
  )
}

/**
 * Whether a storage fault means the database could not be reached (the server is down, restarting or refusing
 * connections) rather than that it refused a statement: SQLSTATE class 08 (connection exception), 57P01-57P03
 * (administrator or crash shutdown, cannot connect now), 53300 (too many connections), a socket error code
 * (ECONNREFUSED, ECONNRESET, ...) or no code at all (the connection ended without an answer). A worker waits
 * such an outage out; any other database error (an undefined table, a constraint, a permission) is not one.
 */
export const isConnectionLoss = (sqlstate: string): boolean =>
  sqlstate === "unknown" ||
  sqlstate.startsWith("08") ||
  ["57P01", "57P02", "57P03", "53300"].includes(sqlstate) ||
  /^E[A-Z]+$/.test(sqlstate)
