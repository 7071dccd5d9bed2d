import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { randomBytes } from "node:crypto"
import { planEffects, requestSha256 } from "../src/Receipts.ts"
import { ReceiptsRepo } from "../src/ReceiptsRepo.ts"
import { businessCounts, commandOf, executor, recorderFor, recordReceipt, setup, stageFile, SuiteLayer } from "./support/Work.ts"

// Receipt commands (spec 002: "A receipt command commits business facts, its command receipt, audit, and outbox work
// in one transaction") on real PostgreSQL through Receipts.record, the path the HTTP route takes.

layer(SuiteLayer, { excludeTestServices: true })("receipt commands (Receipts.record, real PostgreSQL)", (it) => {
  it.effect("one command commits the receipt, its lines, the command receipt, one audit row and its effects in order; the total is the lines' sum", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const recorded = yield* recordReceipt(ex, tenant, [randomBytes(10), randomBytes(20)])
      expect(recorded.response.receipt).toMatchObject({ tenant, totalMinor: 2 * 1250 + 999, lines: 2, attachments: 2 })
      expect(recorded.effects.map((e) => [e.seq, e.kind])).toEqual([
        [1, "promote-file"], [2, "promote-file"], [3, "delete-staged"], [4, "delete-staged"], [5, "audit-check"], [6, "notify"]
      ])
      expect(yield* businessCounts(tenant)).toEqual({ receipts: 1, lines: 2, audit: 1, commands: 1, effects: 6 })
    }).pipe(Effect.scoped))

  it.effect("a replay of the same command answers the recorded response and writes nothing; the same id with other content is command-id-reused and writes nothing; another tenant may use the same id", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const recorded = yield* recordReceipt(ex, tenant)
      const replay = yield* ex.receipts.record(recorded.command, recorderFor(tenant))
      expect(replay).toEqual({ replayed: true, response: recorded.response })
      const conflict = yield* Effect.flip(ex.receipts.record({ ...recorded.command, reference: "OTHER" }, recorderFor(tenant)))
      expect(conflict).toMatchObject({ _tag: "CommandConflict", reason: "command-id-reused" })
      expect(yield* businessCounts(tenant)).toEqual({ receipts: 1, lines: 2, audit: 1, commands: 1, effects: 1 })
      const other = `${tenant}-b`
      const elsewhere = yield* ex.receipts.record(recorded.command, recorderFor(other))
      expect(elsewhere.replayed).toBe(false)
      expect(elsewhere.response.receipt.id).not.toBe(recorded.id)
    }).pipe(Effect.scoped))

  it.effect("the same command sent eight times at once records one receipt: one recording, seven replays of it, nothing written twice", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      // Twenty bursts, each of one command eight times at once: the transactions overlap in every burst.
      const bursts = 20
      for (let burst = 0; burst < bursts; burst++) {
        const command = commandOf([])
        const results = yield* Effect.all(
          Array.from({ length: 8 }, () => ex.receipts.record(command, recorderFor(tenant))),
          { concurrency: "unbounded" }
        )
        expect(results.filter((r) => !r.replayed).length).toBe(1)
        expect(new Set(results.map((r) => r.response.receipt.id)).size).toBe(1)
      }
      expect(yield* businessCounts(tenant)).toEqual({ receipts: bursts, lines: 2 * bursts, audit: bursts, commands: bursts, effects: bursts })
    }).pipe(Effect.scoped))

  it.effect("the notification is rendered from the receipt read back with its amounts as numbers and its payment time as a date", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const recorded = yield* recordReceipt(ex, tenant, [randomBytes(10)])
      const repo = yield* Effect.provide(ReceiptsRepo, ReceiptsRepo.Default)
      const data = Option.getOrThrow(yield* repo.notifyData(recorded.id))
      expect(data).toEqual({
        reference: recorded.command.reference,
        currency: "EUR",
        total_minor: 2 * 1250 + 999,
        paid_at: new Date("2026-03-04T05:06:07Z"),
        payer_name: "Paula Payer",
        payer_email: "paula@payer.example",
        lines: [
          { description: "Widget", quantity: 2, unit_minor: 1250, amount_minor: 2500 },
          { description: "Gadget", quantity: 1, unit_minor: 999, amount_minor: 999 }
        ],
        files: 1
      })
    }).pipe(Effect.scoped))

  it.effect("attachments must be this tenant's staged files, each attached once: unknown, another tenant's, already attached and duplicated ids are refused with their reason and commit nothing", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const mine = yield* stageFile(ex, tenant, randomBytes(8))
      const theirs = yield* stageFile(ex, `${tenant}-x`, randomBytes(8))
      const refuse = (attachments: ReadonlyArray<string>) =>
        Effect.flip(ex.receipts.record(commandOf(attachments), recorderFor(tenant)))
      expect(yield* refuse(["00000000-0000-4000-8000-000000000000"])).toMatchObject({ _tag: "AttachmentRefused", reason: "attachment-unknown" })
      expect(yield* refuse([theirs.fileId])).toMatchObject({ reason: "attachment-unknown", fileId: theirs.fileId })
      expect(yield* refuse([mine.fileId, mine.fileId])).toMatchObject({ reason: "attachment-duplicated", fileId: mine.fileId })
      expect(yield* businessCounts(tenant)).toEqual({ receipts: 0, lines: 0, audit: 0, commands: 0, effects: 0 })
      yield* ex.receipts.record(commandOf([mine.fileId]), recorderFor(tenant))
      expect(yield* refuse([mine.fileId])).toMatchObject({ reason: "attachment-already-attached", fileId: mine.fileId })
      expect((yield* businessCounts(tenant)).receipts).toBe(1)
    }).pipe(Effect.scoped))

  it("the request's identity is its canonical SHA-256: the same content in any member order is the same command, an omitted attachments list is the empty one, any change is another", () => {
    const command = commandOf([])
    const reordered = Object.fromEntries(Object.entries(command).reverse()) as typeof command
    expect(requestSha256(reordered)).toBe(requestSha256(command))
    expect(requestSha256({ ...command, reference: `${command.reference}x` })).not.toBe(requestSha256(command))
    expect(requestSha256(command)).toMatch(/^[0-9a-f]{64}$/)
    // planEffects: one notification and nothing else without attachments; fresh ids.
    expect(planEffects([]).map((e) => [e.seq, e.kind, e.fileId])).toEqual([[1, "notify", null]])
    const [a, b] = [planEffects(["f1"]), planEffects(["f1"])]
    expect(a.map((e) => e.id)).not.toEqual(b.map((e) => e.id))
  })
})
