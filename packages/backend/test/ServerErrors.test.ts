import { expect, layer } from "@effect/vitest"
import { Reactivity } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect, Redacted } from "effect"
import { randomUUID } from "node:crypto"
import { annotation, logEntries, OPERATOR_TOKEN, startBackend } from "./support/Backend.ts"
import { call } from "./support/Http.ts"

const errors = (output: string) => logEntries(output).filter((entry) => / ERROR \(#\d+\)/.test(entry))

/**
 * A message row whose `last_error` is not one of the closed codes: reading it is a defect (a row that does not decode).
 * Due in an hour, so the backend's outbox worker never claims it (and rewrites `last_error`) before the test reads it.
 */
const corruptMessage = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const id = randomUUID()
  const hex = "ab".repeat(32)
  yield* sql`INSERT INTO outbox_envelopes (id, tenant, project, idempotency_key, request_sha256, event_identity, envelope, created_at)
             VALUES (${id}, 'acme', 'web', ${`k-${id}`}, ${hex}, ${hex}, '{}', now())`
  yield* sql`INSERT INTO outbox_messages (id, tenant, project, state, max_attempts, attempt_ceiling, due_at, last_error, created_at)
             VALUES (${id}, 'acme', 'web', 'pending', 3, 3, now() + interval '1 hour', 'not-a-code-s3cret', now())`
  return id
})

layer(TestDatabaseLive, { excludeTestServices: true })("server errors", (it) => {
  it.scoped("A 500 leaves a log line: every 5xx logs one error line at the default level with the correlation id and the defect's kind, never a payload or a secret", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const id = yield* corruptMessage
      const { backend, port } = yield* startBackend()

      const answer = yield* call(port, "GET", `/operator/outbox/messages/acme/web/${id}`, { token: OPERATOR_TOKEN })
      const correlationId = answer.headers["x-correlation-id"]!
      expect([answer.status, answer.json]).toEqual([500, { _tag: "InternalError", reason: "internal-error", correlationId }])
      yield* backend.waitForOutput(new RegExp(`correlationId: ${correlationId}`))
      const logged = errors(yield* backend.output)
      expect(logged).toHaveLength(1)
      expect(["correlationId", "kind", "status"].map((name) => annotation(logged[0]!, name))).toEqual([correlationId, "ParseError", "500"])
      expect(yield* backend.output).not.toContain("s3cret")
      expect(yield* backend.output).not.toContain(OPERATOR_TOKEN)

      // A declared 5xx (503 from /ready while the database is gone) is logged the same way, once per answer.
      const admin = yield* PgClient.make({ url: Redacted.make(db.adminUrl), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
      yield* admin`ALTER DATABASE ${admin(db.name)} ALLOW_CONNECTIONS false`
      yield* admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                   WHERE datname = ${db.name} AND application_name = 'delivery-backend'`
      const notReady = yield* call(port, "GET", "/ready")
      expect(notReady.status).toBe(503)
      const readyId = notReady.headers["x-correlation-id"]!
      yield* backend.waitForOutput(new RegExp(`correlationId: ${readyId}`))
      const after = errors(yield* backend.output).filter((entry) => annotation(entry, "correlationId") === readyId)
      expect(after).toHaveLength(1)
      expect(["kind", "status"].map((name) => annotation(after[0]!, name))).toEqual(["NotReady", "503"])
      yield* admin`ALTER DATABASE ${admin(db.name)} ALLOW_CONNECTIONS true`
    }))
})
