import { Effect, Tracer } from "effect"

/**
 * The current tracer, wrapped so that every span it makes is also kept in `spans` (in the order made): for tests
 * that check which spans an effect made, how they nest and how they ended. Use with `Effect.withTracer(tracer)`.
 */
export const recordingTracer = Effect.map(Effect.tracer, (native) => {
  const spans: Array<Tracer.Span> = []
  const tracer = Tracer.make({
    span: (...args) => {
      const span = native.span(...args)
      spans.push(span)
      return span
    },
    context: (f, fiber) => native.context(f, fiber)
  })
  return { tracer, spans }
})
