import * as OtelMetrics from "@effect/opentelemetry/Metrics"
import * as OtelResource from "@effect/opentelemetry/Resource"
import * as OtelTracer from "@effect/opentelemetry/Tracer"
import { CORRELATION_SPAN_ATTRIBUTE } from "@delivery/core"
import { PrometheusExporter, PrometheusSerializer } from "@opentelemetry/exporter-prometheus"
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http"
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base"
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Context, Effect, Layer, Option } from "effect"
import type { ObservabilitySettings } from "./ObservabilityConfig.ts"

/** The Prometheus text of every Effect metric of the process, read when asked (GET /metrics). */
export class MetricsScrape extends Context.Tag("@delivery/backend/MetricsScrape")<MetricsScrape, {
  readonly serialize: Effect.Effect<string>
}>() {}

/**
 * Effect's metric registry bridged to OpenTelemetry: a Prometheus exporter serves as the metric reader, without its
 * own HTTP server; the backend's route serializes on request, so the scrape goes through the HTTP edge like every
 * other request (correlation id, drain, bounds).
 */
const MetricsScrapeLive = Layer.scoped(
  MetricsScrape,
  Effect.gen(function* () {
    const producer = yield* OtelMetrics.makeProducer
    const reader = new PrometheusExporter({ preventServerStart: true, withoutScopeInfo: true })
    yield* OtelMetrics.registerProducer(producer, () => reader)
    // No scope labels: every metric comes from the one Effect producer, so the label would only repeat its name.
    const serializer = new PrometheusSerializer(undefined, false, undefined, false, true)
    return {
      serialize: Effect.promise(() => reader.collect()).pipe(Effect.map(({ resourceMetrics }) => serializer.serialize(resourceMetrics)))
    }
  })
)

/**
 * The span attributes that may leave the process. Everything else is dropped at export: the platform's HTTP client
 * spans carry the receiver's or provider's URL and its response headers, SQL spans the statement text, and a failed
 * span's messages may quote a value a client sent. An allowlist fails safe when a library adds an attribute.
 */
export const EXPORTED_ATTRIBUTES: ReadonlySet<string> = new Set([
  CORRELATION_SPAN_ATTRIBUTE,
  "http.request.method",
  "http.response.status_code",
  "http.route",
  "provider.outcome",
  "delivery.family",
  "delivery.outcome",
  "delivery.claimed",
  "batch.size",
  "db.system.name",
  "status.interrupted"
])

const pick = (attributes: ReadableSpan["attributes"]) => {
  const kept: Record<string, NonNullable<ReadableSpan["attributes"][string]>> = {}
  for (const [key, value] of Object.entries(attributes)) {
    if (EXPORTED_ATTRIBUTES.has(key) && value !== undefined) kept[key] = value
  }
  return kept
}

/**
 * A span as it may be exported: allowed attributes only, the status code without its message, log lines dropped, and
 * an error kept as an `exception` event with its type only (its message is the event's name in Effect's tracer).
 */
export const exportable = (span: ReadableSpan): ReadableSpan => ({
  name: span.name,
  kind: span.kind,
  spanContext: () => span.spanContext(),
  ...(span.parentSpanContext === undefined ? {} : { parentSpanContext: span.parentSpanContext }),
  startTime: span.startTime,
  endTime: span.endTime,
  status: { code: span.status.code },
  attributes: pick(span.attributes),
  links: span.links.map((link) => ({ context: link.context })),
  events: span.events.flatMap((event) => {
    const type = event.attributes?.["exception.type"]
    return type === undefined ? [] : [{ name: "exception", time: event.time, attributes: { "exception.type": type } }]
  }),
  duration: span.duration,
  ended: span.ended,
  resource: span.resource,
  instrumentationScope: span.instrumentationScope,
  droppedAttributesCount: 0,
  droppedEventsCount: 0,
  droppedLinksCount: 0
})

/** Wraps the OTLP exporter so that nothing but `exportable` spans reaches the collector. */
export const allowlisted = (exporter: SpanExporter): SpanExporter => ({
  export: (spans, done) => exporter.export(spans.map(exportable), done),
  shutdown: () => exporter.shutdown(),
  forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve()
})

/** Spans batched and sent as OTLP/HTTP JSON; at shutdown what is buffered is flushed, bounded by 3 s. */
const tracing = (url: string) =>
  OtelTracer.layer.pipe(
    Layer.provide(Layer.scoped(
      OtelTracer.OtelTracerProvider,
      Effect.flatMap(OtelResource.Resource, (resource) =>
        Effect.acquireRelease(
          Effect.sync(() =>
            new BasicTracerProvider({
              resource,
              spanProcessors: [new BatchSpanProcessor(allowlisted(new OTLPTraceExporter({ url })))]
            })
          ),
          (provider) =>
            Effect.promise(() => provider.forceFlush().then(() => provider.shutdown())).pipe(
              Effect.interruptible,
              Effect.timeoutOption("3 seconds")
            )
        ))
    ))
  )

/**
 * Metrics always (GET /metrics reads them); spans only with OTEL_EXPORTER_OTLP_ENDPOINT. Without it tracing is turned
 * off: no span could leave the process, and making them cost about a tenth of a webhook delivery's CPU (Effect then
 * makes spans that record nothing; docs/operations.md, "Traces").
 */
export const telemetryLayer = (settings: ObservabilitySettings, role: string): Layer.Layer<MetricsScrape> =>
  Layer.mergeAll(
    MetricsScrapeLive,
    Option.match(settings.tracesUrl, { onNone: () => Layer.setTracerEnabled(false), onSome: tracing })
  ).pipe(
    Layer.provide(OtelResource.layer({ serviceName: settings.serviceName, attributes: { "delivery.role": role } }))
  )
