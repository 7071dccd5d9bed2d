import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { EnvelopeInbox } from "../src/index.ts"
import { producer, receive, ServicesLive } from "./support/Harness.ts"

// Inbound streams as the console and /metrics read them (core's QueueView), on real PostgreSQL: payloads retained or
// expired, the payload longest past its expiry, envelopes accepted per five minutes. Identities are append-only, so a
// test that seeds acceptance times compares the windows before and after its own rows.

/** A stream of its own with one identity and payload per entry: accepted and expiring at seconds relative to now(). */
const seed = (entries: ReadonlyArray<{ readonly acceptedAgo: number; readonly expiresIn: number }>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [stream] = yield* sql<{ stream_id: string }>`
      INSERT INTO inbox_streams (tenant, project, producer, created_at, last_received_at)
      VALUES (${`q-${randomBytes(5).toString("hex")}`}, 'website', 'seeded', now(), now()) RETURNING stream_id`.withoutTransform
    for (const [i, entry] of entries.entries()) {
      const sequence = i + 1
      yield* sql`
        INSERT INTO inbox_identities (stream_id, sequence, event_id, idempotency_key, event_identity, accepted_at)
        VALUES (${stream!.stream_id}, ${sequence}, ${`seeded-event-${randomBytes(6).toString("hex")}`}, ${`op-${sequence}`},
                ${randomBytes(32).toString("hex")}, now() - ${entry.acceptedAgo} * interval '1 second')`.withoutTransform
      yield* sql`
        INSERT INTO inbox_payloads (stream_id, sequence, envelope, expires_at)
        VALUES (${stream!.stream_id}, ${sequence}, '{}', now() + ${entry.expiresIn} * interval '1 second')`.withoutTransform
    }
  })

const clearPayloads = Effect.flatMap(SqlClient.SqlClient, (sql) => sql`DELETE FROM inbox_payloads`)
const DAY = 86_400

layer(ServicesLive(), { excludeTestServices: true })("inbound streams queue view (real PostgreSQL)", (it) => {
  it.effect("envelopes accepted through the inbox are retained payloads and count in the current window; duplicates and refusals count nowhere", () =>
    Effect.gen(function* () {
      const view = (yield* EnvelopeInbox).queueView
      expect(yield* view.snapshot).toEqual({
        family: "inbound-streams",
        states: [{ state: "retained", count: 0 }, { state: "expired", count: 0 }],
        oldestDueAgeSeconds: null,
        completedLastHour: Array(12).fill(0)
      })
      const p = yield* producer()
      const first = p.envelope({ sequence: 1 })
      expect((yield* receive(p, first)).outcome).toBe("accepted")
      expect((yield* receive(p, p.envelope({ sequence: 2 }))).outcome).toBe("accepted")
      expect((yield* receive(p, first)).outcome).toBe("duplicate")
      expect(yield* Effect.flip(receive(p, p.envelope({ sequence: 2 })))).toMatchObject({ reason: "sequence-conflict" })
      expect(yield* view.snapshot).toEqual({
        family: "inbound-streams",
        states: [{ state: "retained", count: 2 }, { state: "expired", count: 0 }],
        oldestDueAgeSeconds: null,
        completedLastHour: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]
      })
    }))

  it.effect("a payload past its expiry and not yet swept is expired and due, aged from its expiry; a retained one is neither", () =>
    Effect.gen(function* () {
      yield* clearPayloads
      const view = (yield* EnvelopeInbox).queueView
      yield* seed([{ acceptedAgo: 2 * DAY, expiresIn: 60 }, { acceptedAgo: 2 * DAY, expiresIn: DAY }])
      const retained = yield* view.snapshot
      expect(retained.states).toEqual([{ state: "retained", count: 2 }, { state: "expired", count: 0 }])
      expect(retained.oldestDueAgeSeconds).toBeNull()

      yield* seed([{ acceptedAgo: 2 * DAY, expiresIn: -120 }, { acceptedAgo: 2 * DAY, expiresIn: -30 }])
      const expired = yield* view.snapshot
      expect(expired.states).toEqual([{ state: "retained", count: 2 }, { state: "expired", count: 2 }])
      expect(expired.oldestDueAgeSeconds).toBeGreaterThanOrEqual(120)
      expect(expired.oldestDueAgeSeconds).toBeLessThan(122)
    }))

  it.effect("an accepted envelope lands in the five-minute window of its acceptance, oldest window first, whether or not its payload is still stored; one older than an hour in none", () =>
    Effect.gen(function* () {
      const view = (yield* EnvelopeInbox).queueView
      const before = (yield* view.snapshot).completedLastHour
      yield* seed([
        { acceptedAgo: 2 * 60, expiresIn: DAY },
        { acceptedAgo: 32 * 60, expiresIn: DAY },
        { acceptedAgo: 32 * 60 + 20, expiresIn: -60 },
        { acceptedAgo: 59 * 60, expiresIn: DAY },
        { acceptedAgo: 61 * 60, expiresIn: DAY },
        { acceptedAgo: 2 * DAY, expiresIn: DAY }
      ])
      yield* clearPayloads
      const after = (yield* view.snapshot).completedLastHour
      expect(after.map((n, i) => n - before[i]!)).toEqual([1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1])
    }))
})
