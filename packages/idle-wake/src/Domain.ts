import { CorrelationId, requestCorrelationId } from "@delivery/core"
import { boundedId } from "@delivery/identity"
import { Effect, Schema } from "effect"

// Spec 001 (authenticated incoming-wake proof), the tenant side. Ids are bounded like every other id here; the
// refusals carry a stable reason and the request's correlation id, never a value from the assertion.

/** A stack: one tenant's compute, the unit the cloud puts to sleep and wakes. */
export const StackId = boundedId("StackId")
export type StackId = typeof StackId.Type

/** The id of a signing key of the cloud control signer or of a tenant's report key. */
export const SignerKeyId = boundedId("SignerKeyId")
export type SignerKeyId = typeof SignerKeyId.Type

/** A connector instance, GitHub connection, bot registration, endpoint or channel connection id. */
export const ConnectorId = boundedId("ConnectorId")
export type ConnectorId = typeof ConnectorId.Type

/** 401: the assertion is not the cloud control signer's, or no longer (or not yet) valid. */
export class AssertionUnauthenticated extends Schema.TaggedError<AssertionUnauthenticated>()("AssertionUnauthenticated", {
  reason: Schema.Literal(
    "assertion-key-unknown",
    "assertion-signature-invalid",
    "assertion-expired",
    "assertion-not-yet-valid",
    "assertion-lifetime-invalid"
  ),
  correlationId: CorrelationId
}) {}

/** 403: a valid signature, but not for this stack, this action or this audience. */
export class AssertionForbidden extends Schema.TaggedError<AssertionForbidden>()("AssertionForbidden", {
  reason: Schema.Literal("assertion-wrong-stack", "assertion-wrong-action", "assertion-wrong-audience"),
  correlationId: CorrelationId
}) {}

/** 409: the request id was used before (it is recorded durably when first seen). */
export class AssertionReplayed extends Schema.TaggedError<AssertionReplayed>()("AssertionReplayed", {
  reason: Schema.Literal("assertion-replayed"),
  correlationId: CorrelationId
}) {}

/** 422: not a drain assertion of a known version, or a capability that is not exactly the closed shape. */
export class AssertionInvalid extends Schema.TaggedError<AssertionInvalid>()("AssertionInvalid", {
  reason: Schema.Literal(
    "assertion-malformed",
    "assertion-version-unknown",
    "capability-malformed",
    "capability-version-unknown",
    "capability-profile-unknown",
    "capability-profile-duplicate",
    "capability-route-unknown",
    "capability-requires-version-2",
    "hold-too-long"
  ),
  correlationId: CorrelationId
}) {}

/** 503: idle wake is not configured in this process, or its storage cannot be reached (retry later). */
export class IdleWakeUnavailable extends Schema.TaggedError<IdleWakeUnavailable>()("IdleWakeUnavailable", {
  reason: Schema.Literal("idle-wake-unconfigured", "storage-unavailable", "github-secret-unset"),
  correlationId: CorrelationId
}) {}

/** 503 with `Retry-After`: the stack is draining for sleep (spec 001: "its real 503 and Retry-After"). */
export class TenantDraining extends Schema.TaggedError<TenantDraining>()("TenantDraining", {
  reason: Schema.Literal("tenant-draining"),
  correlationId: CorrelationId,
  retryAfter: Schema.Int
}) {}

/** Database failures inside the package; mapped to `IdleWakeUnavailable` at the HTTP edge. */
export class IdleWakeStorageUnavailable extends Schema.TaggedError<IdleWakeStorageUnavailable>()(
  "IdleWakeStorageUnavailable",
  { operation: Schema.String, sqlstate: Schema.String }
) {}

/** At the HTTP edge: a storage failure becomes the 503 refusal, with the request's correlation id. */
export const storageUnavailable = {
  IdleWakeStorageUnavailable: () =>
    Effect.flatMap(requestCorrelationId, (correlationId) => Effect.fail(new IdleWakeUnavailable({ reason: "storage-unavailable", correlationId })))
}

/** 401: a connector event not signed by the cloud control signer for this stack. */
export class ConnectorEventUnauthenticated extends Schema.TaggedError<ConnectorEventUnauthenticated>()("ConnectorEventUnauthenticated", {
  reason: Schema.Literal("event-key-unknown", "event-signature-invalid", "event-wrong-stack", "event-wrong-audience"),
  correlationId: CorrelationId
}) {}

/** 422: a signed connector event this stack will never record (the cloud settles it as dead). */
export class ConnectorEventRefused extends Schema.TaggedError<ConnectorEventRefused>()("ConnectorEventRefused", {
  reason: Schema.Literal("event-malformed", "github-signature-invalid", "event-endpoint-unauthorized"),
  correlationId: CorrelationId
}) {}

/** Recorded connector events per page, at most. */
export const RECORDED_EVENT_PAGE_LIMIT = 100

/**
 * A connector event this stack recorded (its receipt), as an operator reads it: its ids, connector instance, endpoint,
 * GitHub event name, the cloud's attempt that delivered it and when. Never the payload or a signature.
 */
export class RecordedConnectorEvent extends Schema.Class<RecordedConnectorEvent>("RecordedConnectorEvent")({
  eventId: Schema.String,
  deliveryId: Schema.String,
  connectorInstance: Schema.String,
  endpoint: Schema.String,
  event: Schema.String,
  cloudAttempt: Schema.Number,
  receivedAt: Schema.DateFromSelf
}) {}

/** One page of recorded connector events, newest first; `nextCursor` continues after its last one, null on the last page. */
export class RecordedEventPage extends Schema.Class<RecordedEventPage>("RecordedEventPage")({
  items: Schema.Array(RecordedConnectorEvent),
  nextCursor: Schema.NullOr(Schema.String)
}) {}

/** A recorded-event list's cursor that this package did not write. */
export class RecordedEventCursorInvalid extends Schema.TaggedError<RecordedEventCursorInvalid>()("RecordedEventCursorInvalid", {
  reason: Schema.Literal("cursor-invalid")
}) {}
