import { SignatureText } from "@delivery/signer"
import { Schema } from "effect"
import { ConnectorId, SignerKeyId, StackId } from "./Domain.ts"
import { Audience } from "./Protocol.ts"

// github-broker-events-v1, delivery (spec 001): the cloud hands a queued connector event to the stack it belongs to as
// one object signed by the cloud control signer (the drain assertion's rule: Ed25519 over RFC 8785 without
// `signature`, its own `type` so no signature crosses kinds). The tenant records it once per event id and GitHub
// delivery id; its answer is the acknowledgement of the cloud's current event lease.

export const CONNECTOR_EVENT_TYPE = "idle-wake/connector-event"

/** The largest GitHub payload carried (GitHub caps webhook payloads at 25 MB; brokers here forward up to 1 MiB). */
export const MAX_EVENT_PAYLOAD_BYTES = 1024 * 1024

const closed = { parseOptions: { onExcessProperty: "error" } } as const

export const DeliveryId = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9-]{1,64}$/), Schema.brand("GithubDeliveryId"))
export const EventName = Schema.String.pipe(Schema.pattern(/^[a-z_]{1,64}$/))
export const GithubSignature = Schema.String.pipe(Schema.pattern(/^sha256=[0-9a-f]{64}$/))
/** The payload bytes as unpadded base64url. */
export const PayloadText = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9_-]*$/),
  Schema.maxLength(Math.ceil((MAX_EVENT_PAYLOAD_BYTES * 4) / 3))
)

export const ConnectorEventDelivery = Schema.Struct({
  type: Schema.Literal(CONNECTOR_EVENT_TYPE),
  version: Schema.Literal(1),
  stack: StackId,
  audience: Audience,
  eventId: Schema.UUID,
  deliveryId: DeliveryId,
  connectorInstance: ConnectorId,
  endpoint: ConnectorId,
  event: EventName,
  payload: PayloadText,
  githubSignature: GithubSignature,
  /** The cloud's claim of this event: the lease this delivery answers. */
  attempt: Schema.Int.pipe(Schema.between(1, 1_000_000)),
  keyId: SignerKeyId,
  signature: SignatureText
}).annotations({ ...closed, identifier: "ConnectorEventDelivery" })
export type ConnectorEventDelivery = typeof ConnectorEventDelivery.Type

/** The tenant's acknowledgement: the event is recorded (now, or by an earlier delivery). */
export const ConnectorEventReceipt = Schema.Struct({
  outcome: Schema.Literal("recorded", "duplicate"),
  eventId: Schema.String
}).annotations({ identifier: "ConnectorEventReceipt" })
export type ConnectorEventReceipt = typeof ConnectorEventReceipt.Type
