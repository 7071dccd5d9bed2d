import { describe, expect, it } from "@effect/vitest"
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base"
import { Context, Effect, Fiber, FiberRef, Layer, Option } from "effect"
import type { ObservabilitySettings } from "../src/ObservabilityConfig.ts"
import { allowlisted, exportable, telemetryLayer } from "../src/Telemetry.ts"

// What leaves the process with a span is an allowlist: the platform's client spans carry URLs and response headers,
// SQL spans statement text, and a failure's message may quote what a client sent.

const span = (overrides: Partial<ReadableSpan> = {}): ReadableSpan => ({
  name: "OutboxDelivery.deliver",
  kind: 0,
  spanContext: () => ({ traceId: "0".repeat(31) + "1", spanId: "0".repeat(15) + "2", traceFlags: 1 }),
  startTime: [1, 0],
  endTime: [2, 0],
  status: { code: 2, message: "Expected a string, actual \"hunter2\"" },
  attributes: {
    "correlation.id": "0f".repeat(16),
    "delivery.family": "outbox",
    "url.full": "https://receiver.example/hooks/acme?token=s3cret",
    "http.request.header.x-hub-signature-256": "sha256=abc",
    "db.query.text": "SELECT * FROM outbox_messages WHERE tenant = $1",
    "code.stacktrace": "at deliver (OutboxWorker.ts:88)"
  },
  links: [{ context: { traceId: "0".repeat(31) + "3", spanId: "0".repeat(15) + "4", traceFlags: 1 }, attributes: { "url.full": "x" } }],
  events: [
    { name: "outbox delivery tick failed; waiting for the next one", time: [1, 5], attributes: { tenant: "acme" } },
    { name: "Expected a string, actual \"hunter2\"", time: [1, 6], attributes: { "exception.type": "ParseError", "exception.message": "actual \"hunter2\"", "exception.stacktrace": "..." } }
  ],
  duration: [1, 0],
  ended: true,
  resource: {} as ReadableSpan["resource"],
  instrumentationScope: { name: "delivery-backend" },
  droppedAttributesCount: 0,
  droppedEventsCount: 0,
  droppedLinksCount: 0,
  ...overrides
})

describe("span export", () => {
  it("only allowlisted attributes leave; the status keeps its code without the message; log lines are dropped; an error is an `exception` event with its type only", () => {
    const out = exportable(span())
    expect(out.attributes).toEqual({ "correlation.id": "0f".repeat(16), "delivery.family": "outbox" })
    expect(out.status).toEqual({ code: 2 })
    expect(out.events).toEqual([{ name: "exception", time: [1, 6], attributes: { "exception.type": "ParseError" } }])
    expect(out.links).toEqual([{ context: span().links[0]!.context }])
    expect(out.spanContext()).toEqual(span().spanContext())
    expect(out.name).toBe("OutboxDelivery.deliver")
    expect(JSON.stringify(out)).not.toMatch(/hunter2|s3cret|sha256=abc|acme|SELECT/)
  })

  it("the wrapped exporter gets only exportable spans and passes its result back", async () => {
    const seen: Array<ReadonlyArray<ReadableSpan>> = []
    const inner: SpanExporter = {
      export: (spans, done) => {
        seen.push(spans)
        done({ code: 0 })
      },
      shutdown: () => Promise.resolve()
    }
    const result = await new Promise((resolve) => allowlisted(inner).export([span()], resolve))
    expect(result).toEqual({ code: 0 })
    expect(seen[0]![0]!.attributes).toEqual({ "correlation.id": "0f".repeat(16), "delivery.family": "outbox" })
  })
})

describe("tracing without an exporter", () => {
  const settings = (tracesUrl: Option.Option<string>): ObservabilitySettings =>
    ({ metricsToken: Option.none(), logFormat: "text", tracesUrl, serviceName: "delivery-backend" }) as unknown as ObservabilitySettings

  /** What a service built on the telemetry layer, and a fiber it forks, see: whether tracing is on, and the span they make. */
  class Probe extends Context.Tag("Probe")<Probe, { readonly enabled: boolean; readonly forked: boolean; readonly sampled: boolean }>() {}
  const probe = Layer.scoped(
    Probe,
    Effect.gen(function*() {
      const enabled = yield* FiberRef.get(FiberRef.currentTracerEnabled)
      const forked = yield* Fiber.join(yield* Effect.forkScoped(FiberRef.get(FiberRef.currentTracerEnabled)))
      const span = yield* Effect.makeSpanScoped("probe")
      return { enabled, forked, sampled: span.sampled }
    })
  )
  // Each in a runtime of its own, as a process starts: a layer's fiber refs pass to the fiber that built it.
  const seen = (tracesUrl: Option.Option<string>) =>
    Effect.promise(() =>
      Effect.runPromise(Effect.scoped(Effect.map(
        Layer.build(probe.pipe(Layer.provide(telemetryLayer(settings(tracesUrl), "all")))),
        (context) => Context.get(context, Probe)
      )))
    )

  it.effect("without OTEL_EXPORTER_OTLP_ENDPOINT tracing is off in everything built on the telemetry layer (its spans record nothing); with it, on", () =>
    Effect.gen(function*() {
      expect(yield* seen(Option.none())).toEqual({ enabled: false, forked: false, sampled: false })
      expect(yield* seen(Option.some("http://127.0.0.1:9/v1/traces"))).toEqual({ enabled: true, forked: true, sampled: true })
    }))
})
