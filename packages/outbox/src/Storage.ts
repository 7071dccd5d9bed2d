import type { SqlError } from "@effect/sql"
import { Cause, Effect, type ParseResult, Predicate } from "effect"
import { OutboxStorageUnavailable } from "./Domain.ts"

type Stored<E> = Exclude<E, SqlError.SqlError | ParseResult.ParseError> | OutboxStorageUnavailable

/**
 * A database failure is an expected outcome (retry later), so it becomes a typed error; a row that
 * does not decode is a bug and dies. Only the SQLSTATE is logged: driver errors can quote parameters.
 */
export const storage = (operation: string) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, Stored<E>, R> =>
  Effect.catchAll(effect, (error): Effect.Effect<never, Stored<E>> => {
    if (Predicate.isTagged(error, "ParseError")) return Effect.die(error)
    if (!Predicate.isTagged(error, "SqlError")) return Effect.fail(error as Exclude<E, SqlError.SqlError | ParseResult.ParseError>)
    const code = ((error as unknown as SqlError.SqlError).cause as { readonly code?: unknown } | undefined)?.code
    return Effect.logWarning("outbox storage unavailable").pipe(
      Effect.annotateLogs({ operation, sqlstate: typeof code === "string" ? code : "unknown" }),
      Effect.zipRight(Effect.fail(new OutboxStorageUnavailable({ operation })))
    )
  })

/** INSERT/UPDATE ... RETURNING without the row that is certain to be there is a bug, not an outcome. */
export const orDieIfMissing = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.catchIf(effect, (e): e is Extract<E, Cause.NoSuchElementException> => Cause.isNoSuchElementException(e), Effect.die)
