import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { EnvelopeInbox } from "../src/index.ts"
import { auditOf, counts, post, producer, type Producer, receive, streamOf, SuiteLive } from "./support/Harness.ts"
import { logProbe } from "@delivery/testing"

/**
 * Installs a trigger that fails one write of one tenant, runs `effect`, and removes the trigger.
 * `deferred` makes it a constraint trigger checked at COMMIT: the commit itself fails.
 */
const failing = <A, E, R>(
  failure: { readonly table: string; readonly event: string; readonly when: string; readonly deferred?: boolean },
  effect: Effect.Effect<A, E, R>
) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const name = `fail_${randomBytes(4).toString("hex")}`
    yield* sql.unsafe(`CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF ${failure.when} THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$`)
    yield* sql.unsafe(failure.deferred === true
      ? `CREATE CONSTRAINT TRIGGER ${name} AFTER ${failure.event} ON ${failure.table}
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ${name}()`
      : `CREATE TRIGGER ${name} BEFORE ${failure.event} ON ${failure.table} FOR EACH ROW EXECUTE FUNCTION ${name}()`)
    return yield* Effect.ensuring(
      effect,
      Effect.orDie(sql.unsafe(`DROP TRIGGER ${name} ON ${failure.table}; DROP FUNCTION ${name}()`))
    )
  })

/** Runs `effect` while `table` is renamed away (so every statement on it fails with 42P01), then puts it back. */
const renamedAway = <A, E, R>(table: string, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe(`ALTER TABLE ${table} RENAME TO ${table}_away`)
    return yield* Effect.ensuring(effect, Effect.orDie(sql.unsafe(`ALTER TABLE ${table}_away RENAME TO ${table}`)))
  })

const ofTenant = (p: Producer) => `(SELECT tenant FROM inbox_streams WHERE stream_id = NEW.stream_id) = '${p.tenant}'`

const writes: ReadonlyArray<{ readonly name: string; readonly failure: (p: Producer) => Parameters<typeof failing>[0] }> = [
  { name: "identity", failure: (p) => ({ table: "inbox_identities", event: "INSERT", when: ofTenant(p) }) },
  { name: "payload", failure: (p) => ({ table: "inbox_payloads", event: "INSERT", when: ofTenant(p) }) },
  {
    name: "cursor",
    failure: (p) => ({
      table: "inbox_streams",
      event: "UPDATE",
      when: `NEW.tenant = '${p.tenant}' AND NEW.contiguous_cursor <> OLD.contiguous_cursor`
    })
  },
  { name: "audit", failure: (p) => ({ table: "inbox_audit", event: "INSERT", when: `NEW.tenant = '${p.tenant}'` }) },
  { name: "commit", failure: (p) => ({ table: "inbox_identities", event: "INSERT", when: ofTenant(p), deferred: true }) }
]

layer(SuiteLive(), { excludeTestServices: true })("A failed identity, payload, cursor, audit, or commit returns no acknowledgement, so retry is safe", (it) => {
  for (const write of writes) {
    it.effect(`a failed ${write.name} write: 503 storage-unavailable with Retry-After, nothing committed; the retry is accepted`, () =>
      Effect.gen(function* () {
        const p = yield* producer()
        const envelope = p.envelope({ sequence: 1 })
        const answer = yield* failing(write.failure(p), post(envelope, p.token))
        expect(answer.status).toBe(503)
        expect(answer.body).toEqual({
          _tag: "InboxStorageUnavailable",
          reason: "storage-unavailable",
          correlationId: answer.headers["x-correlation-id"]
        })
        expect(answer.headers["retry-after"]).toBe("1")
        // Not even the stream row: the whole transaction was rolled back.
        expect(yield* counts(p.tenant)).toEqual({ streams: 0, identities: 0, payloads: 0, audit: 0 })
        const retry = yield* post(envelope, p.token)
        expect([retry.status, retry.body.outcome]).toEqual([201, "accepted"])
        expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 1, payloads: 1, audit: 1 })
      }))
  }

  it.effect("a duplicate is not acknowledged when its duplicate audit row cannot be committed", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const envelope = p.envelope({ sequence: 1 })
      expect((yield* post(envelope, p.token)).status).toBe(201)
      const answer = yield* failing({ table: "inbox_audit", event: "INSERT", when: `NEW.tenant = '${p.tenant}'` }, post(envelope, p.token))
      expect([answer.status, answer.body.reason]).toEqual([503, "storage-unavailable"])
      expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 1, payloads: 1, audit: 1 })
      expect((yield* post(envelope, p.token)).status).toBe(200)
      expect((yield* auditOf(p.tenant)).map((row) => row.outcome)).toEqual(["accepted", "duplicate"])
    }))

  it.effect("a refusal is not answered when its audit row cannot be committed (503, then the refusal on retry)", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const foreign = { ...p.envelope({ sequence: 1 }), route: { tenant: "another-tenant", project: "website", producer: "x" } }
      const answer = yield* failing({ table: "inbox_audit", event: "INSERT", when: `NEW.tenant = '${p.tenant}'` }, post(foreign, p.token))
      expect([answer.status, answer.body.reason]).toEqual([503, "storage-unavailable"])
      expect(yield* counts(p.tenant)).toMatchObject({ audit: 0 })
      const retry = yield* post(foreign, p.token)
      expect([retry.status, retry.body.reason]).toEqual([403, "route-tenant-mismatch"])
      expect(yield* streamOf(p.tenant)).toBeUndefined()
    }))

  it.effect("a failed write is logged as a warning with its operation and SQLSTATE, and answered 503 storage-unavailable with nothing committed", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const logs = yield* logProbe
      const unavailable = logs.next((entry) => entry.message.includes("inbox storage unavailable"))
      const envelope = p.envelope({ sequence: 1 })
      const refused = yield* failing(
        { table: "inbox_payloads", event: "INSERT", when: ofTenant(p) },
        Effect.flip(Effect.provide(receive(p, envelope), logs.layer))
      )
      expect(refused).toMatchObject({ _tag: "InboxStorageUnavailable", reason: "storage-unavailable" })
      expect((yield* unavailable).annotations).toMatchObject({ operation: "ingest", sqlstate: "P0001" })
      const foreign = { ...envelope, route: { tenant: "another-tenant", project: "website", producer: "x" } }
      yield* failing(
        { table: "inbox_audit", event: "INSERT", when: `NEW.tenant = '${p.tenant}'` },
        Effect.flip(Effect.provide(receive(p, foreign), logs.layer))
      )
      expect((yield* unavailable).annotations).toMatchObject({ operation: "insertAudit", sqlstate: "P0001" })
      expect(yield* counts(p.tenant)).toEqual({ streams: 0, identities: 0, payloads: 0, audit: 0 })
    }))

  it.effect("resolve keys inside the verified scope: when the signing keys cannot be read, the answer is 503 storage-unavailable, never a key refusal, and nothing is committed", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const envelope = p.envelope({ sequence: 1 })
      const refused = yield* renamedAway("signer_keys", Effect.flip(receive(p, envelope)))
      expect(refused).toMatchObject({ _tag: "InboxStorageUnavailable", reason: "storage-unavailable" })
      expect(yield* counts(p.tenant)).toEqual({ streams: 0, identities: 0, payloads: 0, audit: 0 })
      expect((yield* receive(p, envelope)).outcome).toBe("accepted")
    }))

  it.effect("raising the replay floor is one transaction: a failed stream lock, run read, floor write or commit moves neither floor nor cursor, and the failure names its operation", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const inbox = yield* EnvelopeInbox
      const key = { tenant: p.tenant, project: "website", producer: "laptop-7" }
      for (const sequence of [1, 2, 5]) expect((yield* post(p.envelope({ sequence }), p.token)).status).toBe(201)
      const floorMoves = `NEW.tenant = '${p.tenant}' AND NEW.replay_floor <> OLD.replay_floor`
      const raise = inbox.raiseReplayFloor(key, 4)
      const failures: ReadonlyArray<[string, string, Effect.Effect<unknown, unknown, SqlClient.SqlClient>]> = [
        ["lockStream", "P0001", failing({ table: "inbox_streams", event: "INSERT", when: `NEW.tenant = '${p.tenant}'` }, Effect.flip(raise))],
        ["runEnd", "42P01", renamedAway("inbox_identities", Effect.flip(raise))],
        ["raiseFloor", "P0001", failing({ table: "inbox_streams", event: "UPDATE", when: floorMoves }, Effect.flip(raise))],
        ["raiseReplayFloor", "P0001", failing({ table: "inbox_streams", event: "UPDATE", when: floorMoves, deferred: true }, Effect.flip(raise))]
      ]
      for (const [operation, sqlstate, failed] of failures) {
        expect(yield* failed).toMatchObject({ _tag: "StorageFailure", operation, sqlstate })
        expect(yield* streamOf(p.tenant)).toEqual({ cursor: 2, floor: 0, high: 5 })
      }
      // A stream read fails the same way, naming its own operation.
      expect(yield* renamedAway("inbox_streams", Effect.flip(inbox.stream(key)))).toMatchObject({ _tag: "StorageFailure", operation: "findStream", sqlstate: "42P01" })
      expect(yield* raise).toMatchObject({ cursor: 5, replayFloor: 4, highSequence: 5 })
    }))
})
