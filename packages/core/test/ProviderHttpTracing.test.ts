import { FetchHttpClient } from "@effect/platform"
import { LoopbackProvider, LoopbackReply, recordingTracer } from "@delivery/testing"
import { expect, layer } from "@effect/vitest"
import { Effect, Either, Exit, Fiber, Layer, type Tracer } from "effect"
import { ProviderHttp } from "../src/index.ts"

// Spans are what operators read: the send has a stable name and carries its outcome code, and the
// values of the caller's headers (signatures, tokens) never reach a span.

const TestLayer = Layer.mergeAll(LoopbackProvider.Default, FetchHttpClient.layer)

layer(TestLayer, { excludeTestServices: true })("ProviderHttp.send spans", (it) => {
  const send = (status: number, headers: Record<string, string>, parentSpan?: Tracer.AnySpan) =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.status(status) })
      const { spans, tracer } = yield* recordingTracer
      const outcome = yield* ProviderHttp.send({
        endpoint: Either.getOrThrow(ProviderHttp.ProviderEndpoint.parse(provider.urlFor("/send"))),
        idempotencyKey: "traced-1",
        body: "{}",
        contentType: "application/json",
        headers,
        timeout: "2 seconds",
        ...(parentSpan === undefined ? {} : { parentSpan })
      }).pipe(Effect.withTracer(tracer))
      const [request] = yield* provider.requests
      return { outcome, spans, request: request! }
    })

  it.effect("the send is one 'ProviderHttp.send' span annotated with its outcome code", () =>
    Effect.gen(function*() {
      for (const [status, code] of [[202, "provider-2xx"], [503, "provider-5xx"]] as const) {
        const { spans } = yield* send(status, {})
        const sends = spans.filter((span) => span.name === "ProviderHttp.send")
        expect(sends.length).toBe(1)
        expect(sends[0]!.attributes.get("provider.outcome")).toBe(code)
        expect(sends[0]!.status._tag).toBe("Ended")
      }
    }))

  it.effect("caller headers may carry signatures: they reach the provider, and no span records a header, its value or the URL", () =>
    Effect.gen(function*() {
      const secrets = { "X-Signature": "sig-SECRET-1", "x-webhook-token": "tok-SECRET-2", Authorization: "Bearer SECRET-3" }
      const { request, spans } = yield* send(200, secrets)
      // The provider gets the values...
      expect(request.headers["x-signature"]).toBe("sig-SECRET-1")
      expect(request.headers["x-webhook-token"]).toBe("tok-SECRET-2")
      expect(request.headers["authorization"]).toBe("Bearer SECRET-3")
      // ...and the trace gets one span with the outcome: no header, no value, no address.
      expect(spans.map((span) => span.name)).toEqual(["ProviderHttp.send"])
      const attributes = spans.flatMap((span) => [...span.attributes.entries()])
      expect(attributes).toEqual([["provider.outcome", "provider-2xx"]])
      expect(attributes.filter(([, value]) => String(value).includes("SECRET") || String(value).includes("127.0.0.1"))).toEqual([])
    }))

  it.effect("the send's span nests in the current span, or in the parent span the request names (which is never made current)", () =>
    Effect.gen(function*() {
      const parentOf = (spans: ReadonlyArray<Tracer.Span>) => {
        const sent = spans.find((span) => span.name === "ProviderHttp.send")!
        return sent.parent._tag === "Some" ? (sent.parent.value as Tracer.Span).name : undefined
      }
      const current = yield* send(200, {}).pipe(Effect.withSpan("caller"))
      expect(parentOf(current.spans)).toBe("caller")
      const named = yield* Effect.useSpan("named", (parent) => send(200, {}, parent)).pipe(Effect.withSpan("caller"))
      expect(parentOf(named.spans)).toBe("named")
      const root = yield* send(200, {})
      expect(parentOf(root.spans)).toBeUndefined()
    }))

  it.effect("the span ends exactly once: with the interruption when the send is interrupted, with the defect when the request is malformed", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      const { spans, tracer } = yield* recordingTracer
      const request: ProviderHttp.ProviderRequest = {
        endpoint: Either.getOrThrow(ProviderHttp.ProviderEndpoint.parse(provider.urlFor("/send"))),
        idempotencyKey: "traced-2",
        body: "{}",
        contentType: "application/json",
        timeout: "30 seconds"
      }
      const fiber = yield* Effect.fork(ProviderHttp.send(request).pipe(Effect.withTracer(tracer)))
      yield* provider.awaitRequests(1)
      yield* Fiber.interrupt(fiber)
      yield* provider.awaitAborts(1).pipe(Effect.timeout("5 seconds"))
      const ended = (span: Tracer.Span) => (span.status._tag === "Ended" ? span.status.exit : undefined)
      expect(spans.map((span) => span.name)).toEqual(["ProviderHttp.send"])
      const interrupted = ended(spans[0]!)
      expect(interrupted !== undefined && Exit.isInterrupted(interrupted)).toBe(true)
      // The aborted request's own settling after the interruption does not end it again.
      expect(spans[0]!.attributes.get("provider.outcome")).toBeUndefined()

      const malformed = yield* Effect.exit(ProviderHttp.send({ ...request, idempotencyKey: "" }).pipe(Effect.withTracer(tracer)))
      expect(Exit.isFailure(malformed) && !Exit.isInterrupted(malformed)).toBe(true)
      const failed = ended(spans[1]!)
      expect(failed !== undefined && Exit.isFailure(failed) && !Exit.isInterrupted(failed)).toBe(true)
    }))
})
