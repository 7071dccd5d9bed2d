import { Schema } from "effect"

// Wire shapes of receipts. Everything is bounded: a command is at most 100 lines and 10 attachments.

export const RECEIPTS_PERMISSION = "receipts:write"

const correlationId = Schema.String.annotations({ description: "the request's x-correlation-id" })

export const CommandId = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9._:-]{1,128}$/, { message: () => "commandId: 1-128 of A-Z a-z 0-9 . _ : -" })
)

export const FileId = Schema.String.pipe(
  Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, { message: () => "a file id as returned by the upload" })
)

const Money = Schema.Int.pipe(Schema.between(0, 1_000_000_000_000))

export const ReceiptLine = Schema.Struct({
  description: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200)),
  quantity: Schema.Int.pipe(Schema.between(1, 1_000_000)),
  /** In the currency's minor unit (cents). */
  unitMinor: Money
})

export const Payer = Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200), Schema.pattern(/^[^\r\n]*$/)),
  email: Schema.String.pipe(Schema.maxLength(254), Schema.pattern(/^[^\s@<>",;]+@[^\s@<>",;]+$/, { message: () => "an e-mail address" }))
})

export const RecordReceipt = Schema.Struct({
  /** The client's id for this command: the same id and content replays, the same id and other content is refused. */
  commandId: CommandId,
  reference: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100), Schema.pattern(/^[^\r\n]*$/)),
  currency: Schema.String.pipe(Schema.pattern(/^[A-Z]{3}$/)),
  paidAt: Schema.DateTimeUtc,
  payer: Payer,
  lines: Schema.Array(ReceiptLine).pipe(Schema.minItems(1), Schema.maxItems(100)),
  attachments: Schema.optionalWith(Schema.Array(FileId).pipe(Schema.maxItems(10)), { default: () => [] })
}).annotations({ identifier: "RecordReceipt", parseOptions: { onExcessProperty: "error" } })
export type RecordReceipt = typeof RecordReceipt.Type

export const EffectKind = Schema.Literal("promote-file", "delete-staged", "audit-check", "notify")
export type EffectKind = typeof EffectKind.Type
export const EffectState = Schema.Literal("pending", "running", "done")

export const ReceiptRecorded = Schema.Struct({
  receipt: Schema.Struct({
    id: Schema.String,
    tenant: Schema.String,
    commandId: Schema.String,
    reference: Schema.String,
    currency: Schema.String,
    totalMinor: Schema.Number,
    paidAt: Schema.String,
    lines: Schema.Number,
    attachments: Schema.Number,
    createdAt: Schema.String
  }),
  /** The receipt's effects in the order they run. */
  effects: Schema.Array(Schema.Struct({ id: Schema.String, seq: Schema.Number, kind: EffectKind }))
}).annotations({ identifier: "ReceiptRecorded" })
export type ReceiptRecorded = typeof ReceiptRecorded.Type

export const FileStaged = Schema.Struct({
  fileId: Schema.String,
  sha256: Schema.String,
  size: Schema.Number,
  contentType: Schema.String
}).annotations({ identifier: "ReceiptFileStaged" })

export const EffectView = Schema.Struct({
  id: Schema.String,
  seq: Schema.Number,
  kind: EffectKind,
  state: EffectState,
  attempt: Schema.Number,
  nextAttemptAt: Schema.Date,
  lastError: Schema.NullOr(Schema.String),
  /** notify: whether the notification is frozen (its first attempt has rendered it). Never the body. */
  frozen: Schema.Boolean,
  completedAt: Schema.NullOr(Schema.Date)
}).annotations({ identifier: "ReceiptEffectView" })

export const ReceiptState = Schema.Struct({
  id: Schema.String,
  tenant: Schema.String,
  reference: Schema.String,
  createdAt: Schema.Date,
  effects: Schema.Array(EffectView)
}).annotations({ identifier: "ReceiptState" })

/** Receipt effects per page and audit rows per receipt, at most. */
export const EFFECT_PAGE_LIMIT = 100

/**
 * A receipt effect as an operator reads it: ids, kind, state, attempts, stable codes and times. Never the payer's
 * contact, the receipt's reference or lines, a file's content or the notification body.
 */
export class ReceiptEffectItem extends Schema.Class<ReceiptEffectItem>("ReceiptEffectItem")({
  id: Schema.String,
  receiptId: Schema.String,
  tenant: Schema.String,
  seq: Schema.Number,
  kind: EffectKind,
  state: EffectState,
  attempt: Schema.Number,
  /** pending: when it may be claimed (once every earlier effect of its receipt is done). */
  nextAttemptAt: Schema.DateFromSelf,
  /** pending: the first earlier effect of its receipt that is not done yet, if any. */
  waitingFor: Schema.NullOr(Schema.Number),
  /** running: when the claim was taken (a claim older than the stale-claim age goes back to pending). */
  claimedAt: Schema.NullOr(Schema.DateFromSelf),
  lastError: Schema.NullOr(Schema.String),
  /** notify: whether its first attempt has frozen the notification. */
  frozen: Schema.Boolean,
  completedAt: Schema.NullOr(Schema.DateFromSelf),
  createdAt: Schema.DateFromSelf,
  updatedAt: Schema.DateFromSelf
}) {}

/** One page of a tenant's receipt effects; `nextCursor` continues after its last effect, null on the last page. */
export class ReceiptEffectPage extends Schema.Class<ReceiptEffectPage>("ReceiptEffectPage")({
  items: Schema.Array(ReceiptEffectItem),
  nextCursor: Schema.NullOr(Schema.String)
}) {}

/** A `receipt_audit` row: who recorded the receipt, under which request. */
export class ReceiptAuditEntry extends Schema.Class<ReceiptAuditEntry>("ReceiptAuditEntry")({
  action: Schema.String,
  actor: Schema.String,
  correlationId: Schema.String,
  at: Schema.DateFromSelf
}) {}

// Refusals: a stable reason and the correlation id, nothing the client sent.

/** A receipt effect list's cursor that this package did not write. */
export class ReceiptEffectCursorInvalid extends Schema.TaggedError<ReceiptEffectCursorInvalid>()("ReceiptEffectCursorInvalid", {
  reason: Schema.Literal("cursor-invalid")
}) {}

export class CommandConflict extends Schema.TaggedError<CommandConflict>()("CommandConflict", {
  reason: Schema.Literal("command-id-reused"),
  correlationId
}) {}

export class AttachmentRefused extends Schema.TaggedError<AttachmentRefused>()("AttachmentRefused", {
  /** Unknown or another tenant's file, or one already attached to a receipt, or listed twice. */
  reason: Schema.Literal("attachment-unknown", "attachment-already-attached", "attachment-duplicated"),
  fileId: Schema.String,
  correlationId
}) {}

export class UploadRejected extends Schema.TaggedError<UploadRejected>()("UploadRejected", {
  reason: Schema.Literal("file-too-large", "upload-truncated", "upload-empty", "content-type-invalid"),
  maxBytes: Schema.Number,
  correlationId
}) {}

export class ReceiptNotFound extends Schema.TaggedError<ReceiptNotFound>()("ReceiptNotFound", {
  reason: Schema.Literal("receipt-not-found"),
  correlationId
}) {}

export class ReceiptsUnavailable extends Schema.TaggedError<ReceiptsUnavailable>()("ReceiptsUnavailable", {
  /** `receipt-storage-unconfigured`: RECEIPT_STAGING_ROOT / RECEIPT_STORAGE_ROOT are not set in this process. */
  reason: Schema.Literal("storage-unavailable", "receipt-storage-unconfigured", "file-storage-failed"),
  correlationId
}) {}

/** Database failures inside the package; mapped to `ReceiptsUnavailable` at the HTTP edge, fatal in the worker. */
export class ReceiptsStorageUnavailable extends Schema.TaggedError<ReceiptsStorageUnavailable>()("ReceiptsStorageUnavailable", {
  operation: Schema.String,
  /** The database's SQLSTATE, or the socket error code, or `unknown` (never the driver's message). */
  sqlstate: Schema.String
}) {}
