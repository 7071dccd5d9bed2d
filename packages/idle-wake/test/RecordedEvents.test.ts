import { PgClusterFromVitest } from "@delivery/testing/vitest"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Option } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { ConnectorEventInbox } from "../src/ConnectorEventInbox.ts"
import { RECORDED_EVENT_PAGE_LIMIT } from "../src/Domain.ts"
import { tenantWorld } from "./support/Tenant.ts"

// What the operator console reads of the connector events a stack recorded (github-broker-events-v1, tenant side), on
// real PostgreSQL: receipts newest first by keyset on (received_at, event_id), optionally one connector instance's and
// one GitHub event name's, and one receipt by event id; never the payload. Receipts are written at known times.

const PAYLOAD_MARKER = "payload-marker-7d1c"

const world = Effect.gen(function* () {
  const w = yield* tenantWorld()
  const inbox = Context.get(w.context, ConnectorEventInbox)
  /** A receipt `micros` microseconds after a fixed start; returns its event id. */
  const receipt = (micros: number, options: { readonly connector?: string; readonly event?: string; readonly id?: string } = {}) =>
    Effect.gen(function* () {
      const id = options.id ?? randomUUID()
      yield* w.sql`
        INSERT INTO idle_wake_connector_events
          (event_id, delivery_id, connector_instance, endpoint_id, event, payload, cloud_attempt, received_at)
        VALUES (${id}, ${`d-${randomBytes(6).toString("hex")}`}, ${options.connector ?? "connector-1"}, 'endpoint-1',
                ${options.event ?? "issues"}, ${Buffer.from(`{"marker":"${PAYLOAD_MARKER}"}`)}, 2,
                '2026-05-01T00:00:00Z'::timestamptz + ${micros} * interval '1 microsecond')`
      return id
    }).pipe(Effect.orDie)
  return { ...w, inbox, receipt }
})

type Page = { readonly items: ReadonlyArray<{ readonly eventId: string }>; readonly nextCursor: string | null }
const idsOf = (page: Page) => page.items.map((e) => e.eventId)

layer(PgClusterFromVitest, { excludeTestServices: true })("recorded connector events as the console lists them (real PostgreSQL)", (it) => {
  it.scoped("receipts come newest first, ties by event id, page after page by cursor, each exactly once, times that differ below the millisecond included", () =>
    Effect.gen(function* () {
      const { inbox, receipt } = yield* world
      const oldest = yield* receipt(0)
      const [tieLow, tieHigh] = [randomUUID(), randomUUID()].sort()
      yield* receipt(5_000, { id: tieHigh! })
      yield* receipt(5_000, { id: tieLow! })
      const microLater = yield* receipt(5_001)
      const newest = yield* receipt(9_000)
      const expected = [newest, microLater, tieHigh, tieLow, oldest]

      for (const limit of [1, 2]) {
        const seen: Array<string> = []
        let cursor: string | undefined = undefined
        let pages = 0
        do {
          const page: Page = yield* inbox.recordedEvents({ limit, cursor })
          expect(page.items.length).toBeLessThanOrEqual(limit)
          seen.push(...idsOf(page))
          cursor = page.nextCursor ?? undefined
          pages++
        } while (cursor !== undefined && pages < 10)
        expect([limit, seen, pages]).toEqual([limit, expected, Math.ceil(5 / limit)])
      }
      const exact = yield* inbox.recordedEvents({ limit: 5 })
      expect([idsOf(exact), exact.nextCursor]).toEqual([expected, null])
    }))

  it.scoped("the connector and event filters keep one instance's and one event name's receipts, paged the same way; a page holds 1..100 whatever the limit asked", () =>
    Effect.gen(function* () {
      const { inbox, receipt } = yield* world
      const a1 = yield* receipt(1, { connector: "connector-a" })
      const b1 = yield* receipt(2, { connector: "connector-b" })
      const a2 = yield* receipt(3, { connector: "connector-a", event: "push" })
      const a3 = yield* receipt(4, { connector: "connector-a" })
      expect(idsOf(yield* inbox.recordedEvents({ connector: "connector-a" }))).toEqual([a3, a2, a1])
      const first = yield* inbox.recordedEvents({ connector: "connector-a", limit: 2 })
      const second = yield* inbox.recordedEvents({ connector: "connector-a", limit: 2, cursor: first.nextCursor! })
      expect([idsOf(first), idsOf(second), second.nextCursor]).toEqual([[a3, a2], [a1], null])
      expect(idsOf(yield* inbox.recordedEvents({ connector: "connector-b" }))).toEqual([b1])
      expect(idsOf(yield* inbox.recordedEvents({ event: "push" }))).toEqual([a2])
      expect(idsOf(yield* inbox.recordedEvents({ connector: "connector-b", event: "push" }))).toEqual([])
      expect(idsOf(yield* inbox.recordedEvents({ limit: 0 }))).toEqual([a3])

      for (let i = 0; i < RECORDED_EVENT_PAGE_LIMIT + 1; i++) yield* receipt(1_000 + i, { connector: "bulk" })
      const bounded = yield* inbox.recordedEvents({ connector: "bulk", limit: 1_000 })
      expect(bounded.items.length).toBe(RECORDED_EVENT_PAGE_LIMIT)
      const rest = yield* inbox.recordedEvents({ connector: "bulk", cursor: bounded.nextCursor! })
      expect([rest.items.length, rest.nextCursor]).toEqual([1, null])
    }))

  it.scoped("a cursor the service did not write is refused as cursor-invalid", () =>
    Effect.gen(function* () {
      const { inbox } = yield* world
      const id = randomUUID()
      const forged = [
        "not a cursor",
        Buffer.from(id).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000Z|${id}`).toString("base64url"),
        Buffer.from(`2026-02-30T00:00:00.000000Z|${id}`).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000000Z|${id}|x`).toString("base64url"),
        "x".repeat(201)
      ]
      for (const cursor of forged) {
        expect([cursor, yield* Effect.flip(inbox.recordedEvents({ cursor }))]).toMatchObject([cursor, { _tag: "RecordedEventCursorInvalid", reason: "cursor-invalid" }])
      }
    }))

  it.scoped("one receipt by event id: its ids, instance, endpoint, event name, the cloud's attempt and time, never the payload; none for an unknown id or one that is not an id", () =>
    Effect.gen(function* () {
      const { inbox, receipt } = yield* world
      const id = yield* receipt(0, { connector: "connector-x", event: "pull_request" })
      const found = Option.getOrThrow(yield* inbox.recordedEvent(id))
      expect({ ...found, deliveryId: undefined }).toEqual({
        eventId: id,
        deliveryId: undefined,
        connectorInstance: "connector-x",
        endpoint: "endpoint-1",
        event: "pull_request",
        cloudAttempt: 2,
        receivedAt: new Date("2026-05-01T00:00:00Z")
      })
      expect(found.deliveryId).toMatch(/^d-[0-9a-f]{12}$/)
      expect(JSON.stringify(found)).not.toContain(PAYLOAD_MARKER)
      expect(JSON.stringify(yield* inbox.recordedEvents())).not.toContain(PAYLOAD_MARKER)
      expect(yield* inbox.recordedEvent(randomUUID())).toEqual(Option.none())
      expect(yield* inbox.recordedEvent("not-a-uuid")).toEqual(Option.none())
    }))
})
