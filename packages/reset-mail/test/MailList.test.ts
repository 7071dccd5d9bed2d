import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { RESET_MAIL_PAGE_LIMIT } from "../src/ResetMailItems.ts"
import { ResetMailRepo } from "../src/ResetMailRepo.ts"
import { ResetRequests } from "../src/ResetRequests.ts"
import { fixture, requestReset, SuiteLayer } from "./support.ts"

// What the operator console reads of reset mail, on real PostgreSQL: one tenant's rows by keyset on (created_at, id),
// optionally in one state, and one row by id; never the address, token or body (the table holds none of them).

const freshTenant = () => `r-${randomBytes(4).toString("hex")}`

/** Rows committed at known times (milliseconds from a fixed start), as the request path writes them. */
const rows = (tenant: string, offsets: ReadonlyArray<number>) =>
  Effect.gen(function* () {
    const repo = yield* ResetMailRepo
    const start = Date.parse("2026-05-01T00:00:00.000Z")
    const ids: Array<string> = []
    for (const offset of offsets) {
      const id = randomUUID()
      yield* repo.insert({ id, verificationId: randomUUID(), tenant, at: new Date(start + offset) })
      ids.push(id)
    }
    return ids
  }).pipe(Effect.orDie)

const idsOf = (page: { readonly items: ReadonlyArray<{ readonly id: string }> }) => page.items.map((item) => item.id)

/** Every page of a listing, following the cursor. */
const allPages = (tenant: string, options: { readonly state?: "pending" | "quarantined"; readonly limit: number }) =>
  Effect.gen(function* () {
    const requests = yield* ResetRequests
    const seen: Array<string> = []
    let cursor: string | undefined = undefined
    let pages = 0
    do {
      const page: { readonly items: ReadonlyArray<{ readonly id: string }>; readonly nextCursor: string | null } =
        yield* requests.mails(tenant, { ...options, cursor })
      expect(page.items.length).toBeLessThanOrEqual(options.limit)
      seen.push(...idsOf(page))
      cursor = page.nextCursor ?? undefined
      pages++
    } while (cursor !== undefined && pages < 20)
    return { seen, pages }
  })

layer(SuiteLayer, { excludeTestServices: true })("reset mail as the console lists it (real PostgreSQL)", (it) => {
  it.effect("a tenant's rows come oldest first, ties by id, page after page by cursor, each exactly once; other tenants' never", () =>
    Effect.gen(function* () {
      const requests = yield* ResetRequests
      const tenant = freshTenant()
      // Out of order, two at the same millisecond.
      const ids = yield* rows(tenant, [30, 10, 20, 20, 40, 0, 50])
      yield* rows(freshTenant(), [15, 25])
      const expected = [5, 1, ...[2, 3].sort((a, b) => (ids[a]! < ids[b]! ? -1 : 1)), 0, 4, 6].map((i) => ids[i]!)

      const { pages, seen } = yield* allPages(tenant, { limit: 3 })
      expect(seen).toEqual(expected)
      expect(pages).toBe(3)

      // A page that ends exactly at the last row says so: no cursor to an empty page.
      const exact = yield* requests.mails(tenant, { limit: 7 })
      expect([idsOf(exact), exact.nextCursor]).toEqual([expected, null])
      expect(idsOf(yield* requests.mails(tenant))).toEqual(expected)
      expect((yield* requests.mails(freshTenant())).items).toEqual([])
    }))

  it.effect("times that differ below the millisecond keep their order across a page boundary", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const tenant = freshTenant()
      const ids = yield* rows(tenant, [0, 0, 0])
      // The database's own clock writes microseconds: the cursor must carry them.
      for (const [i, micros] of [[0, 300], [1, 100], [2, 200]] as const) {
        yield* sql`UPDATE reset_mail_outbox SET created_at = '2026-05-01T00:00:00Z'::timestamptz + ${micros} * interval '1 microsecond'
                   WHERE id = ${ids[i]!}`
      }
      expect((yield* allPages(tenant, { limit: 1 })).seen).toEqual([ids[1], ids[2], ids[0]])
    }))

  it.effect("the state filter keeps one state's rows, paged the same way; a page holds 1..100 rows whatever the limit asked", () =>
    Effect.gen(function* () {
      const requests = yield* ResetRequests
      const sql = yield* SqlClient.SqlClient
      const tenant = freshTenant()
      const ids = yield* rows(tenant, [0, 1, 2, 3, 4])
      for (const i of [1, 3, 4]) {
        yield* sql`UPDATE reset_mail_outbox SET state = 'quarantined', reason = 'provider-timeout', attempt = 1 WHERE id = ${ids[i]!}`
      }
      expect((yield* allPages(tenant, { state: "quarantined", limit: 2 })).seen).toEqual([ids[1], ids[3], ids[4]])
      expect(idsOf(yield* requests.mails(tenant, { state: "pending" }))).toEqual([ids[0], ids[2]])
      expect((yield* requests.mails(tenant, { state: "delivered" })).items).toEqual([])
      expect(idsOf(yield* requests.mails(tenant, { limit: 0 }))).toEqual([ids[0]])

      const bulk = freshTenant()
      yield* rows(bulk, Array.from({ length: RESET_MAIL_PAGE_LIMIT + 1 }, (_, i) => i))
      const bounded = yield* requests.mails(bulk, { limit: 1_000 })
      expect(bounded.items.length).toBe(RESET_MAIL_PAGE_LIMIT)
      const rest = yield* requests.mails(bulk, { cursor: bounded.nextCursor! })
      expect([rest.items.length, rest.nextCursor]).toEqual([1, null])
    }))

  it.effect("a cursor the service did not write is refused as cursor-invalid", () =>
    Effect.gen(function* () {
      const requests = yield* ResetRequests
      const id = randomUUID()
      const forged = [
        "not a cursor",
        Buffer.from(id).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000Z|${id}`).toString("base64url"),
        Buffer.from(`2026-02-30T00:00:00.000000Z|${id}`).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000000Z|${id.toUpperCase()}`).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000000Z|${id}|x`).toString("base64url"),
        "x".repeat(201)
      ]
      for (const cursor of forged) {
        expect([cursor, yield* Effect.flip(requests.mails(freshTenant(), { cursor }))]).toMatchObject([cursor, { _tag: "ResetMailCursorInvalid", reason: "cursor-invalid" }])
      }
    }))

  it.effect("one row by id: its state, attempts and codes, committed through the request path; none for another tenant or an id that is not one", () =>
    Effect.gen(function* () {
      const requests = yield* ResetRequests
      const sql = yield* SqlClient.SqlClient
      const fx = yield* fixture.pipe(Effect.orDie)
      const row = yield* requestReset(fx)
      yield* sql`UPDATE reset_mail_outbox SET attempt = 2, last_error = 'provider-5xx', provider_status = 503 WHERE id = ${row.id}`
      const item = Option.getOrThrow(yield* requests.mail(fx.tenant, row.id))
      expect({ ...item, nextAttemptAt: undefined, createdAt: undefined, updatedAt: undefined }).toEqual({
        id: row.id,
        tenant: fx.tenant,
        state: "pending",
        attempt: 2,
        reason: null,
        lastError: "provider-5xx",
        providerStatus: 503,
        claimedAt: null,
        nextAttemptAt: undefined,
        createdAt: undefined,
        updatedAt: undefined
      })
      expect(JSON.stringify(item)).not.toContain(fx.email)
      expect(JSON.stringify(item)).not.toContain(row.verification_id)
      expect((yield* requests.mails(fx.tenant)).items).toEqual([item])
      expect(yield* requests.mail(freshTenant(), row.id)).toEqual(Option.none())
      expect(yield* requests.mail(fx.tenant, "not-a-uuid")).toEqual(Option.none())
    }))
})
