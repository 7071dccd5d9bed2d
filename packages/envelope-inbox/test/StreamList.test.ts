import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { randomBytes } from "node:crypto"
import { EnvelopeInbox, STREAM_PAGE_LIMIT } from "../src/index.ts"
import { newCorrelationId, producer, receive, ServicesLive } from "./support/Harness.ts"

// What the operator console reads of inbound streams, on real PostgreSQL: one tenant's streams by keyset on
// (project, producer), a stream's position with its times, and its replay-floor audit trail.

const freshTenant = () => `s-${randomBytes(5).toString("hex")}`

/** Creates the stream with a floor, as an operator can before a producer sends anything. */
const stream = (tenant: string, project: string, producer: string, floor = 0) =>
  Effect.flatMap(EnvelopeInbox, (inbox) => inbox.raiseReplayFloor({ tenant, project, producer }, floor))

const keysOf = (page: { readonly items: ReadonlyArray<{ readonly project: string; readonly producer: string }> }) =>
  page.items.map((s) => `${s.project}/${s.producer}`)

layer(ServicesLive(), { excludeTestServices: true })("inbound streams as the console lists them (real PostgreSQL)", (it) => {
  it.effect("a tenant's streams come in (project, producer) order, page after page by cursor, each exactly once; other tenants' never", () =>
    Effect.gen(function* () {
      const inbox = yield* EnvelopeInbox
      const tenant = freshTenant()
      // Created out of order, with a name that sorts between the projects' prefixes.
      for (const [project, producer] of [["web", "b"], ["api", "z"], ["web", "a"], ["api", "a"], ["web-2", "a"], ["api", "m"], ["web", "a-1"]]) {
        yield* stream(tenant, project!, producer!)
      }
      yield* stream(freshTenant(), "api", "a")
      const expected = ["api/a", "api/m", "api/z", "web/a", "web/a-1", "web/b", "web-2/a"]

      const seen: Array<string> = []
      let cursor: string | undefined = undefined
      let pages = 0
      do {
        const page: { readonly items: ReadonlyArray<{ project: string; producer: string }>; readonly nextCursor: string | null } =
          yield* inbox.streams(tenant, { limit: 3, cursor })
        expect(page.items.length).toBeLessThanOrEqual(3)
        seen.push(...keysOf(page))
        cursor = page.nextCursor ?? undefined
        pages++
      } while (cursor !== undefined && pages < 10)
      expect(seen).toEqual(expected)
      expect(pages).toBe(3)

      // A page that ends exactly at the last stream says so: no cursor to an empty page.
      const exact = yield* inbox.streams(tenant, { limit: 7 })
      expect([keysOf(exact), exact.nextCursor]).toEqual([expected, null])
      expect(keysOf(yield* inbox.streams(tenant))).toEqual(expected)
      expect((yield* inbox.streams(freshTenant())).items).toEqual([])
    }))

  it.effect("the project filter keeps one project's streams, paged the same way; a page holds 1..100 streams whatever the limit asked", () =>
    Effect.gen(function* () {
      const inbox = yield* EnvelopeInbox
      const tenant = freshTenant()
      for (const [project, producer] of [["web", "b"], ["api", "z"], ["web", "a"], ["web-2", "a"], ["webs", "a"]]) {
        yield* stream(tenant, project!, producer!)
      }
      expect(keysOf(yield* inbox.streams(tenant, { project: "web" }))).toEqual(["web/a", "web/b"])
      const first = yield* inbox.streams(tenant, { project: "web", limit: 1 })
      expect(keysOf(first)).toEqual(["web/a"])
      const second = yield* inbox.streams(tenant, { project: "web", limit: 1, cursor: first.nextCursor! })
      expect([keysOf(second), second.nextCursor]).toEqual([["web/b"], null])
      expect((yield* inbox.streams(tenant, { project: "nothing-here" })).items).toEqual([])
      expect(keysOf(yield* inbox.streams(tenant, { limit: 0 }))).toEqual(["api/z"])

      for (let i = 0; i < STREAM_PAGE_LIMIT + 1; i++) yield* stream(tenant, "bulk", `p-${String(i).padStart(3, "0")}`)
      const bounded = yield* inbox.streams(tenant, { project: "bulk", limit: 1_000 })
      expect(bounded.items.length).toBe(STREAM_PAGE_LIMIT)
      const rest = yield* inbox.streams(tenant, { project: "bulk", cursor: bounded.nextCursor! })
      expect([keysOf(rest), rest.nextCursor]).toEqual([["bulk/p-100"], null])
    }))

  it.effect("a cursor the service did not write is refused as cursor-invalid", () =>
    Effect.gen(function* () {
      const inbox = yield* EnvelopeInbox
      const forged = [
        "not a cursor",
        Buffer.from("web").toString("base64url"),
        Buffer.from("Web/a").toString("base64url"),
        Buffer.from("web/a/b").toString("base64url"),
        Buffer.from("web/").toString("base64url"),
        "x".repeat(201)
      ]
      for (const cursor of forged) {
        expect([cursor, yield* Effect.flip(inbox.streams(freshTenant(), { cursor }))]).toMatchObject([cursor, { _tag: "StreamCursorInvalid", reason: "cursor-invalid" }])
      }
    }))

  it.effect("a stream's summary is its cursor, floor, highest sequence and times; a stream never seen is none", () =>
    Effect.gen(function* () {
      const inbox = yield* EnvelopeInbox
      const p = yield* producer()
      const key = { tenant: p.tenant, project: "website", producer: "laptop-7" }
      expect(yield* inbox.streamSummary(key)).toEqual(Option.none())
      for (const sequence of [1, 2, 4]) expect((yield* receive(p, p.envelope({ sequence }))).outcome).toBe("accepted")
      const summary = Option.getOrThrow(yield* inbox.streamSummary(key))
      expect({ ...summary, createdAt: undefined, lastReceivedAt: undefined }).toEqual({
        ...key, cursor: 2, replayFloor: 0, highSequence: 4, createdAt: undefined, lastReceivedAt: undefined
      })
      expect(summary.lastReceivedAt.getTime()).toBeGreaterThanOrEqual(summary.createdAt.getTime())
      expect((yield* inbox.streams(p.tenant)).items).toEqual([summary])
    }))

  it.effect("a stream's audit trail: every floor request with its outcome, floors before and after, the requested floor, actor, time and correlation id, newest first", () =>
    Effect.gen(function* () {
      const inbox = yield* EnvelopeInbox
      const tenant = freshTenant()
      const key = { tenant, project: "website", producer: "laptop-7" }
      expect(yield* inbox.streamAudit(key)).toEqual([])
      const first = newCorrelationId()
      const second = newCorrelationId()
      expect((yield* inbox.raiseReplayFloorAs(key, 3, { actor: "operator:console", correlationId: first })).outcome).toBe("applied")
      expect((yield* inbox.raiseReplayFloorAs(key, 2, { actor: "operator:environment", correlationId: second })).outcome).toBe("unchanged")
      yield* stream(tenant, "website", "another-laptop", 9)

      const trail = yield* inbox.streamAudit(key)
      expect(trail.map(({ at: _, ...entry }) => ({ ...entry }))).toEqual([
        { action: "replay-floor-raise", outcome: "unchanged", floorBefore: 3, floorAfter: 3, requested: 2, actor: "operator:environment", correlationId: second },
        { action: "replay-floor-raise", outcome: "applied", floorBefore: 0, floorAfter: 3, requested: 3, actor: "operator:console", correlationId: first }
      ])
      expect(trail[0]!.at.getTime()).toBeGreaterThanOrEqual(trail[1]!.at.getTime())
      expect((yield* inbox.streamAudit({ ...key, producer: "another-laptop" })).map((entry) => entry.requested)).toEqual([9])
      expect(yield* inbox.streamAudit({ ...key, tenant: freshTenant() })).toEqual([])
    }))

  it.effect("the audit trail is bounded: the newest 100 floor requests", () =>
    Effect.gen(function* () {
      const inbox = yield* EnvelopeInbox
      const key = { tenant: freshTenant(), project: "website", producer: "laptop-7" }
      for (let floor = 1; floor <= STREAM_PAGE_LIMIT + 5; floor++) yield* inbox.raiseReplayFloor(key, floor)
      const trail = yield* inbox.streamAudit(key)
      expect(trail.length).toBe(STREAM_PAGE_LIMIT)
      expect([trail[0]!.requested, trail[trail.length - 1]!.requested]).toEqual([STREAM_PAGE_LIMIT + 5, 6])
    }))
})
