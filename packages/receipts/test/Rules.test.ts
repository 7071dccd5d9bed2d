import { encodeKeyset } from "@delivery/core"
import { LoopbackReply, outcomesCounted } from "@delivery/testing"
import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Cause, Effect, Exit, Fiber, Option, Stream } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import * as NFS from "node:fs"
import {
  backdateClaim,
  businessCounts,
  commandOf,
  effectRow,
  effectsOf,
  executor,
  recorderFor,
  recordReceipt,
  setup,
  stageFile,
  SuiteLayer,
  within
} from "./support/Work.ts"

const counted = (outcome: string) => outcomesCounted("receipt-effects", outcome)


// Spec 002's receipt rules that hold whatever the worker's timing (docs/receipts.md): what a process without
// storage roots or without a mail provider does, how attachments and uploads are checked, and how the read paths
// treat ids and cursors that are not theirs. Real PostgreSQL, real files and a real loopback provider.

layer(SuiteLayer, { excludeTestServices: true })("receipt rules (real PostgreSQL, files and loopback provider)", (it) => {
  it.effect("without storage roots a receipt with attachments is refused (StorageUnconfigured) and commits nothing, one without commits, an upload is refused; its worker keeps a file effect retryable as storage-unconfigured, and a process with roots then does it", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const withRoots = yield* executor(roots)
      const rootless = yield* executor(roots, { without: { files: true } })
      const staged = yield* stageFile(withRoots, tenant, randomBytes(16))
      expect(yield* Effect.flip(rootless.receipts.record(commandOf([staged.fileId]), recorderFor(tenant)))).toEqual({ _tag: "StorageUnconfigured" })
      expect(yield* businessCounts(tenant)).toEqual({ receipts: 0, lines: 0, audit: 0, commands: 0, effects: 0 })
      const upload = rootless.receipts.stage(Stream.make(randomBytes(8)), { by: recorderFor(tenant), contentType: "application/pdf", maxBytes: 1024 })
      expect(yield* Effect.flip(upload)).toEqual({ _tag: "StorageUnconfigured" })

      const recorded = yield* recordReceipt(withRoots, tenant, [randomBytes(32)])
      const tick = yield* rootless.work.tick("w-rootless")
      const first = recorded.effects[0]!
      expect(tick.attempt).toStrictEqual(Option.some({ id: first.id, kind: "promote-file", outcome: "retry", error: "storage-unconfigured" }))
      expect((yield* effectsOf(recorded.id))[0]).toMatchObject({ state: "pending", attempt: 1, last_error: "storage-unconfigured" })

      yield* Effect.sleep("1 second")
      const done = yield* withRoots.work.tick("w-roots")
      // A done attempt carries no error member at all.
      expect(done.attempt).toStrictEqual(Option.some({ id: first.id, kind: "promote-file", outcome: "done" }))

      const plain = yield* rootless.receipts.record(commandOf([]), recorderFor(tenant))
      expect(plain.replayed).toBe(false)
      expect(plain.response.effects.map((e) => e.kind)).toEqual(["notify"])
    }).pipe(Effect.scoped))

  it.effect("without the receipt provider's settings, or without a mailer, a notification stays retryable as provider-unconfigured and nothing is sent", () =>
    Effect.gen(function* () {
      for (const without of [{ provider: true }, { mailer: true }]) {
        const { provider, roots, tenant } = yield* setup
        const ex = yield* executor(roots, { without })
        const recorded = yield* recordReceipt(ex, tenant)
        const tick = yield* ex.work.tick("w1")
        expect(tick.attempt).toStrictEqual(Option.some({ id: recorded.effects[0]!.id, kind: "notify", outcome: "retry", error: "provider-unconfigured" }))
        expect(yield* provider.requests).toEqual([])
        // Nothing was rendered or frozen: the first real attempt renders from the receipt as it is then.
        expect((yield* effectsOf(recorded.id))[0]).toMatchObject({ envelope: null, last_error: "provider-unconfigured" })
      }
    }).pipe(Effect.scoped))

  it.effect("attachments are checked one by one after a good one: an unknown second file is attachment-unknown and an already attached second file attachment-already-attached, each naming that file", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const good = yield* stageFile(ex, tenant, randomBytes(8))
      const unknown = randomUUID()
      const refuse = (attachments: ReadonlyArray<string>) => Effect.flip(ex.receipts.record(commandOf(attachments), recorderFor(tenant)))
      expect(yield* refuse([good.fileId, unknown])).toMatchObject({ _tag: "AttachmentRefused", reason: "attachment-unknown", fileId: unknown })
      const taken = yield* stageFile(ex, tenant, randomBytes(8))
      yield* ex.receipts.record(commandOf([taken.fileId]), recorderFor(tenant))
      expect(yield* refuse([good.fileId, taken.fileId])).toMatchObject({ reason: "attachment-already-attached", fileId: taken.fileId })
      expect((yield* businessCounts(tenant)).receipts).toBe(1)
    }).pipe(Effect.scoped))

  it.effect("an upload's declared length bounds it: declared 0 is upload-empty, above the limit file-too-large before reading, more than sent upload-truncated; a file row that cannot be written takes its staged copy with it", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const upload = (declaredLength: number | undefined, by = recorderFor(tenant)) =>
        ex.receipts.stage(Stream.make(randomBytes(8)), { by, contentType: "application/pdf", maxBytes: 100, declaredLength })
      expect(yield* Effect.flip(upload(0))).toMatchObject({ _tag: "UploadRefused", reason: "upload-empty" })
      expect(yield* Effect.flip(upload(101))).toMatchObject({ reason: "file-too-large" })
      expect(yield* Effect.flip(upload(9))).toMatchObject({ reason: "upload-truncated" })
      expect(yield* upload(8)).toMatchObject({ size: 8 })
      expect(yield* upload(undefined)).toMatchObject({ size: 8 })
      const before = NFS.readdirSync(roots.staging).length
      // A tenant id the table's CHECK refuses: the row fails after the bytes were staged.
      const failed = yield* Effect.either(upload(8, recorderFor("Not A Tenant")))
      expect(failed._tag).toBe("Left")
      expect(NFS.readdirSync(roots.staging).length).toBe(before)
    }).pipe(Effect.scoped))

  it.effect("a receipt's state lists its effects in order with their states; an unknown id or another tenant's receipt is none", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const recorded = yield* recordReceipt(ex, tenant, [randomBytes(8)])
      yield* ex.work.tick("w1")
      const state = Option.getOrThrow(yield* ex.receipts.state(tenant, recorded.id))
      expect(state).toMatchObject({ id: recorded.id, tenant, reference: recorded.command.reference })
      expect(state.createdAt).toBeInstanceOf(Date)
      expect(state.effects.map((e) => [e.seq, e.kind, e.state, e.attempt, e.lastError, e.frozen])).toEqual([
        [1, "promote-file", "done", 1, null, false],
        [2, "delete-staged", "pending", 0, null, false],
        [3, "audit-check", "pending", 0, null, false],
        [4, "notify", "pending", 0, null, false]
      ])
      expect(state.effects.map((e) => e.id)).toEqual(recorded.effects.map((e) => e.id))
      expect(state.effects[0]!.completedAt).toBeInstanceOf(Date)
      expect(state.effects[1]!.nextAttemptAt).toBeInstanceOf(Date)
      expect(Option.isNone(yield* ex.receipts.state(tenant, randomUUID()))).toBe(true)
      expect(Option.isNone(yield* ex.receipts.state(`${tenant}-other`, recorded.id))).toBe(true)
    }).pipe(Effect.scoped))

  it.effect("ids and cursors are whole: an effect or receipt id with anything before or after it finds nothing (no query runs on it); a cursor with text before its time or a sequence that is not digits is cursor-invalid", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const recorded = yield* recordReceipt(ex, tenant)
      const effectId = recorded.effects[0]!.id
      expect(Option.isSome(yield* ex.receipts.effect(tenant, effectId))).toBe(true)
      expect((yield* ex.receipts.receiptAudit(tenant, recorded.id)).length).toBe(1)
      for (const wrapped of [`x${effectId}`, `${effectId}x`]) expect(yield* ex.receipts.effect(tenant, wrapped)).toEqual(Option.none())
      for (const wrapped of [`x${recorded.id}`, `${recorded.id}x`]) expect(yield* ex.receipts.receiptAudit(tenant, wrapped)).toEqual([])

      const at = "2100-01-01T00:00:00.123456Z"
      expect((yield* ex.receipts.effects(tenant, { cursor: encodeKeyset(at, recorded.id, 12) })).items).toEqual([])
      for (const cursor of [encodeKeyset(`x${at}`, recorded.id, 1), encodeKeyset(at, recorded.id, "1a")]) {
        expect(yield* Effect.flip(ex.receipts.effects(tenant, { cursor }))).toMatchObject({ _tag: "ReceiptEffectCursorInvalid", reason: "cursor-invalid" })
      }
    }).pipe(Effect.scoped))

  it.effect("the effects queue is named for the console: family receipt-effects, title Receipt effects", () =>
    Effect.gen(function* () {
      const { roots } = yield* setup
      const ex = yield* executor(roots)
      expect(ex.receipts.queueView).toMatchObject({ family: "receipt-effects", title: "Receipt effects" })
    }).pipe(Effect.scoped))

  it.scoped("each attempt whose record landed is counted once under receipt-effects: done, retry, and an interrupted attempt as retry; an interrupted attempt whose claim was replaced counts nothing", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots, { mailTimeout: "10 seconds" })
      const rootless = yield* executor(roots, { without: { files: true } })
      const [done0, retry0] = [yield* counted("done"), yield* counted("retry")]
      yield* recordReceipt(ex, tenant, [randomBytes(8)])
      yield* rootless.work.tick("w1")
      expect([yield* counted("done"), yield* counted("retry")]).toEqual([done0, retry0 + 1])
      yield* Effect.sleep("1 second")
      yield* ex.work.tick("w1")
      expect([yield* counted("done"), yield* counted("retry")]).toEqual([done0 + 1, retry0 + 1])

      yield* setup
      const held = yield* recordReceipt(ex, tenant)
      const notify = held.effects[0]!.id
      yield* provider.script({ key: notify, times: 3, reply: LoopbackReply.hang() })
      const running = yield* Effect.fork(ex.work.tick("w1"))
      yield* within(provider.awaitRequests(1))
      yield* Fiber.interrupt(running)
      expect(yield* effectRow(notify)).toMatchObject({ state: "pending", last_error: "interrupted" })
      expect([yield* counted("done"), yield* counted("retry")]).toEqual([done0 + 1, retry0 + 2])

      const stale = yield* Effect.fork(ex.work.tick("stale-owner"))
      yield* within(provider.awaitRequests(2))
      yield* backdateClaim(notify, 61)
      const replacement = yield* Effect.fork(ex.work.tick("new-owner"))
      yield* within(provider.awaitRequests(3))
      // The stale owner's record finds its claim replaced: it writes and counts nothing, and ends interrupted, not dead.
      const staleExit = yield* Fiber.interrupt(stale)
      expect(Exit.isFailure(staleExit) && Cause.isInterruptedOnly(staleExit.cause)).toBe(true)
      expect(yield* effectRow(notify)).toMatchObject({ state: "running", lease_owner: "new-owner" })
      expect([yield* counted("done"), yield* counted("retry")]).toEqual([done0 + 1, retry0 + 2])
      yield* Fiber.interrupt(replacement)
    }))

  it.scoped("a notification whose claim is taken over before its envelope is frozen ends lease-lost: nothing is sent, recorded or counted, and the claim is left to its new owner", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const sql = yield* SqlClient.SqlClient
      const ex = yield* executor(roots)
      const recorded = yield* recordReceipt(ex, tenant)
      const notify = recorded.effects[0]!.id
      // The freezing write finds no row of this attempt, as when another owner has taken the claim meanwhile.
      yield* sql.unsafe(`CREATE OR REPLACE FUNCTION rules_skip_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$`)
      yield* sql.unsafe(`CREATE TRIGGER rules_skip_freeze BEFORE UPDATE ON receipt_effects FOR EACH ROW
        WHEN (OLD.envelope IS NULL AND NEW.envelope IS NOT NULL AND NEW.id = '${notify}') EXECUTE FUNCTION rules_skip_update()`)
      yield* Effect.addFinalizer(() => Effect.orDie(sql.unsafe(`DROP TRIGGER IF EXISTS rules_skip_freeze ON receipt_effects`)))
      const counts = [yield* counted("done"), yield* counted("retry"), yield* counted("lease-lost")]
      const tick = yield* ex.work.tick("w1")
      expect(tick.attempt).toStrictEqual(Option.some({ id: notify, kind: "notify", outcome: "lease-lost" }))
      expect(yield* provider.requests).toEqual([])
      expect(yield* effectRow(notify)).toMatchObject({ state: "running", attempt: 1, envelope: null, last_error: null })
      expect([yield* counted("done"), yield* counted("retry"), yield* counted("lease-lost")]).toEqual(counts)
    }))
})
