import { CorrelationId } from "@delivery/core"
import { Schema } from "effect"

// Every outcome of POST /controlplane/v1/envelopes carries one of these stable reasons and the
// request's correlation id; none carries the credential, the signature or the payload.
// docs/controlplane-inbound.md lists them with their statuses and the check that produces each.

/** The request's server-chosen correlation id (core's, assigned at the HTTP edge): it ties a response to its audit row and logs. */
export { CorrelationId }

const refusal = { correlationId: CorrelationId }

/** 403: authenticated, but this caller may not put this envelope into this tenant's streams. */
export const ForbiddenReason = Schema.Literal(
  "device-credential-required",
  "route-tenant-mismatch",
  "key-unknown",
  "key-revoked",
  "key-expired",
  "signature-invalid"
)
export type ForbiddenReason = typeof ForbiddenReason.Type

export class EnvelopeForbidden extends Schema.TaggedError<EnvelopeForbidden>()("EnvelopeForbidden", {
  ...refusal,
  reason: ForbiddenReason
}) {}

/** 409: the stream already holds something this envelope contradicts. */
export const ConflictReason = Schema.Literal(
  "event-id-conflict",
  "idempotency-key-conflict",
  "sequence-below-replay-floor",
  "sequence-conflict"
)
export type ConflictReason = typeof ConflictReason.Type

export class EnvelopeConflict extends Schema.TaggedError<EnvelopeConflict>()("EnvelopeConflict", {
  ...refusal,
  reason: ConflictReason
}) {}

/** 422: the body is not a usable controlplane/v1 envelope. */
export const UnprocessableReason = Schema.Literal(
  "json-malformed",
  "envelope-invalid",
  "signature-malformed",
  "schema-version-unsupported",
  "metadata-invalid"
)
export type UnprocessableReason = typeof UnprocessableReason.Type

export class EnvelopeUnprocessable extends Schema.TaggedError<EnvelopeUnprocessable>()("EnvelopeUnprocessable", {
  ...refusal,
  reason: UnprocessableReason,
  /** For envelope-invalid / metadata-invalid: what is wrong, never the offending value. */
  problem: Schema.optional(Schema.Literal("unexpected-member", "missing-member", "invalid-value")),
  /** A JSON pointer made only of schema member names and validated attribute keys. */
  at: Schema.optional(Schema.String),
  /** For signature-malformed: how the base64url text was wrong. */
  defect: Schema.optional(Schema.String)
}) {}

/** 413: refused before anything else, so no identity is known and no audit row is written. */
export class EnvelopeTooLarge extends Schema.TaggedError<EnvelopeTooLarge>()("EnvelopeTooLarge", {
  ...refusal,
  reason: Schema.Literal("body-too-large"),
  limit: Schema.Number
}) {}

/** 400: the body stream broke off (client gone or transport error) before it was complete. */
export class EnvelopeUnreadable extends Schema.TaggedError<EnvelopeUnreadable>()("EnvelopeUnreadable", {
  ...refusal,
  reason: Schema.Literal("body-unreadable")
}) {}

/** 429: the configured sync limiter (tenant/account/device + sync-ingest). `retryAfter` in ms. */
export class SyncRateLimited extends Schema.TaggedError<SyncRateLimited>()("SyncRateLimited", {
  ...refusal,
  reason: Schema.Literal("sync-rate-limited"),
  retryAfter: Schema.Number
}) {}

/** 503: nothing was committed (and so nothing acknowledged); retrying is safe. */
export class InboxStorageUnavailable extends Schema.TaggedError<InboxStorageUnavailable>()(
  "InboxStorageUnavailable",
  { ...refusal, reason: Schema.Literal("storage-unavailable") }
) {}

export type IngestRefusal =
  | EnvelopeForbidden
  | EnvelopeConflict
  | EnvelopeUnprocessable
  | SyncRateLimited
  | InboxStorageUnavailable

const acknowledgement = {
  correlationId: CorrelationId,
  /** SHA-256 (hex) of the signed bytes: the same value the audit row records. */
  eventIdentity: Schema.String,
  sequence: Schema.Number,
  /** The stream's contiguous cursor after this commit: every sequence up to it is retained or closed. */
  cursor: Schema.Number
}

/**
 * 201: committed now. Reordered arrivals (ahead of a gap, or filling one) are accepted under this same
 * public outcome; only the audit row tells them apart (reason `reordered`).
 */
export class EnvelopeAccepted extends Schema.Class<EnvelopeAccepted>("EnvelopeAccepted")({
  outcome: Schema.Literal("accepted"),
  reason: Schema.Literal("accepted"),
  ...acknowledgement
}) {}

/** 200: the same event (same event identity) was committed before; this duplicate's audit row is committed too. */
export class EnvelopeDuplicate extends Schema.Class<EnvelopeDuplicate>("EnvelopeDuplicate")({
  outcome: Schema.Literal("duplicate"),
  reason: Schema.Literal("duplicate"),
  ...acknowledgement
}) {}

export type Acknowledgement = EnvelopeAccepted | EnvelopeDuplicate

/** What an audit row says happened; `reordered` is internal, the public outcome stays `accepted`. */
export type AuditOutcome = "accepted" | "duplicate" | "refused"

/** A stream's position, for operators and tests. */
export class StreamState extends Schema.Class<StreamState>("StreamState")({
  tenant: Schema.String,
  project: Schema.String,
  producer: Schema.String,
  cursor: Schema.Number,
  replayFloor: Schema.Number,
  highSequence: Schema.Number
}) {}

/** A stream as the operator console lists it: its position and when it was created and last written. */
export class StreamSummary extends Schema.Class<StreamSummary>("StreamSummary")({
  tenant: Schema.String,
  project: Schema.String,
  producer: Schema.String,
  cursor: Schema.Number,
  replayFloor: Schema.Number,
  highSequence: Schema.Number,
  createdAt: Schema.DateFromSelf,
  /** The last envelope received on the stream, or the last floor request (both lock and touch the row). */
  lastReceivedAt: Schema.DateFromSelf
}) {}

/** One page of a tenant's streams; `nextCursor` continues after its last stream, null on the last page. */
export class StreamPage extends Schema.Class<StreamPage>("StreamPage")({
  items: Schema.Array(StreamSummary),
  nextCursor: Schema.NullOr(Schema.String)
}) {}

/** An `inbox_stream_audit` row: who asked for which floor, what it was before and after. */
export class StreamAuditEntry extends Schema.Class<StreamAuditEntry>("StreamAuditEntry")({
  action: Schema.String,
  outcome: Schema.Literal("applied", "unchanged"),
  floorBefore: Schema.Number,
  floorAfter: Schema.Number,
  requested: Schema.Number,
  actor: Schema.String,
  at: Schema.DateFromSelf,
  correlationId: Schema.String
}) {}

/** A stream list's cursor that this service did not write. */
export class StreamCursorInvalid extends Schema.TaggedError<StreamCursorInvalid>()("StreamCursorInvalid", {
  reason: Schema.Literal("cursor-invalid")
}) {}
