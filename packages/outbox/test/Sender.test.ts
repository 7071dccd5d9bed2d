import { expect, layer } from "@effect/vitest"
import { ProviderHttp } from "@delivery/core"
import { Signer, TenantId } from "@delivery/signer"
import { LoopbackProvider } from "@delivery/testing"
import { Effect, Layer } from "effect"
import { noopSender, NotSent, type SendOutcome } from "../src/Sender.ts"
import { HttpSenderLive, OutboxSender, OutboxSettings, WebhookSignature } from "../src/index.ts"
import { fastSettings, KeySourceLive, publicKeyOf, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

const acme = TenantId.make("acme")
const body = "{\"hello\":\"world\"}"

const deliveryTo = (endpoint: string | null, tenant = acme) => ({
  id: "6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f",
  tenant,
  project: "web",
  endpoint,
  body,
  attempt: 1
})

const sendOnce = <E>(sender: Layer.Layer<OutboxSender, E>, delivery: ReturnType<typeof deliveryTo>) =>
  Effect.flatMap(OutboxSender, (s) => Effect.flatMap(s.forBatch(new Set([delivery.tenant])), (send) => send(delivery))).pipe(
    Effect.provide(sender)
  )

/** The real sender over the suite's Signer, the test key source and the fast settings. */
const httpSender = Effect.map(Signer, (signer) =>
  HttpSenderLive.pipe(
    Layer.provide(KeySourceLive),
    Layer.provide(Layer.succeed(Signer, signer)),
    Layer.provide(OutboxSettings.fromMap(fastSettings))
  ))

layer(SuiteLayer, { excludeTestServices: true })("Senders (real PostgreSQL and a loopback receiver)", (it) => {
  it.effect("the no-op sender acknowledges every attempt as a 2xx delivery without any request", () =>
    Effect.gen(function*() {
      const outcome = yield* sendOnce(noopSender, deliveryTo(null))
      expect(outcome).toEqual(new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 }))
    }))

  it.effect("the HTTP sender makes no request for a row whose target was removed: NotSent target-missing", () =>
    Effect.gen(function*() {
      const receiver = yield* LoopbackProvider
      yield* receiver.reset
      const http = yield* httpSender
      const outcome = yield* sendOnce(http, deliveryTo(null))
      expect(outcome).toEqual(new NotSent({ code: "target-missing" }))
      expect(yield* receiver.requests).toEqual([])
    }))

  it.effect("the HTTP sender POSTs the exact body with Idempotency-Key = webhook-id = the message id and a v1a signature by the tenant's active key", () =>
    Effect.gen(function*() {
      const receiver = yield* LoopbackProvider
      yield* receiver.reset
      yield* setupTenant("acme", "web", receiver.urlFor("/hooks/acme"))
      const http = yield* httpSender
      const delivery = deliveryTo(receiver.urlFor("/hooks/acme"))
      expect(yield* sendOnce(http, delivery)).toMatchObject({ _tag: "Delivered", status: 200 })
      const [request] = yield* receiver.requests
      expect(request).toMatchObject({ method: "POST", path: "/hooks/acme", bodyText: body, idempotencyKey: delivery.id })
      expect(request!.headers["webhook-id"]).toBe(delivery.id)
      expect(WebhookSignature.verifyWebhook({
        id: delivery.id,
        timestamp: request!.headers["webhook-timestamp"]!,
        body,
        signatureHeader: request!.headers["webhook-signature"]!,
        publicKeys: [publicKeyOf(1)],
        nowSeconds: Math.floor(Date.now() / 1000),
        toleranceSeconds: 60
      })).toBe(true)
    }))

  it.effect("the HTTP sender's start (a key source signing in this process) makes send's attempt without a fiber: the same request and signature, the outcome handed over once; target-missing and webhook-key-unavailable answered before it returns, without a request", () =>
    Effect.gen(function*() {
      const receiver = yield* LoopbackProvider
      yield* receiver.reset
      yield* setupTenant("acme", "web", receiver.urlFor("/hooks/acme"))
      const http = yield* httpSender
      const send = yield* Effect.flatMap(OutboxSender, (s) => s.forBatch(new Set([acme, TenantId.make("keyless")]))).pipe(Effect.provide(http))
      expect(send.start).toBeDefined()
      const startOnce = (delivery: ReturnType<typeof deliveryTo>) => {
        const outcomes: Array<SendOutcome> = []
        let returned = false
        let answeredBeforeReturn = false
        send.start!(delivery, (outcome) => {
          outcomes.push(outcome)
          answeredBeforeReturn = !returned
        })
        returned = true
        return { outcomes, answeredBeforeReturn: () => answeredBeforeReturn }
      }

      const missing = startOnce(deliveryTo(null))
      expect(missing.outcomes).toEqual([new NotSent({ code: "target-missing" })])
      expect(missing.answeredBeforeReturn()).toBe(true)
      const keyless = startOnce(deliveryTo(receiver.urlFor("/hooks/keyless"), TenantId.make("keyless")))
      expect(keyless.outcomes).toEqual([new NotSent({ code: "webhook-key-unavailable" })])
      expect(keyless.answeredBeforeReturn()).toBe(true)
      expect(yield* receiver.requests).toEqual([])

      const delivery = deliveryTo(receiver.urlFor("/hooks/acme"))
      const started = startOnce(delivery)
      yield* receiver.awaitRequests(1)
      yield* Effect.sleep("50 millis")
      expect(started.outcomes).toMatchObject([{ _tag: "Delivered", status: 200 }])
      expect(yield* send(delivery)).toMatchObject({ _tag: "Delivered", status: 200 })
      const [fromStart, fromSend] = yield* receiver.requests
      for (const request of [fromStart!, fromSend!]) {
        expect(request).toMatchObject({ method: "POST", path: "/hooks/acme", bodyText: body, idempotencyKey: delivery.id })
        expect(request.headers["webhook-id"]).toBe(delivery.id)
        expect(request.headers["content-type"]).toBe("application/json")
        expect(WebhookSignature.verifyWebhook({
          id: delivery.id,
          timestamp: request.headers["webhook-timestamp"]!,
          body,
          signatureHeader: request.headers["webhook-signature"]!,
          publicKeys: [publicKeyOf(1)],
          nowSeconds: Math.floor(Date.now() / 1000),
          toleranceSeconds: 60
        })).toBe(true)
      }
      expect(Object.keys(fromStart!.headers).sort()).toEqual(Object.keys(fromSend!.headers).sort())
    }))

  it.effect("the HTTP sender makes no request for a tenant without an active signing key: NotSent webhook-key-unavailable", () =>
    Effect.gen(function*() {
      const receiver = yield* LoopbackProvider
      yield* receiver.reset
      const http = yield* httpSender
      const outcome = yield* sendOnce(http, deliveryTo(receiver.urlFor("/hooks/keyless"), TenantId.make("keyless")))
      expect(outcome).toEqual(new NotSent({ code: "webhook-key-unavailable" }))
      expect(yield* receiver.requests).toEqual([])
    }))
})
