import { HttpServerRespondable, HttpServerResponse } from "@effect/platform"
import type { CorrelationId } from "@delivery/core"
import { Cause, Effect, Option, Predicate, Schema } from "effect"
import { BodyTooLarge, BodyUnreadable, InternalError, PathInvalid, RouteNotFound, ShuttingDown, UriTooLong } from "./Refusals.ts"

const EdgeRefusal = Schema.Union(BodyTooLarge, PathInvalid, UriTooLong, RouteNotFound, BodyUnreadable, InternalError, ShuttingDown)
type EdgeRefusal = typeof EdgeRefusal.Type
const encodeRefusal = Schema.encodeSync(EdgeRefusal)

const statusOf: Record<EdgeRefusal["_tag"], number> = {
  BodyTooLarge: 413,
  PathInvalid: 400,
  UriTooLong: 414,
  RouteNotFound: 404,
  BodyUnreadable: 400,
  InternalError: 500,
  ShuttingDown: 503
}

/** Clients may come back after this many seconds; a stopping process is replaced by then or not at all. */
export const RETRY_AFTER_SECONDS = "1"

const extraHeaders = (refusal: EdgeRefusal): Record<string, string> =>
  refusal._tag === "ShuttingDown" ? { "retry-after": RETRY_AFTER_SECONDS, connection: "close" } : {}

/** A refusal as a web Response, for answers the edge gives before or instead of running the app. */
export const refusalResponse = (refusal: EdgeRefusal): Response =>
  new Response(JSON.stringify(encodeRefusal(refusal)), {
    status: statusOf[refusal._tag],
    headers: { "content-type": "application/json", ...extraHeaders(refusal) }
  })

const refusalServerResponse = (refusal: EdgeRefusal) =>
  HttpServerResponse.unsafeJson(encodeRefusal(refusal), { status: statusOf[refusal._tag], headers: extraHeaders(refusal) })

export const shuttingDown = (correlationId: CorrelationId) => new ShuttingDown({ reason: "shutting-down", correlationId })
export const bodyTooLarge = (correlationId: CorrelationId, limit: number) =>
  new BodyTooLarge({ reason: "body-too-large", correlationId, limit })

/** What a failure was, for the log line of a 5xx: a tag or a class name, never a message (it may quote data). */
export const kindOf = (value: unknown): string => {
  if (Predicate.hasProperty(value, "_tag") && typeof value._tag === "string") return value._tag
  if (typeof value === "object" && value !== null) return value.constructor?.name ?? "object"
  return typeof value
}

const isTagged = (value: unknown, tag: string) => Predicate.isTagged(value, tag)

export interface EdgeFailure {
  readonly response: HttpServerResponse.HttpServerResponse
  /** Set for 5xx answers. */
  readonly kind: string | undefined
}

/**
 * The answer to a failure that the API did not turn into a response itself: what the router or the platform
 * raised (no route, a body that broke off), a response or respondable error carried as a defect, an
 * interruption, or a defect (500, with its kind for the log line).
 */
export const edgeFailure = (cause: Cause.Cause<unknown>, correlationId: CorrelationId): Effect.Effect<EdgeFailure> => {
  const failure = Option.orElse(Cause.failureOption(cause), () => Cause.dieOption(cause))
  if (Option.isNone(failure)) {
    return Effect.succeed({ response: refusalServerResponse(shuttingDown(correlationId)), kind: "interrupted" })
  }
  const error = failure.value
  if (HttpServerResponse.isServerResponse(error)) return Effect.succeed({ response: error, kind: undefined })
  if (isTagged(error, "RouteNotFound")) {
    return Effect.succeed({ response: refusalServerResponse(new RouteNotFound({ reason: "route-not-found", correlationId })), kind: undefined })
  }
  if (isTagged(error, "RequestError")) {
    return Effect.succeed({ response: refusalServerResponse(new BodyUnreadable({ reason: "body-unreadable", correlationId })), kind: undefined })
  }
  const internal = { response: refusalServerResponse(new InternalError({ reason: "internal-error", correlationId })), kind: kindOf(error) }
  if (!HttpServerRespondable.isRespondable(error)) return Effect.succeed(internal)
  return HttpServerRespondable.toResponseOrElse(error, internal.response).pipe(
    Effect.map((response) => ({ response, kind: response.status >= 500 ? kindOf(error) : undefined }))
  )
}

export const bodyTooLargeResponse = (correlationId: CorrelationId, limit: number) => refusalServerResponse(bodyTooLarge(correlationId, limit))

const utf8 = new TextDecoder()

/** The `_tag` of a JSON error body the API encoded (a declared 5xx such as 503 storage-unavailable). */
export const tagOfBody = (response: HttpServerResponse.HttpServerResponse): string => {
  if (response.body._tag !== "Uint8Array") return "response"
  try {
    const tag = (JSON.parse(utf8.decode(response.body.body)) as { readonly _tag?: unknown })._tag
    return typeof tag === "string" ? tag : "response"
  } catch {
    return "response"
  }
}
