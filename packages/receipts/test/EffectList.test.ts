import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { EFFECT_PAGE_LIMIT } from "../src/Domain.ts"
import { executor, freshTenant, recordReceipt, recorderFor, setup, SuiteLayer } from "./support/Work.ts"

// What the operator console reads of receipt effects, on real PostgreSQL: one tenant's effects by keyset on
// (created_at, receipt_id, seq), optionally in one state, one effect by id, and its receipt's business audit. Receipts
// are recorded through the real command path (Receipts.record); never the payer's contact or the notification body.

type Page = { readonly items: ReadonlyArray<{ readonly receiptId: string; readonly seq: number; readonly kind: string }>; readonly nextCursor: string | null }

const keysOf = (page: Page) => page.items.map((e) => `${e.receiptId}:${e.seq}`)

/** Moves a receipt's effects to a known creation time (milliseconds and microseconds after a fixed start). */
const createdAt = (receiptId: string, millis: number, micros = 0) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE receipt_effects SET created_at = '2026-05-01T00:00:00Z'::timestamptz + ${millis * 1000 + micros} * interval '1 microsecond'
        WHERE receipt_id = ${receiptId}`).pipe(Effect.orDie)

layer(SuiteLayer, { excludeTestServices: true })("receipt effects as the console lists them (real PostgreSQL)", (it) => {
  it.scoped("a tenant's effects come oldest receipt first, each receipt's in the order they run, page after page by cursor, each exactly once; other tenants' never", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const withFile = yield* recordReceipt(ex, tenant, [randomBytes(100)])
      const older = yield* recordReceipt(ex, tenant)
      const sameTime = yield* recordReceipt(ex, tenant)
      yield* recordReceipt(ex, freshTenant())
      for (const [id, millis] of [[withFile.id, 10], [older.id, 0], [sameTime.id, 10]] as const) yield* createdAt(id, millis)
      const [first, second] = [withFile, sameTime].sort((a, b) => (a.id < b.id ? -1 : 1))
      const expected = [older, first!, second!].flatMap((r) => r.effects.map((e) => `${r.id}:${e.seq}`))
      expect(expected.length).toBe(6)

      const seen: Array<string> = []
      let cursor: string | undefined = undefined
      let pages = 0
      do {
        const page: Page = yield* ex.receipts.effects(tenant, { limit: 4, cursor })
        expect(page.items.length).toBeLessThanOrEqual(4)
        seen.push(...keysOf(page))
        cursor = page.nextCursor ?? undefined
        pages++
      } while (cursor !== undefined && pages < 10)
      expect([seen, pages]).toEqual([expected, 2])

      const exact = yield* ex.receipts.effects(tenant, { limit: 6 })
      expect([keysOf(exact), exact.nextCursor]).toEqual([expected, null])
      expect((yield* ex.receipts.effects(freshTenant())).items).toEqual([])
    }))

  it.scoped("times that differ below the millisecond keep their order across a page boundary", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const receipts = [yield* recordReceipt(ex, tenant), yield* recordReceipt(ex, tenant), yield* recordReceipt(ex, tenant)]
      for (const [i, micros] of [[0, 300], [1, 100], [2, 200]] as const) yield* createdAt(receipts[i]!.id, 0, micros)
      const seen: Array<string> = []
      let cursor: string | undefined = undefined
      do {
        const page: Page = yield* ex.receipts.effects(tenant, { limit: 1, cursor })
        seen.push(...page.items.map((e) => e.receiptId))
        cursor = page.nextCursor ?? undefined
      } while (cursor !== undefined && seen.length < 10)
      expect(seen).toEqual([receipts[1]!.id, receipts[2]!.id, receipts[0]!.id])
    }))

  it.scoped("the state filter keeps one state's effects (a claimed one listed as running); a pending effect names the earlier one it waits for; a page holds 1..100 effects whatever the limit asked", () =>
    Effect.gen(function* () {
      const { roots, sql, tenant } = yield* setup
      const ex = yield* executor(roots)
      // promote-file, delete-staged, audit-check, notify: each waits for the one before it.
      const receipt = yield* recordReceipt(ex, tenant, [randomBytes(100)])
      const [promote] = receipt.effects
      yield* sql`UPDATE receipt_effects SET state = 'done', attempt = 1, completed_at = now() WHERE id = ${promote!.id}`
      const pending = yield* ex.receipts.effects(tenant, { state: "pending" })
      expect(pending.items.map((e) => [e.kind, e.waitingFor])).toEqual([["delete-staged", null], ["audit-check", 2], ["notify", 2]])
      const done = yield* ex.receipts.effects(tenant, { state: "done" })
      expect(done.items.map((e) => [e.id, e.state, e.waitingFor])).toEqual([[promote!.id, "done", null]])
      expect((yield* ex.receipts.effects(tenant, { state: "running" })).items).toEqual([])
      // A claimed effect is listed and read as running.
      const [, deleteStaged] = receipt.effects
      yield* sql`UPDATE receipt_effects SET state = 'running', attempt = 1, claimed_at = now(), lease_owner = 'worker-x' WHERE id = ${deleteStaged!.id}`
      const running = yield* ex.receipts.effects(tenant, { state: "running" })
      expect(running.items.map((e) => [e.id, e.state, e.attempt])).toEqual([[deleteStaged!.id, "running", 1]])
      expect(Option.getOrThrow(yield* ex.receipts.effect(tenant, deleteStaged!.id))).toMatchObject({ state: "running" })
      yield* sql`UPDATE receipt_effects SET state = 'pending', attempt = 0, claimed_at = NULL, lease_owner = NULL WHERE id = ${deleteStaged!.id}`
      expect((yield* ex.receipts.effects(tenant, { limit: 0 })).items.map((e) => e.kind)).toEqual(["promote-file"])

      const bulk = freshTenant()
      for (let i = 0; i < EFFECT_PAGE_LIMIT + 1; i++) yield* recordReceipt(ex, bulk)
      const bounded = yield* ex.receipts.effects(bulk, { limit: 1_000 })
      expect(bounded.items.length).toBe(EFFECT_PAGE_LIMIT)
      const rest = yield* ex.receipts.effects(bulk, { cursor: bounded.nextCursor! })
      expect([rest.items.length, rest.nextCursor]).toEqual([1, null])
    }))

  it.scoped("a cursor the service did not write is refused as cursor-invalid", () =>
    Effect.gen(function* () {
      const { roots } = yield* setup
      const ex = yield* executor(roots)
      const id = randomUUID()
      const forged = [
        "not a cursor",
        Buffer.from(`2026-05-01T00:00:00.000000Z|${id}`).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000Z|${id}|1`).toString("base64url"),
        Buffer.from(`2026-02-30T00:00:00.000000Z|${id}|1`).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000000Z|${id}|0`).toString("base64url"),
        Buffer.from(`2026-05-01T00:00:00.000000Z|${id}|1|2`).toString("base64url"),
        "x".repeat(201)
      ]
      for (const cursor of forged) {
        expect([cursor, yield* Effect.flip(ex.receipts.effects(freshTenant(), { cursor }))]).toMatchObject([cursor, { _tag: "ReceiptEffectCursorInvalid", reason: "cursor-invalid" }])
      }
    }))

  it.scoped("one effect by id with its attempts and codes, and its receipt's business audit row; none for another tenant or an id that is not one", () =>
    Effect.gen(function* () {
      const { roots, sql, tenant } = yield* setup
      const ex = yield* executor(roots)
      const by = recorderFor(tenant)
      const recorded = yield* ex.receipts.record((yield* recordReceipt(ex, tenant)).command, by).pipe(Effect.orDie)
      // A replay writes nothing: the receipt keeps the one audit row of its first recording.
      expect(recorded.replayed).toBe(true)
      const receiptId = recorded.response.receipt.id
      const notify = recorded.response.effects[0]!
      yield* sql`UPDATE receipt_effects SET attempt = 2, last_error = 'provider-5xx' WHERE id = ${notify.id}`
      const item = Option.getOrThrow(yield* ex.receipts.effect(tenant, notify.id))
      expect({ ...item, nextAttemptAt: undefined, createdAt: undefined, updatedAt: undefined }).toEqual({
        id: notify.id,
        receiptId,
        tenant,
        seq: 1,
        kind: "notify",
        state: "pending",
        attempt: 2,
        waitingFor: null,
        claimedAt: null,
        lastError: "provider-5xx",
        frozen: false,
        completedAt: null,
        nextAttemptAt: undefined,
        createdAt: undefined,
        updatedAt: undefined
      })
      expect(JSON.stringify(item)).not.toContain("paula@payer.example")
      expect((yield* ex.receipts.effects(tenant)).items).toEqual([item])
      expect(yield* ex.receipts.effect(freshTenant(), notify.id)).toEqual(Option.none())
      expect(yield* ex.receipts.effect(tenant, "not-a-uuid")).toEqual(Option.none())

      const audit = yield* ex.receipts.receiptAudit(tenant, receiptId)
      expect(audit.map(({ at: _, ...entry }) => ({ ...entry }))).toEqual([{ action: "receipt-recorded", actor: "api-key:k1", correlationId: expect.stringMatching(/^[0-9a-f]{32}$/) }])
      expect(yield* ex.receipts.receiptAudit(freshTenant(), receiptId)).toEqual([])
      expect(yield* ex.receipts.receiptAudit(tenant, "not-a-uuid")).toEqual([])
    }))
})
