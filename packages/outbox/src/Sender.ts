import { ProviderHttp, providerCallTimer, timeProviderCall } from "@delivery/core"
import type { TenantId } from "@delivery/signer"
import { Context, Data, Effect, Layer, type Tracer } from "effect"
import { OutboxSettings } from "./OutboxConfig.ts"
import { type WebhookHeaders, WebhookKeyUnavailable, WebhookSigner } from "./WebhookSignature.ts"

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

/**
 * One attempt's send: never fails, every way an attempt can end is an outcome; interrupting it aborts the request.
 * A sender may also offer `start`, the same attempt without a fiber of its own (see `StartSend`); the outbox's lanes
 * then run a whole batch from one fiber.
 */
export type Send = ((delivery: Delivery) => Effect.Effect<SendOutcome>) & { readonly start?: StartSend }

/**
 * Starts one attempt at once and hands its outcome to `done`, once, unless the returned `Abort` stopped it first
 * (its request aborted, its spans ended with the interruption). It may call `done` before it returns (an attempt not
 * made). A defect (a malformed header) is thrown.
 */
export type StartSend = (delivery: Delivery, done: (outcome: SendOutcome) => void) => ProviderHttp.Abort

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
const targetMissing = new NotSent({ code: "target-missing" })
const keyUnavailable = new NotSent({ code: "webhook-key-unavailable" })

/** An attempt answered at once: its outcome before `start` returns, nothing to abort. */
const answeredAtOnce = (done: (outcome: SendOutcome) => void, outcome: SendOutcome): ProviderHttp.Abort => {
  done(outcome)
  return () => {}
}

/**
 * Acknowledges everything without any I/O: the benchmark's no-op job. It offers `start` as the HTTP sender does, so a
 * no-op batch runs through the same lanes as a shipped one (one fiber per batch) and measures what they cost.
 */
export const noopSender = senderOf(Object.assign(() => Effect.succeed(delivered), {
  start: ((_, done) => answeredAtOnce(done, delivered)) satisfies StartSend
}))

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
    const recordDuration = providerCallTimer("outbox")
    const requestOf = (delivery: Delivery, endpoint: string, headers: WebhookHeaders): ProviderHttp.ProviderRequest => ({
      // Validated (ProviderEndpoint.parse) when the operator registered it.
      endpoint: endpoint as ProviderHttp.ProviderEndpoint,
      idempotencyKey: delivery.id,
      body: delivery.body,
      contentType: "application/json",
      headers,
      timeout: requestTimeout,
      ...(delivery.span === undefined ? {} : { parentSpan: delivery.span })
    })
    const forBatch = (tenants: ReadonlySet<TenantId>) =>
      Effect.map(Effect.all([webhooks.forBatch(tenants), provider.starter, Effect.clock]), ([headersFor, startCall, clock]): Send => {
        const send: Send = (delivery) => {
          const endpoint = delivery.endpoint
          if (endpoint === null) return Effect.succeed(targetMissing)
          return headersFor(delivery.tenant, delivery.id, delivery.body).pipe(
            Effect.matchEffect({
              onFailure: () => Effect.succeed(keyUnavailable),
              onSuccess: (headers) => provider.send(requestOf(delivery, endpoint, headers)).pipe(timed)
            })
          )
        }
        // Without a fiber per attempt when both the signature and the call can be made at once (a key source in this
        // process, a plain tracer): the same request, signature, spans and histogram.
        const headersNow = headersFor.now
        if (headersNow === undefined || startCall === undefined) return send
        const start: StartSend = (delivery, done) => {
          const endpoint = delivery.endpoint
          if (endpoint === null) return answeredAtOnce(done, targetMissing)
          const headers = headersNow(delivery.tenant, delivery.id, delivery.body)
          if (headers instanceof WebhookKeyUnavailable) return answeredAtOnce(done, keyUnavailable)
          const started = clock.unsafeCurrentTimeNanos()
          return startCall(requestOf(delivery, endpoint, headers), (outcome) => {
            recordDuration(clock.unsafeCurrentTimeNanos() - started)
            done(outcome)
          })
        }
        return Object.assign(send, { start })
      })
    return { forBatch }
  })
)
