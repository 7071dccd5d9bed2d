import { FetchHttpClient } from "@effect/platform"
import { LoopbackProvider, LoopbackReply, recordingTracer } from "@delivery/testing"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Either, Exit, FiberId, Layer, Tracer } from "effect"
import { ProviderHttp } from "../src/index.ts"

// `ProviderHttp.starter`: the adapter's call without a fiber of its own, for a caller that runs many calls from one
// fiber. It must be `send` in everything but the fiber: the request, the span, the outcome handed over once, the
// abort, the defect for a malformed request; and it is offered only where its span is the one `send` would make.

const TestLayer = Layer.mergeAll(LoopbackProvider.Default, FetchHttpClient.layer)

const ended = (span: Tracer.Span) => (span.status._tag === "Ended" ? span.status.exit : undefined)

layer(TestLayer, { excludeTestServices: true })("ProviderHttp.starter: send's call without a fiber", (it) => {
  const requestTo = (url: string, key: string): ProviderHttp.ProviderRequest => ({
    endpoint: Either.getOrThrow(ProviderHttp.ProviderEndpoint.parse(url)),
    idempotencyKey: key,
    body: "{\"a\":1}",
    contentType: "application/json",
    headers: { "Webhook-Id": key },
    timeout: "5 seconds"
  })

  /** Starts one call and waits for its outcome, counting how often `done` was called. */
  const startAndWait = (start: ProviderHttp.Starter, request: ProviderHttp.ProviderRequest) =>
    Effect.async<{ readonly outcome: ProviderHttp.ProviderOutcome; readonly calls: () => number }>((resume) => {
      let calls = 0
      start(request, (outcome) => {
        calls++
        resume(Effect.succeed({ outcome, calls: () => calls }))
      })
    })

  it.effect("the call is send's: the same request reaches the provider, the outcome is handed over once, one 'ProviderHttp.send' span with the outcome nests in the request's parent span or the current one", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.status(503) })
      const { spans, tracer } = yield* recordingTracer
      const start = yield* ProviderHttp.starter.pipe(Effect.withSpan("caller"), Effect.withTracer(tracer))
      expect(start).toBeDefined()
      const { calls, outcome } = yield* startAndWait(start!, requestTo(provider.urlFor("/start"), "start-1"))
      expect(outcome).toMatchObject({ _tag: "Temporary", code: "provider-5xx", status: 503 })
      const { outcome: second } = yield* startAndWait(start!, requestTo(provider.urlFor("/start"), "start-2"))
      expect(second).toMatchObject({ _tag: "Delivered", status: 200 })
      yield* Effect.sleep("50 millis")
      expect(calls()).toBe(1)

      const requests = yield* provider.requests
      expect(requests.map((r) => [r.method, r.path, r.idempotencyKey, r.bodyText, r.headers["webhook-id"], r.headers["content-type"]]))
        .toEqual([
          ["POST", "/start", "start-1", "{\"a\":1}", "start-1", "application/json"],
          ["POST", "/start", "start-2", "{\"a\":1}", "start-2", "application/json"]
        ])
      const sends = spans.filter((span) => span.name === "ProviderHttp.send")
      expect(sends.map((span) => [span.attributes.get("provider.outcome"), span.status._tag])).toEqual([
        ["provider-5xx", "Ended"],
        ["provider-2xx", "Ended"]
      ])
      const parentName = (span: Tracer.Span) => span.parent._tag === "Some" ? (span.parent.value as Tracer.Span).name : undefined
      expect(sends.map(parentName)).toEqual(["caller", "caller"])

      const named = yield* Effect.useSpan("named", (parent) =>
        Effect.flatMap(ProviderHttp.starter, (startNamed) =>
          startAndWait(startNamed!, { ...requestTo(provider.urlFor("/start"), "start-3"), parentSpan: parent }))
      ).pipe(Effect.withTracer(tracer))
      expect(named.outcome._tag).toBe("Delivered")
      expect(parentName(spans.filter((span) => span.name === "ProviderHttp.send")[2]!)).toBe("named")
    }))

  it.effect("an aborted call hands over nothing: its request is aborted and its span ends once, with the interruption", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      const { spans, tracer } = yield* recordingTracer
      const start = yield* ProviderHttp.starter.pipe(Effect.withTracer(tracer))
      let calls = 0
      const abort = start!(requestTo(provider.urlFor("/hang"), "abort-1"), () => calls++)
      yield* provider.awaitRequests(1)
      abort(FiberId.none)
      abort(FiberId.none)
      yield* provider.awaitAborts(1).pipe(Effect.timeout("5 seconds"))
      yield* Effect.sleep("50 millis")
      expect(calls).toBe(0)
      const exit = ended(spans[0]!)
      expect(exit !== undefined && Exit.isInterrupted(exit)).toBe(true)
      expect(spans[0]!.attributes.get("provider.outcome")).toBeUndefined()
    }))

  it.effect("an abort after the outcome was handed over changes nothing: the span keeps its outcome, nothing is handed over again", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const { spans, tracer } = yield* recordingTracer
      const start = yield* ProviderHttp.starter.pipe(Effect.withTracer(tracer))
      let calls = 0
      let abort: ProviderHttp.Abort = () => {}
      yield* Effect.async<void>((resume) => {
        abort = start!(requestTo(provider.urlFor("/done"), "done-1"), () => {
          calls++
          resume(Effect.void)
        })
      })
      abort(FiberId.none)
      yield* Effect.sleep("50 millis")
      expect(calls).toBe(1)
      const exit = ended(spans[0]!)
      expect(exit !== undefined && Exit.isSuccess(exit)).toBe(true)
      expect(spans[0]!.attributes.get("provider.outcome")).toBe("provider-2xx")
    }))

  it.effect("a malformed key or header is thrown as a defect before any request is made", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const start = yield* ProviderHttp.starter
      const request = requestTo(provider.urlFor("/bad"), "bad-1")
      expect(() => start!({ ...request, idempotencyKey: "" }, () => {})).toThrow("invalid Idempotency-Key")
      expect(() => start!({ ...request, headers: { "bad header": "x" } }, () => {})).toThrow("invalid header")
      expect(() => start!({ ...request, headers: { "x-ok": "line\nbreak" } }, () => {})).toThrow("invalid header")
      expect(yield* provider.requests).toEqual([])
    }))

  it.effect("with tracing turned off the call is offered and records nothing: no span reaches the tracer, the outcome is handed over once, and an abort still aborts the request and hands over nothing", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const { spans, tracer } = yield* recordingTracer
      const start = yield* ProviderHttp.starter.pipe(Effect.withSpan("caller"), Effect.withTracerEnabled(false), Effect.withTracer(tracer))
      expect(start).toBeDefined()
      const { calls, outcome } = yield* startAndWait(start!, requestTo(provider.urlFor("/quiet"), "quiet-1"))
      expect(outcome).toMatchObject({ _tag: "Delivered", status: 200 })
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      let abortedCalls = 0
      const abort = start!(requestTo(provider.urlFor("/hang"), "quiet-2"), () => abortedCalls++)
      yield* provider.awaitRequests(2)
      abort(FiberId.none)
      const [aborted] = yield* provider.awaitAborts(1).pipe(Effect.timeout("5 seconds"))
      expect(aborted!.idempotencyKey).toBe("quiet-2")
      yield* Effect.sleep("50 millis")
      expect([calls(), abortedCalls]).toEqual([1, 0])
      expect(spans).toEqual([])
    }))

  it.effect("no starter where Effect's own span rules add something: tracing's timing turned off, span annotations or links on the fiber, a current span that stops propagation", () =>
    Effect.gen(function*() {
      const { tracer } = yield* recordingTracer
      expect(yield* ProviderHttp.starter.pipe(Effect.withTracer(tracer))).toBeDefined()
      expect(yield* ProviderHttp.starter.pipe(Effect.withTracerTiming(false))).toBeUndefined()
      expect(yield* ProviderHttp.starter.pipe(Effect.annotateSpans("tenant", "acme"))).toBeUndefined()
      const linked = yield* Effect.useSpan("other", (other) => ProviderHttp.starter.pipe(Effect.linkSpans(other)))
      expect(linked).toBeUndefined()
      const quiet = yield* ProviderHttp.starter.pipe(
        Effect.withSpan("quiet", { context: Context.make(Tracer.DisablePropagation, true) }),
        Effect.withTracer(tracer)
      )
      expect(quiet).toBeUndefined()
    }))
})
