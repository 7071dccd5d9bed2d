import { describe, expect, it } from "@effect/vitest"
import type { ReadableSpan, SpanExporter } from "@opentelemetry/sdk-trace-base"
import { allowlisted, exportable } from "../src/Telemetry.ts"

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
