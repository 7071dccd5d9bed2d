import { ProviderHttp, timeProviderCall } from "@delivery/core"
import type { TenantId } from "@delivery/signer"
import { Context, Data, Effect, Layer, type Tracer } from "effect"
import { OutboxSettings } from "./OutboxConfig.ts"
import { WebhookSigner } from "./WebhookSignature.ts"

/** One attempt of one claimed row. */
export interface Delivery {
  readonly id: string
  readonly tenant: TenantId
  readonly project: string
  /** Null when the target was removed after enqueue. */
  readonly endpoint: string | null
  /** The signed envelope as stored (RFC 8785 JSON): the exact body. */
  readonly body: string
  readonly attempt: number
  /** The attempt's span (`OutboxDelivery.deliver`): the provider call's span nests in it. */
  readonly span?: Tracer.AnySpan
}

/** The attempt was not made at all, for a reason of ours rather than the receiver's. */
export class NotSent extends Data.TaggedClass("NotSent")<{
  readonly code: "webhook-key-unavailable" | "target-missing"
}> {}

export type SendOutcome = ProviderHttp.ProviderOutcome | NotSent

/** One attempt's send: never fails, every way an attempt can end is an outcome; interrupting it aborts the request. */
export type Send = (delivery: Delivery) => Effect.Effect<SendOutcome>

/**
 * The network sender port (spec 000: "a deployment must explicitly inject its ... network sender").
 * `forBatch` runs once per claimed batch, after the claim, with the batch's tenants: what the
 * attempts must know as of now (which signing key is active) is read there, never cached across
 * batches, since another process may rotate or revoke a key at any moment. It cannot fail either.
 */
export class OutboxSender extends Context.Tag("@delivery/outbox/OutboxSender")<OutboxSender, {
  readonly forBatch: (tenants: ReadonlySet<TenantId>) => Effect.Effect<Send>
}>() {}

/** A sender that needs nothing per batch. */
export const senderOf = (send: Send) => Layer.succeed(OutboxSender, { forBatch: () => Effect.succeed(send) })

const delivered = new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 })

/** Acknowledges everything without any I/O: the benchmark's no-op job. */
export const noopSender = senderOf(() => Effect.succeed(delivered))

/**
 * POSTs the signed envelope with the Standard Webhooks headers through the one provider adapter:
 * no redirects, `Idempotency-Key` = `webhook-id` = the message id (stable across retries and
 * redrive), a bounded request timeout, and the adapter's outcome classification. The webhook is
 * signed by the key the tenant has active when its batch is sent; without one (none active, or
 * the key source lacks its private key) the attempt is not made: `webhook-key-unavailable`.
 */
export const httpSender = Layer.effect(
  OutboxSender,
  Effect.gen(function*() {
    const provider = yield* ProviderHttp.ProviderHttp
    const webhooks = yield* WebhookSigner
    const { requestTimeout } = yield* OutboxSettings
    const timed = timeProviderCall("outbox")
    const forBatch = (tenants: ReadonlySet<TenantId>) =>
      Effect.map(webhooks.forBatch(tenants), (headersFor): Send => (delivery) => {
        // Validated (ProviderEndpoint.parse) when the operator registered it.
        if (delivery.endpoint === null) return Effect.succeed(new NotSent({ code: "target-missing" }))
        const endpoint = delivery.endpoint as ProviderHttp.ProviderEndpoint
        return headersFor(delivery.tenant, delivery.id, delivery.body).pipe(
          Effect.matchEffect({
            onFailure: () => Effect.succeed(new NotSent({ code: "webhook-key-unavailable" })),
            onSuccess: (headers) =>
              provider.send({
                endpoint,
                idempotencyKey: delivery.id,
                body: delivery.body,
                contentType: "application/json",
                headers,
                timeout: requestTimeout,
                ...(delivery.span === undefined ? {} : { parentSpan: delivery.span })
              }).pipe(timed)
          })
        )
      })
    return { forBatch }
  })
)
