import { WebhookSignature } from "@delivery/outbox"
import { decodeEnvelope, type Envelope, publicKeyFromRaw, verifyEnvelopeSignature } from "@delivery/signer"
import { Clock, Effect, Option, Schema } from "effect"
import { type KeyObject, verify } from "node:crypto"
import type { DeliveryClient } from "./Client.ts"

// Receiver side of outbound delivery (docs/controlplane-outbound.md, "Verifying a delivery"): the Standard
// Webhooks `v1a` signature over `${webhook-id}.${webhook-timestamp}.${body}`, the timestamp within a
// tolerance of now, then the envelope's own Ed25519 signature. Both are made with the tenant's signing key
// named by the envelope's `keyId`, looked up inside the envelope's tenant.

/** A tenant's signing key as the operator route lists it (`GET /operator/tenants/:tenant/signing-keys`). */
export interface TrustedKey {
  readonly keyId: string
  /** Raw 32-byte Ed25519 public key. */
  readonly publicKey: Uint8Array
  readonly state: "active" | "retired" | "revoked"
  /** A retired key verifies until then (exclusive). */
  readonly verifyUntil: Date | null
}

/** Where the verifier finds a tenant's keys. */
export type KeyLookup<E = never> = (tenant: string, keyId: string) => Effect.Effect<Option.Option<TrustedKey>, E>

export const VerificationReason = Schema.Literal(
  "headers-missing",
  "timestamp-invalid",
  "timestamp-stale",
  "body-invalid",
  "key-unknown",
  "key-revoked",
  "key-expired",
  "webhook-signature-invalid",
  "envelope-signature-invalid"
)
export type VerificationReason = typeof VerificationReason.Type

/** The delivery is not to be trusted; `reason` says which check refused it. */
export class DeliveryRejected extends Schema.TaggedError<DeliveryRejected>()("DeliveryRejected", {
  reason: VerificationReason
}) {}

export interface DeliveryRequest {
  /** Header names in any case. */
  readonly headers: Readonly<Record<string, string | undefined>> | Headers
  /** The body exactly as received: a re-serialized body does not verify. */
  readonly body: string | Uint8Array
}

export interface VerifiedDelivery {
  /** Deduplicate by this: the same on every retry and redrive of one message. */
  readonly webhookId: string
  readonly timestamp: number
  readonly envelope: Envelope
  readonly key: TrustedKey
}

export interface VerifierOptions<E> {
  readonly keys: KeyLookup<E>
  /** Seconds a `webhook-timestamp` may lie before or after now (default 300, Standard Webhooks' own). */
  readonly toleranceSeconds?: number | undefined
}

const headerOf = (headers: DeliveryRequest["headers"], name: string): string | undefined => {
  if (headers instanceof Headers) return headers.get(name) ?? undefined
  for (const [key, value] of Object.entries(headers)) if (key.toLowerCase() === name) return value
  return undefined
}

const reject = (reason: VerificationReason) => Effect.fail(new DeliveryRejected({ reason }))

/** Whether some `v1a,<base64>` entry of the space-separated header is a signature of `content` by `key`. */
const someV1aVerifies = (header: string, content: Uint8Array, key: KeyObject) =>
  header.split(" ").some((entry) => {
    const comma = entry.indexOf(",")
    // Stryker disable next-line ConditionalExpression,EqualityOperator: an entry without a comma (or starting with one) never names the scheme, and what would be read as its signature is never 64 bytes
    if (comma < 0 || entry.slice(0, comma) !== WebhookSignature.SCHEME) return false
    const signature = Buffer.from(entry.slice(comma + 1), "base64")
    // Stryker disable next-line ConditionalExpression: Ed25519 verification refuses a signature of any other length itself; the check only skips it
    return signature.length === 64 && verify(null, content, key, signature)
  })

export const makeVerifier = <E>(options: VerifierOptions<E>) => {
  const tolerance = options.toleranceSeconds ?? 300

  /** Checks one delivery; succeeds with its envelope or fails with `DeliveryRejected` (or the lookup's error). */
  const verifyDelivery = (request: DeliveryRequest): Effect.Effect<VerifiedDelivery, DeliveryRejected | E> =>
    Effect.gen(function* () {
      const id = headerOf(request.headers, "webhook-id")
      const timestampText = headerOf(request.headers, "webhook-timestamp")
      const signatures = headerOf(request.headers, "webhook-signature")
      if (id === undefined || timestampText === undefined || signatures === undefined) return yield* reject("headers-missing")
      if (!/^\d{1,12}$/.test(timestampText)) return yield* reject("timestamp-invalid")
      const timestamp = Number(timestampText)
      const now = yield* Clock.currentTimeMillis
      if (Math.abs(now / 1000 - timestamp) > tolerance) return yield* reject("timestamp-stale")

      const body = typeof request.body === "string"
        ? request.body
        : yield* Effect.try(() => new TextDecoder("utf-8", { fatal: true }).decode(request.body as Uint8Array)).pipe(
          Effect.orElse(() => reject("body-invalid"))
        )
      const parsed = yield* Effect.try(() => JSON.parse(body) as unknown).pipe(Effect.orElse(() => reject("body-invalid")))
      const envelope = yield* Effect.orElse(decodeEnvelope(parsed), () => reject("body-invalid"))

      const found = yield* options.keys(envelope.route.tenant, envelope.keyId)
      if (Option.isNone(found)) return yield* reject("key-unknown")
      const key = found.value
      if (key.state === "revoked") return yield* reject("key-revoked")
      if (key.state === "retired" && (key.verifyUntil === null || key.verifyUntil.getTime() <= now)) {
        return yield* reject("key-expired")
      }
      const publicKey = publicKeyFromRaw(key.publicKey)
      if (!someV1aVerifies(signatures, WebhookSignature.signedContent(id, timestamp, body), publicKey)) {
        return yield* reject("webhook-signature-invalid")
      }
      if (!verifyEnvelopeSignature(envelope, publicKey)) return yield* reject("envelope-signature-invalid")
      return { webhookId: id, timestamp, envelope, key }
    })

  return { verifyDelivery } as const
}

/** Keys given up front, for example the `keys` of a saved `GET …/signing-keys` answer. */
export const staticKeys = (tenants: Readonly<Record<string, ReadonlyArray<TrustedKey>>>): KeyLookup =>
  (tenant, keyId) => Effect.succeed(Option.fromNullable(tenants[tenant]?.find((key) => key.keyId === keyId)))

/**
 * Keys read from the backend's operator route on every lookup, so a revocation is seen by the very next
 * delivery. A receiver that verifies many deliveries a second can wrap this with its own short cache and
 * accept that a revocation takes that long to be seen.
 */
export const operatorKeys = (operator: DeliveryClient): KeyLookup<Effect.Effect.Error<ReturnType<DeliveryClient["signer"]["list"]>>> => (tenant, keyId) =>
  Effect.map(operator.signer.list({ path: { tenant } }), (list) =>
    Option.map(Option.fromNullable(list.keys.find((key) => key.keyId === keyId)), (key): TrustedKey => ({
      keyId: key.keyId,
      publicKey: key.publicKey,
      state: key.state,
      verifyUntil: key.verifyUntil
    })))
