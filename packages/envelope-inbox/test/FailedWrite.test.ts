import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { auditOf, counts, post, producer, type Producer, streamOf, SuiteLive } from "./support/Harness.ts"

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
})
