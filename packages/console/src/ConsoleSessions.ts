import { storageErrors } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Duration, Effect, Option, Redacted, Schema } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { ConsoleConfig } from "./ConsoleConfig.ts"

/** The console's store could not be read or written: every page answers 503 and nothing is changed. */
export class ConsoleStorageUnavailable extends Schema.TaggedError<ConsoleStorageUnavailable>()("ConsoleStorageUnavailable", {
  operation: Schema.String,
  sqlstate: Schema.String
}) {}

export interface ConsoleSession {
  readonly actor: string
  readonly expiresAt: Date
  /** The token every state-changing form of this session carries (see `csrfTokenOf`). */
  readonly csrf: string
}

/** Expired rows swept per sign-in: a bound on the work one sign-in can cost. */
const SWEEP_LIMIT = 100

const hashOf = (token: string): Buffer => createHash("sha256").update(token).digest()

/**
 * The session's CSRF token: derived from the session token by a one-way hash with its own label, so the pages can
 * show it without revealing the cookie, no second secret is stored, and it ends with the session.
 */
export const csrfTokenOf = (token: string): string =>
  createHash("sha256").update("delivery-console-csrf\u0000").update(token).digest("base64url")

/** A session token as the cookie carries it: 32 random bytes, base64url. */
const TOKEN = /^[A-Za-z0-9_-]{43}$/

/**
 * Console sessions in PostgreSQL (`console_sessions`), shared by every process. The browser holds the random
 * token; the table holds its SHA-256 and the time the database says it ends, so every process agrees on expiry.
 */
export class ConsoleSessions extends Effect.Service<ConsoleSessions>()("@delivery/console/ConsoleSessions", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const { sessionTtl } = yield* ConsoleConfig
    const storage = (operation: string) => storageErrors(operation, (fault) => new ConsoleStorageUnavailable(fault))

    const insert = SqlSchema.single({
      Request: Schema.Struct({ hash: Schema.Uint8ArrayFromSelf, actor: Schema.String, ttlMs: Schema.Number }),
      Result: Schema.Struct({ expires_at: Schema.DateFromSelf }),
      execute: (r) => sql`
        INSERT INTO console_sessions (token_hash, actor, created_at, expires_at)
        VALUES (${r.hash}, ${r.actor}, now(), now() + ${r.ttlMs} * interval '1 millisecond')
        RETURNING expires_at`.withoutTransform
    })

    const find = SqlSchema.findOne({
      Request: Schema.Uint8ArrayFromSelf,
      Result: Schema.Struct({ actor: Schema.String, expires_at: Schema.DateFromSelf }),
      execute: (hash) => sql`
        SELECT actor, expires_at FROM console_sessions WHERE token_hash = ${hash} AND expires_at > now()`.withoutTransform
    })

    /** Starts a session for `actor`; the token goes into the cookie and nowhere else. */
    const start = (actor: string) =>
      Effect.gen(function* () {
        const token = randomBytes(32).toString("base64url")
        yield* sql`
          DELETE FROM console_sessions WHERE token_hash IN (
            SELECT token_hash FROM console_sessions WHERE expires_at <= now() ORDER BY expires_at LIMIT ${SWEEP_LIMIT})`
        const row = yield* insert({ hash: hashOf(token), actor, ttlMs: Duration.toMillis(sessionTtl) })
        return { token: Redacted.make(token), session: { actor, expiresAt: row.expires_at, csrf: csrfTokenOf(token) } }
      }).pipe(storage("console.startSession"))

    /** The live session a cookie names, if any: unknown, malformed and expired tokens are all none. */
    const resolve = (token: string): Effect.Effect<Option.Option<ConsoleSession>, ConsoleStorageUnavailable> =>
      TOKEN.test(token)
        ? find(hashOf(token)).pipe(
          Effect.map(Option.map((row) => ({ actor: row.actor, expiresAt: row.expires_at, csrf: csrfTokenOf(token) }))),
          storage("console.resolveSession")
        )
        : Effect.succeedNone

    const end = (token: string) =>
      TOKEN.test(token)
        ? sql`DELETE FROM console_sessions WHERE token_hash = ${hashOf(token)}`.pipe(Effect.asVoid, storage("console.endSession"))
        : Effect.void

    return { start, resolve, end, ttl: sessionTtl } as const
  })
}) {}
