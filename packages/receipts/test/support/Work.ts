import { type Mailbox, Mailer } from "@delivery/mail"
import { ProviderHttp } from "@delivery/core"
import { LoopbackProvider } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { BunContext } from "@effect/platform-bun"
import { expect } from "@effect/vitest"
import { Context, DateTime, Duration, Effect, Either, Layer, Option, Redacted, Stream } from "effect"
import { createHash, randomBytes } from "node:crypto"
import type { RecordReceipt } from "../../src/Domain.ts"
import { FileStoreLive } from "../../src/FileStore.ts"
import { type Recorder, Receipts } from "../../src/Receipts.ts"
import type { WorkerTiming } from "../../src/ReceiptsConfig.ts"
import { ReceiptWork, ReceiptWorkSettings } from "../../src/ReceiptWork.ts"
import { tempRoots } from "./TempRoots.ts"

// Harness of the receipt effects executor's tests: a migrated database of the file's own and a real loopback
// provider for the suite; per test, fresh private roots under /tmp/rwt-* and executors (Receipts + ReceiptWork)
// built from their own settings, so a test can run two executors (two senders, two timeouts) side by side.

export const SuiteLayer = Layer.mergeAll(LoopbackProvider.Default, BunContext.layer).pipe(Layer.provideMerge(TestDatabaseLive))

export const MAIL_TOKEN = `mail-${randomBytes(24).toString("base64url")}`

export const sha256 = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex")

export type Roots = { readonly base: string; readonly staging: string; readonly storage: string }

export { tempRoots }

export const defaultTiming: WorkerTiming = {
  pollInterval: Duration.millis(100),
  staleClaim: Duration.seconds(60),
  retryBase: Duration.millis(150),
  retryCap: Duration.millis(600),
  inlineTimeout: Duration.seconds(3),
  fileMaxBytes: 1024 * 1024
}

export interface ExecutorOptions {
  readonly timing?: Partial<WorkerTiming>
  readonly sender?: Mailbox
  readonly mailTimeout?: Duration.DurationInput
  /** Parts this process is configured without: its storage roots, its receipt provider settings, its mailer. */
  readonly without?: { readonly files?: boolean; readonly provider?: boolean; readonly mailer?: boolean }
}

/** Receipts and ReceiptWork over `roots`, the loopback provider and their own settings, built in the test's scope. */
export const executor = (roots: Roots, options: ExecutorOptions = {}) =>
  Effect.gen(function* () {
    const provider = yield* LoopbackProvider
    const timing = { ...defaultTiming, ...options.timing }
    const receiptProvider = {
      mail: {
        endpoint: Either.getOrThrow(ProviderHttp.ProviderEndpoint.parse(provider.urlFor("/emails"))),
        token: Redacted.make(MAIL_TOKEN),
        timeout: Duration.decode(options.mailTimeout ?? "2 seconds")
      },
      sender: options.sender ?? { address: "receipts@shop.example", name: "Shop" }
    }
    const without = options.without ?? {}
    const shared = Layer.mergeAll(
      without.files === true ? Layer.empty : FileStoreLive(roots),
      without.mailer === true ? Layer.empty : Mailer.layerWith(receiptProvider.mail),
      Layer.succeed(ReceiptWorkSettings, { timing, provider: without.provider === true ? Option.none() : Option.some(receiptProvider) })
    )
    const layer = Layer.mergeAll(Receipts.Default, ReceiptWork.Default).pipe(Layer.provideMerge(shared))
    const context = yield* Layer.build(layer).pipe(Effect.orDie)
    return {
      receipts: Context.get(context, Receipts),
      work: Context.get(context, ReceiptWork),
      settings: Context.get(context, ReceiptWorkSettings),
      context
    }
  })
export type Executor = Effect.Effect.Success<ReturnType<typeof executor>>

export const recorderFor = (tenant: string): Recorder => ({
  tenant,
  account: "acct-1",
  actor: "api-key:k1",
  correlationId: randomBytes(16).toString("hex")
})

/** A fresh tenant per test, so counts and rows of earlier tests never mix in. */
export const freshTenant = () => `t-${randomBytes(4).toString("hex")}`

/** Stages `bytes` through the real upload path (Receipts.stage). */
export const stageFile = (ex: Executor, tenant: string, bytes: Uint8Array) =>
  ex.receipts.stage(Stream.make(bytes), {
    by: recorderFor(tenant),
    contentType: "application/pdf",
    maxBytes: 1024 * 1024,
    declaredLength: bytes.length
  }).pipe(Effect.orDie)

export const commandOf = (attachments: ReadonlyArray<string>, overrides: Partial<RecordReceipt> = {}): RecordReceipt => ({
  commandId: `cmd-${randomBytes(6).toString("hex")}`,
  reference: `INV-${randomBytes(3).toString("hex")}`,
  currency: "EUR",
  paidAt: DateTime.unsafeMake("2026-03-04T05:06:07Z") as DateTime.Utc,
  payer: { name: "Paula Payer", email: "paula@payer.example" },
  lines: [{ description: "Widget", quantity: 2, unitMinor: 1250 }, { description: "Gadget", quantity: 1, unitMinor: 999 }],
  attachments,
  ...overrides
})

/** A receipt through the real command path (Receipts.record), with `files` staged first through Receipts.stage. */
export const recordReceipt = (ex: Executor, tenant: string, files: ReadonlyArray<Uint8Array> = [], overrides: Partial<RecordReceipt> = {}) =>
  Effect.gen(function* () {
    const staged = []
    for (const bytes of files) staged.push(yield* stageFile(ex, tenant, bytes))
    const command = commandOf(staged.map((f) => f.fileId), overrides)
    const recorded = yield* ex.receipts.record(command, recorderFor(tenant)).pipe(Effect.orDie)
    expect(recorded.replayed).toBe(false)
    return { id: recorded.response.receipt.id, command, files: staged, effects: recorded.response.effects, response: recorded.response }
  })
export type Recorded = Effect.Effect.Success<ReturnType<typeof recordReceipt>>

export interface EffectRow {
  readonly id: string
  readonly receipt_id: string
  readonly seq: number
  readonly kind: string
  readonly state: string
  readonly attempt: number
  readonly next_attempt_at: Date
  readonly claimed_at: Date | null
  readonly lease_owner: string | null
  readonly last_error: string | null
  readonly envelope: string | null
  readonly envelope_sha256: string | null
  readonly completed_at: Date | null
}

const columns = `id::text AS id, receipt_id::text AS receipt_id, seq, kind, state, attempt, next_attempt_at, claimed_at,
  lease_owner, last_error, envelope, envelope_sha256, completed_at`

/** A receipt's effects in seq order, exactly as stored. */
export const effectsOf = (receiptId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<EffectRow>`SELECT ${sql.literal(columns)} FROM receipt_effects WHERE receipt_id = ${receiptId} ORDER BY seq`.withoutTransform)
    .pipe(Effect.orDie)

export const effectRow = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<EffectRow>`SELECT ${sql.literal(columns)} FROM receipt_effects WHERE id = ${id}`.withoutTransform)
    .pipe(Effect.map((rows) => rows[0]!), Effect.orDie)

/** Every column of one effect row as JSON text: "nothing changes" is a byte comparison. */
export const snapshot = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly row: string }>`SELECT to_jsonb(e)::text AS row FROM receipt_effects e WHERE id = ${id}`.withoutTransform)
    .pipe(Effect.map((rows) => rows[0]?.row), Effect.orDie)

/** `state:attempt` per effect, in seq order: a compact picture of a receipt's progress. */
export const progress = (receiptId: string) =>
  Effect.map(effectsOf(receiptId), (rows) => rows.map((r) => `${r.kind}:${r.state}:${r.attempt}`))

/** Backdates a claim, as if its owner had claimed it `seconds` ago and stalled since. */
export const backdateClaim = (id: string, seconds: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE receipt_effects SET claimed_at = claimed_at - make_interval(secs => ${seconds}) WHERE id = ${id}`)
    .pipe(Effect.orDie)

/** Fails the test after `limit` instead of waiting for ever. */
export const within = <A, E, R>(effect: Effect.Effect<A, E, R>, limit: Duration.DurationInput = "5 seconds") =>
  Effect.timeoutFail(effect, { duration: limit, onTimeout: () => new Error("test wait timed out") })

/** Sleeps until every pending effect of the receipts is due. */
export const untilDue = (...receiptIds: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    let latest = 0
    for (const id of receiptIds) {
      for (const row of yield* effectsOf(id)) {
        if (row.state === "pending") latest = Math.max(latest, row.next_attempt_at.getTime())
      }
    }
    yield* Effect.sleep(Duration.millis(Math.max(0, latest - Date.now()) + 20))
  })

/** Business facts of a tenant: what a command writes and delivery must never write again. */
export const businessCounts = (tenant: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly receipts: number; readonly lines: number; readonly audit: number; readonly commands: number; readonly effects: number }>`
      SELECT (SELECT count(*)::int FROM receipts WHERE tenant_id = ${tenant}) AS receipts,
             (SELECT count(*)::int FROM receipt_lines l JOIN receipts r ON r.id = l.receipt_id WHERE r.tenant_id = ${tenant}) AS lines,
             (SELECT count(*)::int FROM receipt_audit WHERE tenant_id = ${tenant}) AS audit,
             (SELECT count(*)::int FROM receipt_commands WHERE tenant_id = ${tenant}) AS commands,
             (SELECT count(*)::int FROM receipt_effects WHERE tenant_id = ${tenant}) AS effects`.withoutTransform)
    .pipe(Effect.map((rows) => rows[0]!), Effect.orDie)

/**
 * Each test starts with no effects of earlier tests (the worker claims any eligible effect of any receipt) and a
 * provider with no script. Receipts themselves stay: the business audit is append-only.
 */
export const setup = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DELETE FROM receipt_effects`.pipe(Effect.orDie)
  const provider = yield* LoopbackProvider
  yield* provider.reset
  const roots = yield* tempRoots
  const tenant = freshTenant()
  return { sql, provider, roots, tenant }
})
