import { ProviderOutcomeCode } from "@delivery/core"
import { Envelope, IdempotencyKey, ProjectId, TenantId, UnsignedEnvelope } from "@delivery/signer"
import { Schema } from "effect"

export { ProjectId, TenantId }

const closed = { parseOptions: { onExcessProperty: "error" } } as const

/** The message identity on the wire (`webhook-id`, `Idempotency-Key`): a UUID, stable across retries and redrive. */
export const MessageId = Schema.UUID.pipe(Schema.brand("OutboxMessageId"))
export type MessageId = typeof MessageId.Type

/** Caller-set maximum attempts (spec 000); bounded so one message cannot retry for ever. */
export const MAX_ATTEMPTS_LIMIT = 100
export const MaxAttempts = Schema.Int.pipe(Schema.between(1, MAX_ATTEMPTS_LIMIT))

/** Spec 000: "Workers claim at most 100 due rows"; also the largest dead-letter page. */
export const CLAIM_LIMIT = 100
export const PAGE_LIMIT = 100

export const MessageState = Schema.Literal("pending", "delivering", "delivered", "dead")
export type MessageState = typeof MessageState.Type

export const DeadReason = Schema.Literal("rejected", "attempts-exhausted")
export type DeadReason = typeof DeadReason.Type

/**
 * The closed set of codes a row or log may carry: the provider adapter's codes plus the outbox's
 * own. Never a receiver body, status text, token or payload.
 */
export const DeliveryErrorCode = Schema.Union(
  ProviderOutcomeCode,
  Schema.Literal(
    // 429: the receiver asks us to slow down; retried (honouring Retry-After), never dead-lettered at once.
    "provider-429",
    // The previous owner's lease expired on the last allowed attempt (a crash or a stall).
    "lease-expired",
    // The tenant has no usable signing key for the webhook signature right now.
    "webhook-key-unavailable",
    // No delivery target is registered for the tenant/project any more.
    "target-missing"
  )
)
export type DeliveryErrorCode = typeof DeliveryErrorCode.Type

/** What a caller asks to send: the envelope without `keyId` (the Signer fills in the tenant's active key). */
export const SignRequest = UnsignedEnvelope.omit("keyId").annotations({ ...closed, identifier: "OutboxSignRequest" })
export type SignRequest = typeof SignRequest.Type

export const EnqueueRequest = Schema.Struct({
  envelope: SignRequest,
  maxAttempts: Schema.optionalWith(MaxAttempts, { exact: true })
}).annotations({ ...closed, identifier: "OutboxEnqueueRequest" })
export type EnqueueRequest = typeof EnqueueRequest.Type

/** A message as operators and callers see it: identities, state and a stable code, never the payload. */
export class OutboxMessage extends Schema.Class<OutboxMessage>("OutboxMessage")({
  id: MessageId,
  tenant: TenantId,
  project: ProjectId,
  idempotencyKey: IdempotencyKey,
  eventIdentity: Schema.String,
  state: MessageState,
  attempt: Schema.Int,
  maxAttempts: Schema.Int,
  attemptCeiling: Schema.Int,
  dueAt: Schema.NullOr(Schema.Date),
  lastError: Schema.NullOr(DeliveryErrorCode),
  deadReason: Schema.NullOr(DeadReason),
  createdAt: Schema.Date,
  deliveredAt: Schema.NullOr(Schema.Date),
  deadAt: Schema.NullOr(Schema.Date)
}) {}

/** The envelope was signed and stored now. */
export class Enqueued extends Schema.Class<Enqueued>("OutboxEnqueued")({
  replayed: Schema.Literal(false),
  message: OutboxMessage,
  envelope: Envelope
}) {}

/** The key was already enqueued with the same content: the original, immutable envelope. */
export class EnqueueReplayed extends Schema.Class<EnqueueReplayed>("OutboxEnqueueReplayed")({
  replayed: Schema.Literal(true),
  message: OutboxMessage,
  envelope: Envelope
}) {}

export class DeliveryTarget extends Schema.Class<DeliveryTarget>("DeliveryTarget")({
  tenant: TenantId,
  project: ProjectId,
  endpoint: Schema.String,
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}) {}

export const RegisterTarget = Schema.Struct({
  endpoint: Schema.String.pipe(Schema.maxLength(2048))
}).annotations({ ...closed, identifier: "RegisterDeliveryTarget" })

export const Redrive = Schema.Struct({
  maxAttempts: Schema.optionalWith(MaxAttempts, { exact: true })
}).annotations({ ...closed, identifier: "RedriveDeadLetter" })

export class DeadLetterPage extends Schema.Class<DeadLetterPage>("DeadLetterPage")({
  items: Schema.Array(OutboxMessage),
  /** Pass back as `cursor` for the next page; null on the last page. */
  nextCursor: Schema.NullOr(Schema.String)
}) {}

// Errors: stable reasons and ids only; no HTTP knowledge (statuses are set in Api.ts).

export class IdempotencyKeyConflict extends Schema.TaggedError<IdempotencyKeyConflict>()("IdempotencyKeyConflict", {
  reason: Schema.Literal("idempotency-key-conflict"),
  tenant: Schema.String,
  project: Schema.String,
  idempotencyKey: Schema.String
}) {}

export class DeliveryTargetMissing extends Schema.TaggedError<DeliveryTargetMissing>()("DeliveryTargetMissing", {
  reason: Schema.Literal("delivery-target-missing"),
  tenant: Schema.String,
  project: Schema.String
}) {}

/** No target is registered for the tenant/project (operator lookup). */
export class DeliveryTargetNotFound extends Schema.TaggedError<DeliveryTargetNotFound>()("DeliveryTargetNotFound", {
  reason: Schema.Literal("delivery-target-not-found"),
  tenant: Schema.String,
  project: Schema.String
}) {}

/** The endpoint was refused; `code` says why, the URL itself is never echoed (it may be a capability). */
export class DeliveryTargetInvalid extends Schema.TaggedError<DeliveryTargetInvalid>()("DeliveryTargetInvalid", {
  reason: Schema.Literal("delivery-target-invalid"),
  code: Schema.String
}) {}

export class MessageNotFound extends Schema.TaggedError<MessageNotFound>()("MessageNotFound", {
  reason: Schema.Literal("message-not-found"),
  id: Schema.String
}) {}

export class MessageNotDead extends Schema.TaggedError<MessageNotDead>()("MessageNotDead", {
  reason: Schema.Literal("message-not-dead"),
  id: Schema.String,
  state: MessageState
}) {}

export class CursorInvalid extends Schema.TaggedError<CursorInvalid>()("CursorInvalid", {
  reason: Schema.Literal("cursor-invalid")
}) {}

/** The envelope route names another tenant than the caller's verified one. */
export class TenantMismatch extends Schema.TaggedError<TenantMismatch>()("TenantMismatch", {
  reason: Schema.Literal("tenant-mismatch")
}) {}

/** The outbox tables could not be reached: an outcome to retry later, not a defect. */
export class OutboxStorageUnavailable extends Schema.TaggedError<OutboxStorageUnavailable>()(
  "OutboxStorageUnavailable",
  { operation: Schema.String }
) {}
