import { Chunk, Clock, Context, Exit, type Fiber, FiberRef, HashMap, Option, Tracer } from "effect"

/** Makes a span named `name` under `parent` (by default the fiber's current span), started now; the caller ends it. */
export type PlainSpans = (name: string, parent?: Option.Option<Tracer.AnySpan>) => Tracer.Span

/**
 * Spans made on `fiber` straight from its tracer and clock, for a hot path that runs without a fiber of its own:
 * the span `Effect.makeSpan` would make there (the fiber's current span as parent, no links, no stack trace), without
 * its fiber-ref copy and its steps. With tracing turned off (the backend without a span exporter), Effect's rule is a
 * span that records nothing, ended from the start: so are these. `undefined` where Effect's own rules add
 * something: tracing's timing turned off, span annotations or links on the fiber, a current span that stops
 * propagation.
 */
export const plainSpans = (fiber: Fiber.RuntimeFiber<unknown, unknown>): PlainSpans | undefined => {
  const current = Context.getOption(fiber.currentContext, Tracer.ParentSpan)
  if (!fiber.getFiberRef(FiberRef.currentTracerEnabled)) {
    const propagated = propagating(current)
    return (name, parent = propagated) => noopSpan(name, parent)
  }
  const plain = fiber.getFiberRef(FiberRef.currentTracerTimingEnabled) &&
    HashMap.isEmpty(fiber.getFiberRef(FiberRef.currentTracerSpanAnnotations)) &&
    Chunk.isEmpty(fiber.getFiberRef(FiberRef.currentTracerSpanLinks)) &&
    // A current span that stops propagation is looked past by Effect's own rule.
    !(Option.isSome(current) && Context.get(current.value.context, Tracer.DisablePropagation))
  if (!plain) return undefined
  const tracer = Context.get(fiber.currentDefaultServices, Tracer.Tracer)
  const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
  return (name, parent = current) => tracer.span(name, parent, Context.empty(), [], clock.unsafeCurrentTimeNanos(), "internal")
}

const disabledContext = Context.make(Tracer.DisablePropagation, true)

/** Effect's rule for a new span's parent: spans that stop propagation are looked past, up to one that does not. */
const propagating = (span: Option.Option<Tracer.AnySpan>): Option.Option<Tracer.AnySpan> =>
  Option.flatMap(span, (found) =>
    Context.get(found.context, Tracer.DisablePropagation)
      ? found._tag === "Span" ? propagating(found.parent) : Option.none()
      : Option.some(found))

/** The span Effect makes while tracing is off: ended from the start, recording nothing, its children alike. */
const noopSpan = (name: string, parent: Option.Option<Tracer.AnySpan>): Tracer.Span => ({
  _tag: "Span",
  name,
  parent,
  context: disabledContext,
  spanId: "noop",
  traceId: "noop",
  sampled: false,
  status: noopStatus,
  attributes: noAttributes,
  links: noLinks,
  kind: "internal",
  attribute: nothing,
  event: nothing,
  end: nothing,
  addLinks: nothing
})
// Shared, so a span costs one object on the delivery path rather than one function per method.
const nothing = (): void => {}
const noopStatus: Tracer.SpanStatus = { _tag: "Ended", startTime: BigInt(0), endTime: BigInt(0), exit: Exit.void }
const noAttributes: ReadonlyMap<string, unknown> = new Map()
const noLinks: ReadonlyArray<Tracer.SpanLink> = []
