import { expect, it } from "@effect/vitest"
import { recordingTracer } from "@delivery/testing"
import { Context, Effect, Exit, Option, Tracer } from "effect"
import { plainSpans, type PlainSpans } from "../src/index.ts"

// Core's `plainSpans`: the span `Effect.makeSpan` would make on the same fiber, made without the fiber's steps. With
// tracing turned off (the backend without a span exporter) that is Effect's span that records nothing.

const plainOn = Effect.withFiberRuntime<PlainSpans | undefined>((fiber) => Effect.succeed(plainSpans(fiber)))

/** What tells one span from another, and whether its propagation is stopped. */
const shape = (span: Tracer.Span) => ({
  _tag: span._tag,
  name: span.name,
  spanId: span.spanId,
  traceId: span.traceId,
  sampled: span.sampled,
  kind: span.kind,
  status: span.status,
  attributes: [...span.attributes],
  links: [...span.links],
  parent: Option.map(span.parent, (p) => (p as Tracer.Span).name),
  stopsPropagation: Context.get(span.context, Tracer.DisablePropagation)
})

it.effect("with tracing turned off a span is Effect's own: ended from the start, named, under the current span, recording nothing and stopping propagation", () =>
  Effect.gen(function*() {
    const { spans, tracer } = yield* recordingTracer
    const [ours, effects] = yield* Effect.all([
      Effect.flatMap(plainOn, (make) => Effect.sync(() => make!("OutboxDelivery.deliver"))),
      Effect.makeSpan("OutboxDelivery.deliver")
    ]).pipe(Effect.withSpan("batch"), Effect.withTracerEnabled(false), Effect.withTracer(tracer))
    expect(shape(ours)).toEqual(shape(effects))
    expect(shape(ours)).toMatchObject({ spanId: "noop", traceId: "noop", sampled: false, kind: "internal", stopsPropagation: true })
    expect(ours.status._tag).toBe("Ended")
    ours.attribute("provider.outcome", "provider-2xx")
    ours.end(BigInt(1), Exit.void)
    expect([...ours.attributes]).toEqual([])
    expect(spans).toEqual([])
    // Under a span that stops propagation (one made while tracing was off), the parent is the nearest that does not.
    const [nested, nestedEffects] = yield* Effect.all([
      Effect.flatMap(plainOn, (make) => Effect.sync(() => make!("OutboxDelivery.deliver"))),
      Effect.makeSpan("OutboxDelivery.deliver")
    ]).pipe(Effect.withSpan("batch"), Effect.withTracerEnabled(false), Effect.withSpan("outer"), Effect.withTracer(tracer))
    expect(shape(nested)).toEqual(shape(nestedEffects))
    expect(shape(nested).parent).toEqual(Option.some("outer"))
    // A span from outside the process that stops propagation has no parent to look to: the span has none.
    const quiet = Tracer.externalSpan({ spanId: "a1", traceId: "b2", context: Context.make(Tracer.DisablePropagation, true) })
    const [underQuiet, underQuietEffects] = yield* Effect.all([
      Effect.flatMap(plainOn, (make) => Effect.sync(() => make!("OutboxDelivery.deliver"))),
      Effect.makeSpan("OutboxDelivery.deliver")
    ]).pipe(Effect.withParentSpan(quiet), Effect.withTracerEnabled(false))
    expect(shape(underQuiet)).toEqual(shape(underQuietEffects))
    expect(underQuiet.parent).toEqual(Option.none())
  }))

it.effect("with tracing on a span is made by the fiber's tracer under the current span (or the parent given), started now, with no links, of kind internal", () =>
  Effect.gen(function*() {
    const { spans, tracer } = yield* recordingTracer
    const made = yield* Effect.flatMap(plainOn, (make) => Effect.sync(() => make!("OutboxDelivery.deliver"))).pipe(
      Effect.withSpan("batch"),
      Effect.withTracer(tracer)
    )
    expect(spans.map((span) => span.name)).toEqual(["batch", "OutboxDelivery.deliver"])
    expect(shape(made)).toMatchObject({ kind: "internal", links: [], parent: Option.some("batch"), stopsPropagation: false })
    expect(made.status._tag).toBe("Started")
  }))
