import { expect, layer } from "@effect/vitest"
import { SqlClient, type SqlError } from "@effect/sql"
import { Effect } from "effect"
import { EnvelopeInbox } from "../src/index.ts"
import { counts, producer, type Producer, receive, ServicesLive, streamOf } from "./support/Harness.ts"

// The schema itself, not the code, keeps identities and audit rows permanent and cursors and floors moving
// forward (migrations/0003_inbox_envelopes.sql), so a wrong statement or a hand-made "fix" cannot make an
// old event new again. Each statement runs as the migrating user, which owns the tables and may do anything
// else; it runs in a transaction that is rolled back in any case, so a missing trigger fails the test but
// leaves the database as it was.

/** The SQLSTATE and message with which the database refused `statement`; a statement it took is a failure. */
const refusalOf = (statement: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const outcome = yield* sql.withTransaction(
      Effect.zipRight(sql.unsafe(statement), Effect.fail({ _tag: "Taken" } as const))
    ).pipe(Effect.flip)
    if (outcome._tag === "Taken") return { statement, taken: true }
    const cause = (outcome as SqlError.SqlError).cause as { readonly code?: string; readonly message?: string }
    return { statement, sqlstate: cause.code, message: cause.message }
  })

const withHistory = Effect.gen(function* () {
  const p = yield* producer()
  for (const sequence of [1, 2, 3]) yield* receive(p, p.envelope({ sequence }))
  yield* Effect.flatMap(EnvelopeInbox, (inbox) => inbox.raiseReplayFloor({ tenant: p.tenant, project: "website", producer: "laptop-7" }, 2))
  return p
})

const streamWhere = (p: Producer) => `tenant = '${p.tenant}'`

layer(ServicesLive(), { excludeTestServices: true })("the inbox's tables refuse to forget or go back (spec 000 recovery: never reset cursors, replay floors or idempotency identities)", (it) => {
  it.effect("identities and audit rows are append-only: UPDATE, DELETE and TRUNCATE are refused by the database itself, and change nothing", () =>
    Effect.gen(function* () {
      const p = yield* withHistory
      const before = yield* counts(p.tenant)
      const ofStream = `stream_id = (SELECT stream_id FROM inbox_streams WHERE ${streamWhere(p)})`
      const statements = [
        `UPDATE inbox_identities SET event_id = 'rewritten-event-0001' WHERE ${ofStream}`,
        `UPDATE inbox_identities SET sequence = sequence + 100 WHERE ${ofStream}`,
        `DELETE FROM inbox_payloads WHERE ${ofStream}; DELETE FROM inbox_identities WHERE ${ofStream}`,
        `TRUNCATE inbox_identities CASCADE`,
        `UPDATE inbox_audit SET reason = 'accepted' WHERE tenant = '${p.tenant}'`,
        `DELETE FROM inbox_audit WHERE tenant = '${p.tenant}'`,
        `TRUNCATE inbox_audit`
      ]
      for (const statement of statements) {
        const refused = yield* refusalOf(statement)
        expect(refused).toMatchObject({ statement, sqlstate: "P0001" })
        expect(refused.message).toMatch(/^inbox_(identities|audit) is append-only$/)
      }
      expect(yield* counts(p.tenant)).toEqual(before)
    }))

  it.effect("a stream's contiguous cursor, replay floor and high sequence only move forward, and a stream is never renamed", () =>
    Effect.gen(function* () {
      const p = yield* withHistory
      const before = yield* streamOf(p.tenant)
      expect(before).toEqual({ cursor: 3, floor: 2, high: 3 })
      const statements = [
        `UPDATE inbox_streams SET contiguous_cursor = contiguous_cursor - 1 WHERE ${streamWhere(p)}`,
        `UPDATE inbox_streams SET contiguous_cursor = 2 WHERE ${streamWhere(p)}`,
        `UPDATE inbox_streams SET replay_floor = replay_floor - 1 WHERE ${streamWhere(p)}`,
        `UPDATE inbox_streams SET replay_floor = 0 WHERE ${streamWhere(p)}`,
        `UPDATE inbox_streams SET high_sequence = 1 WHERE ${streamWhere(p)}`,
        `UPDATE inbox_streams SET producer = 'laptop-8' WHERE ${streamWhere(p)}`,
        `UPDATE inbox_streams SET tenant = 'another-tenant' WHERE ${streamWhere(p)}`
      ]
      for (const statement of statements) {
        expect(yield* refusalOf(statement)).toEqual({ statement, sqlstate: "23514", message: "inbox streams only move forward" })
      }
      expect(yield* streamOf(p.tenant)).toEqual(before)
      // Forward is fine (and is what raiseReplayFloor does).
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`UPDATE inbox_streams SET replay_floor = 3 WHERE ${streamWhere(p)}`)
      expect(yield* streamOf(p.tenant)).toEqual({ cursor: 3, floor: 3, high: 3 })
    }))
})
