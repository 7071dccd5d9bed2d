import { Chunk, Clock, Context, type Fiber, FiberRef, HashMap, Option, Tracer } from "effect"

/** Makes a span named `name` under `parent` (by default the fiber's current span), started now; the caller ends it. */
export type PlainSpans = (name: string, parent?: Option.Option<Tracer.AnySpan>) => Tracer.Span

/**
 * Spans made on `fiber` straight from its tracer and clock, for a hot path that runs without a fiber of its own:
 * the span `Effect.makeSpan` would make there (the fiber's current span as parent, no links, no stack trace), without
 * its fiber-ref copy and its steps. `undefined` where Effect's own rules add something: tracing or its timing turned
 * off, span annotations or links on the fiber, a current span that stops propagation.
 */
export const plainSpans = (fiber: Fiber.RuntimeFiber<unknown, unknown>): PlainSpans | undefined => {
  const current = Context.getOption(fiber.currentContext, Tracer.ParentSpan)
  const plain = fiber.getFiberRef(FiberRef.currentTracerEnabled) &&
    fiber.getFiberRef(FiberRef.currentTracerTimingEnabled) &&
    HashMap.isEmpty(fiber.getFiberRef(FiberRef.currentTracerSpanAnnotations)) &&
    Chunk.isEmpty(fiber.getFiberRef(FiberRef.currentTracerSpanLinks)) &&
    // A current span that stops propagation is looked past by Effect's own rule.
    !(Option.isSome(current) && Context.get(current.value.context, Tracer.DisablePropagation))
  if (!plain) return undefined
  const tracer = Context.get(fiber.currentDefaultServices, Tracer.Tracer)
  const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
  return (name, parent = current) => tracer.span(name, parent, Context.empty(), [], clock.unsafeCurrentTimeNanos(), "internal")
}
