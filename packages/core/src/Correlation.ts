import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect, type FiberId, FiberRef, FiberRefs, HashMap, Option, Schema } from "effect"
import { globalValue } from "effect/GlobalValue"
import { randomUUID } from "node:crypto"

/**
 * One id per HTTP request, chosen by the server (a client's own `x-correlation-id` is never taken): it ties
 * the response to the request's audit rows and log lines. 32 lower-case hex digits, so it is safe to log,
 * to store and to put in a header.
 */
// Stryker disable next-line StringLiteral: a brand is a compile-time tag; decoding never reads its name
export const CorrelationId = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{32}$/), Schema.brand("CorrelationId"))
export type CorrelationId = typeof CorrelationId.Type

export const CORRELATION_HEADER = "x-correlation-id"

/** The span attribute that carries the correlation id on every span made while a request is handled. */
export const CORRELATION_SPAN_ATTRIBUTE = "correlation.id"

/** A random UUID's 32 hex digits: unique without coordination, cheap enough for every request. */
export const makeCorrelationId = (): CorrelationId => randomUUID().replaceAll("-", "") as CorrelationId

const currentCorrelationId = globalValue(
  // Stryker disable next-line StringLiteral: the key only has to be the same for every copy of this module; one copy is loaded
  Symbol.for("@delivery/core/Correlation/current"),
  () => FiberRef.unsafeMake<Option.Option<CorrelationId>>(Option.none())
)

/**
 * The fiber refs of a fiber forked to handle one request under `id` (`updateRefs` of `Runtime.runFork`):
 * handlers read the id with `requestCorrelationId`, every log line of the request carries it, and so does
 * every span started while it is handled (an exported trace can be found from a response's header). Set when
 * the fiber is made rather than with `Effect.locally`, which would cost a bracket per request.
 */
export const correlationRefs = (id: CorrelationId) => (refs: FiberRefs.FiberRefs, fiberId: FiberId.Runtime): FiberRefs.FiberRefs => {
  const withId = FiberRefs.updateAs(refs, { fiberId, fiberRef: currentCorrelationId, value: Option.some(id) })
  const withLogs = FiberRefs.updateAs(withId, {
    fiberId,
    fiberRef: FiberRef.currentLogAnnotations,
    value: HashMap.set(FiberRefs.getOrDefault(refs, FiberRef.currentLogAnnotations), "correlationId", id as unknown)
  })
  return FiberRefs.updateAs(withLogs, {
    fiberId,
    fiberRef: FiberRef.currentTracerSpanAnnotations,
    value: HashMap.set(FiberRefs.getOrDefault(refs, FiberRef.currentTracerSpanAnnotations), CORRELATION_SPAN_ATTRIBUTE, id as unknown)
  })
}

// Without the edge (a group served on its own, as in a package's tests) the first reader assigns the id,
// for the rest of the request, with the same header and log annotation the edge would give it.
const assignHere = Effect.suspend(() => {
  const id = makeCorrelationId()
  return FiberRef.set(currentCorrelationId, Option.some(id)).pipe(
    Effect.zipRight(FiberRef.update(FiberRef.currentLogAnnotations, HashMap.set("correlationId", id as unknown))),
    Effect.zipRight(FiberRef.update(FiberRef.currentTracerSpanAnnotations, HashMap.set(CORRELATION_SPAN_ATTRIBUTE, id as unknown))),
    Effect.zipRight(HttpApp.appendPreResponseHandler((_request, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, CORRELATION_HEADER, id))
    )),
    Effect.as(id)
  )
})

/**
 * The correlation id of the request being handled. The backend's HTTP edge assigns it before anything else
 * runs and puts it on every response as `x-correlation-id`.
 */
export const requestCorrelationId: Effect.Effect<CorrelationId> = Effect.flatMap(
  FiberRef.get(currentCorrelationId),
  Option.match({ onNone: () => assignHere, onSome: Effect.succeed })
)
