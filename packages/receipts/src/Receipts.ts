import { Canonical, encodeKeyset, isKeysetTime, queueSnapshotOf, type QueueView, readKeyset } from "@delivery/core"
import { Clock, Effect, Either, Option, Schema, type Stream } from "effect"
import { randomUUID } from "node:crypto"
import {
  AttachmentRefused,
  CommandConflict,
  EFFECT_PAGE_LIMIT,
  type EffectKind,
  EffectState,
  ReceiptAuditEntry,
  ReceiptEffectCursorInvalid,
  ReceiptEffectItem,
  ReceiptEffectPage,
  RecordReceipt,
  type ReceiptRecorded,
  type ReceiptsStorageUnavailable
} from "./Domain.ts"
import { FileStore } from "./FileStore.ts"
import { type EffectItemRow, type NewEffect, ReceiptsRepo } from "./ReceiptsRepo.ts"

export interface Recorder {
  readonly tenant: string
  readonly account: string
  /** Names the credential kind and id, never the credential: `api-key:<lookup id>`. */
  readonly actor: string
  readonly correlationId: string
}

const encodeCommand = Schema.encodeSync(RecordReceipt)

/** The request's identity for replays: SHA-256 of its canonical JSON (defaults applied, so omitting `attachments` = []). */
export const requestSha256 = (command: RecordReceipt) =>
  Canonical.sha256Hex(Either.getOrThrow(Canonical.canonicalString(encodeCommand(command))))

/**
 * A receipt's effects in the order they must complete: each file promoted into the permanent root, then each staged
 * copy deleted, then one audit check of the stored digests, then the payer's notification.
 */
export const planEffects = (attachments: ReadonlyArray<string>): ReadonlyArray<NewEffect> => {
  const kinds: Array<{ readonly kind: EffectKind; readonly fileId: string | null }> = [
    ...attachments.map((fileId) => ({ kind: "promote-file" as const, fileId })),
    ...attachments.map((fileId) => ({ kind: "delete-staged" as const, fileId })),
    ...(attachments.length > 0 ? [{ kind: "audit-check" as const, fileId: null }] : []),
    { kind: "notify", fileId: null }
  ]
  return kinds.map((effect, i) => ({ id: randomUUID(), seq: i + 1, ...effect }))
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

// Cursor: base64url of "<created_at to the microsecond, UTC>|<receipt id>|<seq>", the last effect of a page, as the
// database wrote the time: a millisecond form would skip or repeat effects whose times differ below the millisecond.
const encodeEffectCursor = (row: EffectItemRow) => encodeKeyset(row.position, row.receipt_id, row.seq)

const EFFECT_CURSOR =
  /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)\|([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\|([1-9]\d{0,5})$/

const decodeEffectCursor = (cursor: string) => {
  const match = readKeyset(cursor, EFFECT_CURSOR)
  return match === null || !isKeysetTime(match[1]!)
    ? Effect.fail(new ReceiptEffectCursorInvalid({ reason: "cursor-invalid" }))
    : Effect.succeed({ at: match[1]!, receiptId: match[2]!, seq: Number(match[3]!) })
}

const toEffectItem = (row: EffectItemRow) =>
  new ReceiptEffectItem({
    id: row.id,
    receiptId: row.receipt_id,
    tenant: row.tenant_id,
    seq: row.seq,
    kind: row.kind,
    state: row.state,
    attempt: row.attempt,
    nextAttemptAt: row.next_attempt_at,
    waitingFor: row.waiting_for,
    claimedAt: row.claimed_at,
    lastError: row.last_error,
    frozen: row.frozen,
    completedAt: row.completed_at,
    createdAt: row.created_at,
    updatedAt: row.updated_at
  })

/**
 * Receipt commands (spec 002): the business facts, the command receipt, the audit row and the effects commit in one
 * transaction. The same command id with the same content answers the recorded response and writes nothing; with
 * other content it is refused (`command-id-reused`). Delivery never repeats the command or writes business audit.
 */
export class Receipts extends Effect.Service<Receipts>()("@delivery/receipts/Receipts", {
  effect: Effect.gen(function* () {
    const repo = yield* ReceiptsRepo
    const files = yield* Effect.serviceOption(FileStore)

    const record = Effect.fn("Receipts.record")(function* (command: RecordReceipt, by: Recorder) {
      const sha = requestSha256(command)
      return yield* repo.transaction(
        "record",
        Effect.gen(function* () {
          yield* repo.lockCommand(by.tenant, command.commandId)
          const previous = yield* repo.findCommand(by.tenant, command.commandId)
          if (Option.isSome(previous)) {
            if (previous.value.request_sha256 !== sha) {
              return yield* new CommandConflict({ reason: "command-id-reused", correlationId: by.correlationId })
            }
            return { replayed: true, response: previous.value.response as ReceiptRecorded }
          }
          const attachments = command.attachments
          // Without storage roots this process can neither check nor keep a file (ReceiptsSettings.roots: uploads
          // and attachments are refused, 503 `receipt-storage-unconfigured`); a replay above still answers.
          if (attachments.length > 0 && Option.isNone(files)) return yield* Effect.fail({ _tag: "StorageUnconfigured" } as const)
          const duplicate = attachments.find((id, i) => attachments.indexOf(id) !== i)
          if (duplicate !== undefined) {
            return yield* new AttachmentRefused({ reason: "attachment-duplicated", fileId: duplicate, correlationId: by.correlationId })
          }
          const locked = yield* repo.lockFiles(by.tenant, attachments)
          for (const fileId of attachments) {
            const file = locked.find((row) => row.id === fileId)
            if (file === undefined) return yield* new AttachmentRefused({ reason: "attachment-unknown", fileId, correlationId: by.correlationId })
            if (file.receipt_id !== null) {
              return yield* new AttachmentRefused({ reason: "attachment-already-attached", fileId, correlationId: by.correlationId })
            }
          }
          const at = new Date(yield* Clock.currentTimeMillis)
          const id = randomUUID()
          const totalMinor = command.lines.reduce((sum, line) => sum + line.quantity * line.unitMinor, 0)
          yield* repo.insertReceipt({
            id,
            tenant: by.tenant,
            commandId: command.commandId,
            reference: command.reference,
            currency: command.currency,
            totalMinor,
            paidAt: new Date(command.paidAt.epochMillis),
            payerName: command.payer.name,
            payerEmail: command.payer.email,
            recordedBy: by.account,
            at
          }, command.lines)
          yield* repo.attachFiles(id, attachments)
          const effects = planEffects(attachments)
          yield* repo.insertEffects({ receiptId: id, tenant: by.tenant, at, effects })
          const response: ReceiptRecorded = {
            receipt: {
              id,
              tenant: by.tenant,
              commandId: command.commandId,
              reference: command.reference,
              currency: command.currency,
              totalMinor,
              paidAt: new Date(command.paidAt.epochMillis).toISOString(),
              lines: command.lines.length,
              attachments: attachments.length,
              createdAt: at.toISOString()
            },
            effects: effects.map(({ id: effectId, kind, seq }) => ({ id: effectId, seq, kind }))
          }
          yield* repo.insertCommand({ tenant: by.tenant, commandId: command.commandId, requestSha256: sha, receiptId: id, response, at })
          yield* repo.insertAudit({ tenant: by.tenant, receiptId: id, actor: by.actor, correlationId: by.correlationId, at })
          return { replayed: false, response }
        })
      )
    })

    /** An upload into the staging root (streamed, digested, size-limited), then its row. */
    const stage = Effect.fn("Receipts.stage")(function* <E>(
      body: Stream.Stream<Uint8Array, E>,
      options: { readonly by: Recorder; readonly contentType: string; readonly maxBytes: number; readonly declaredLength?: number | undefined }
    ) {
      if (Option.isNone(files)) return yield* Effect.fail({ _tag: "StorageUnconfigured" } as const)
      const id = randomUUID()
      const staged = yield* files.value.stage(id, body, { maxBytes: options.maxBytes, declaredLength: options.declaredLength })
      const at = new Date(yield* Clock.currentTimeMillis)
      yield* repo.insertFile({ id, tenant: options.by.tenant, account: options.by.account, sha256: staged.sha256, size: staged.size, contentType: options.contentType, at })
        // Without its row nothing can ever refer to the staged copy: it goes with the refusal.
        .pipe(Effect.tapError(() => files.value.discardStaged(id)))
      return { fileId: id, sha256: staged.sha256, size: staged.size, contentType: options.contentType }
    })

    /** A receipt's effects and their states (never the payer's contact or the notification body). */
    const state = Effect.fn("Receipts.state")(function* (tenant: string, id: string) {
      const head = yield* repo.receiptHead(tenant, id)
      if (Option.isNone(head)) return Option.none()
      const effects = yield* repo.effectsOf(id)
      return Option.some({
        id: head.value.id,
        tenant: head.value.tenant_id,
        reference: head.value.reference,
        createdAt: head.value.created_at,
        effects: effects.map((e) => ({
          id: e.id,
          seq: e.seq,
          kind: e.kind,
          state: e.state,
          attempt: e.attempt,
          nextAttemptAt: e.next_attempt_at,
          lastError: e.last_error,
          frozen: e.frozen,
          completedAt: e.completed_at
        }))
      })
    })

    /**
     * One page of a tenant's receipt effects, optionally in one state, oldest receipt first and each receipt's effects
     * in the order they run (the console's list). Sizes are clamped to 1..100.
     */
    const effects = Effect.fn("Receipts.effects")(function* (tenant: string, options: {
      readonly state?: typeof EffectState.Type | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
    } = {}) {
      const size = Math.min(Math.max(Math.floor(options.limit ?? EFFECT_PAGE_LIMIT), 1), EFFECT_PAGE_LIMIT)
      const after = options.cursor === undefined ? null : yield* decodeEffectCursor(options.cursor)
      const rows = yield* repo.listTenant({ tenant, state: options.state ?? null, after, limit: size + 1 })
      const page = rows.slice(0, size)
      const last = page[page.length - 1]
      return new ReceiptEffectPage({
        items: page.map(toEffectItem),
        // Stryker disable next-line ConditionalExpression: more rows than the page's size means the page has a last row
        nextCursor: rows.length > size && last !== undefined ? encodeEffectCursor(last) : null
      })
    })

    /** One effect of a tenant; none for an id that is not an effect of this tenant. */
    const effect = Effect.fn("Receipts.effect")(function* (tenant: string, id: string) {
      if (!UUID.test(id)) return Option.none<ReceiptEffectItem>()
      return Option.map(yield* repo.findEffect(tenant, id), toEffectItem)
    })

    /** A receipt's business audit rows (who recorded it, under which request), newest first, at most 100. */
    const receiptAudit = Effect.fn("Receipts.receiptAudit")(function* (tenant: string, receiptId: string) {
      if (!UUID.test(receiptId)) return []
      const rows = yield* repo.auditOf({ tenant, receiptId, limit: EFFECT_PAGE_LIMIT })
      return rows.map((row) => new ReceiptAuditEntry({ action: row.action, actor: row.actor, correlationId: row.correlation_id, at: row.at }))
    })

    /** Spec 001's pending work: a receipt effect not yet done (pending, also while it waits for its turn or a retry, or running). */
    const hasPendingWork: Effect.Effect<boolean, ReceiptsStorageUnavailable> = repo.hasPending.pipe(
      Effect.withSpan("Receipts.hasPendingWork")
    )

    /**
     * Receipt effects as a durable queue (core's QueueView): effects by state (pending, running, done; a done effect
     * carries no outcome to split it by); due: a pending effect whose attempt time has come and whose earlier effects
     * are all done, exactly what the worker's claim takes (a running one past the stale-claim age goes back to pending
     * by the worker's own configured rule first); completed: effects done, by their completion time.
     */
    const queueView: QueueView = {
      family: "receipt-effects",
      title: "Receipt effects",
      snapshot: Effect.map(repo.queueView, queueSnapshotOf("receipt-effects", EffectState.literals)).pipe(
        Effect.withSpan("Receipts.queueView")
      )
    }

    return { record, stage, state, effects, effect, receiptAudit, hasPendingWork, queueView } as const
  }),
  dependencies: [ReceiptsRepo.Default]
}) {}
