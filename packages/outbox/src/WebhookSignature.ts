import { type KeyId, Signer, SigningKeySource, type SigningKeySourceShape, type TenantId } from "@delivery/signer"
import { type Clock, Data, Effect, Option } from "effect"
import { createPublicKey, verify } from "node:crypto"

// Standard Webhooks (https://www.standardwebhooks.com, spec 1.0.0), asymmetric scheme `v1a`:
// the signed content is `${webhook-id}.${webhook-timestamp}.${body}` as UTF-8, signed with
// Ed25519; the header carries `v1a,<standard base64 of the 64-byte signature>`. Public keys are
// presented as `whpk_<standard base64 of the raw 32-byte key>`.

export const SCHEME = "v1a"

const utf8 = new TextEncoder()

/** The exact bytes a `v1a` signature covers. `id` and `timestamp` never contain a `.` (uuid, integer). */
export const signedContent = (id: string, timestamp: number, body: string): Uint8Array =>
  utf8.encode(`${id}.${timestamp}.${body}`)

export const formatSignature = (signature: Uint8Array): string => `${SCHEME},${Buffer.from(signature).toString("base64")}`

/** A tenant's raw Ed25519 public key as Standard Webhooks presents it to receivers. */
export const formatPublicKey = (raw: Uint8Array): string => `whpk_${Buffer.from(raw).toString("base64")}`

/**
 * Receiver-side check (used by the docs and as a reference): some `v1a` entry of the
 * space-delimited header verifies under one of the trusted keys, and the timestamp is within
 * `toleranceSeconds` of now. Anything unexpected is simply `false`.
 */
export const verifyWebhook = (input: {
  readonly id: string
  readonly timestamp: string
  readonly body: string
  readonly signatureHeader: string
  readonly publicKeys: ReadonlyArray<Uint8Array>
  readonly nowSeconds: number
  readonly toleranceSeconds: number
}): boolean => {
  if (!/^\d{1,12}$/.test(input.timestamp)) return false
  const timestamp = Number(input.timestamp)
  if (Math.abs(input.nowSeconds - timestamp) > input.toleranceSeconds) return false
  const content = signedContent(input.id, timestamp, input.body)
  const keys = input.publicKeys.map((raw) =>
    createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(raw).toString("base64url") }, format: "jwk" })
  )
  return input.signatureHeader.split(" ").some((entry) => {
    const [scheme, value] = entry.split(",", 2)
    if (scheme !== SCHEME || value === undefined) return false
    // Ed25519 verification itself refuses a signature of any length other than 64 bytes.
    const signature = Buffer.from(value, "base64")
    return keys.some((key) => verify(null, content, key, signature))
  })
}

/** The tenant cannot sign a webhook right now (no active key, or the key source lacks it). */
export class WebhookKeyUnavailable extends Data.TaggedError("WebhookKeyUnavailable")<{
  readonly tenant: string
}> {}

/** The Standard Webhooks headers of one attempt. */
export type WebhookHeaders = {
  readonly "webhook-id": string
  readonly "webhook-timestamp": string
  readonly "webhook-signature": string
}

/**
 * A batch's signing: the headers of one attempt, signed with the tenant's key active when the batch was claimed.
 * `now`, when the key source signs in this process (`signNow`), makes the same headers at once.
 */
export type HeadersFor = ((tenant: TenantId, id: string, body: string) => Effect.Effect<WebhookHeaders, WebhookKeyUnavailable>) & {
  readonly now?: (tenant: TenantId, id: string, body: string) => WebhookHeaders | WebhookKeyUnavailable
}

/**
 * Signs webhook deliveries with the tenant's active signing key (the one `Signer.sign` uses for
 * envelopes), through the tenant-scoped key source. Which key is active is read when a claimed
 * batch is about to be sent (`forBatch`: one `Signer.keys` per tenant of the batch), never kept
 * across batches: a key rotated or revoked by any process stops signing from the next batch on,
 * and a revoked key is never active.
 */
export class WebhookSigner extends Effect.Service<WebhookSigner>()("@delivery/outbox/WebhookSigner", {
  effect: Effect.gen(function*() {
    const signer = yield* Signer
    const source = yield* SigningKeySource

    const activeKey = (tenant: TenantId) =>
      signer.keys(tenant).pipe(
        Effect.map((keys) => Option.fromNullable(keys.find((key) => key.state === "active")?.keyId)),
        // Unknown is treated like absent: nothing is signed with a key we could not confirm.
        Effect.catchAll((error) =>
          Effect.as(
            Effect.logWarning("webhook signing key lookup failed").pipe(Effect.annotateLogs({ tenant, error: error._tag })),
            Option.none<KeyId>()
          )
        )
      )

    /** The three Standard Webhooks headers for one attempt; the timestamp is the attempt's, from the Clock. */
    const headersOf = (id: string, timestamp: number, signature: Uint8Array): WebhookHeaders => ({
      "webhook-id": id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": formatSignature(signature)
    })

    const headers = (tenant: TenantId, keyId: Option.Option<KeyId>, id: string, body: string) => {
      // Stryker disable next-line ConditionalExpression: without it the key source is asked for key id undefined, which it never holds, and its refusal maps to the same WebhookKeyUnavailable
      if (Option.isNone(keyId)) return Effect.fail(new WebhookKeyUnavailable({ tenant }))
      // One step per attempt rather than a generator: this runs on every delivery.
      return Effect.clockWith((clock) => {
        const timestamp = Math.floor(clock.unsafeCurrentTimeMillis() / 1000)
        return Effect.mapBoth(source.sign(tenant, keyId.value, signedContent(id, timestamp, body)), {
          onFailure: () => new WebhookKeyUnavailable({ tenant }),
          onSuccess: (signature) => headersOf(id, timestamp, signature)
        })
      })
    }

    /** `headers` at once, through the key source's `signNow`, on the Clock of the fiber that read the batch's keys. */
    const headersNow = (
      signNow: NonNullable<SigningKeySourceShape["signNow"]>,
      clock: Clock.Clock,
      tenant: TenantId,
      keyId: Option.Option<KeyId>,
      id: string,
      body: string
    ): WebhookHeaders | WebhookKeyUnavailable => {
      if (Option.isNone(keyId)) return new WebhookKeyUnavailable({ tenant })
      const timestamp = Math.floor(clock.unsafeCurrentTimeMillis() / 1000)
      const signature = signNow(tenant, keyId.value, signedContent(id, timestamp, body))
      return signature instanceof Uint8Array ? headersOf(id, timestamp, signature) : new WebhookKeyUnavailable({ tenant })
    }

    /** Reads the active key of each tenant now; the returned function signs this batch's attempts with them. */
    const forBatch = (tenants: Iterable<TenantId>) =>
      Effect.zipWith(
        Effect.clock,
        Effect.forEach(
          tenants,
          (tenant) => Effect.map(activeKey(tenant), (keyId) => [tenant, keyId] as const),
          // Stryker disable next-line ObjectLiteral: how many tenants' keys are read at a time changes only the timing, never the keys found
          { concurrency: 4 }
        ),
        (clock, entries): HeadersFor => {
          const active = new Map(entries)
          const keyOf = (tenant: TenantId) => active.get(tenant) ?? Option.none()
          const headersFor = (tenant: TenantId, id: string, body: string) => headers(tenant, keyOf(tenant), id, body)
          const { signNow } = source
          return signNow === undefined ? headersFor : Object.assign(headersFor, {
            now: (tenant: TenantId, id: string, body: string) => headersNow(signNow, clock, tenant, keyOf(tenant), id, body)
          })
        }
      )

    return { forBatch } as const
  })
}) {}
