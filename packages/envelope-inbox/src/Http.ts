import { HttpApi, HttpApiBuilder, HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { CurrentIdentity, deliveryApiId, retryAfterSeconds } from "@delivery/identity"
import { Effect, Layer, Stream } from "effect"
import { EnvelopeInboxApi, EnvelopeIntake, IntakeRequest } from "./Api.ts"
import { type CorrelationId, EnvelopeTooLarge, EnvelopeUnreadable } from "./Domain.ts"
import { EnvelopeInbox } from "./EnvelopeInbox.ts"
import { MaxEnvelopeBytesConfig } from "./InboxConfig.ts"

// HttpApi encodes declared errors with their status only; headers that belong to an outcome are added
// to the final response of this request.
const withHeader = (name: string, value: string) =>
  HttpApp.appendPreResponseHandler((_request, response) => Effect.succeed(HttpServerResponse.setHeader(response, name, value)))

const DIGITS = /^\d{1,16}$/

// The request path below is written with combinators rather than generators: JavaScriptCore compiled the ingest
// handler's generator 34 times and the body read's 17 in one run of the inbox bench (their code changes shape with
// each kind of effect they yield), about 590 ms of its compiler thread.

/**
 * Reads at most `max` bytes. A declared Content-Length over the limit is refused before a byte is read;
 * an undeclared (chunked) body is refused as soon as it passes the limit, and the rest is never read.
 */
const readBounded = (
  request: HttpServerRequest.HttpServerRequest,
  max: number,
  correlationId: CorrelationId
): Effect.Effect<Uint8Array, EnvelopeTooLarge | EnvelopeUnreadable> => {
  // Built only when needed: constructing an error captures a stack trace, which costs on every request.
  const tooLarge = () => new EnvelopeTooLarge({ reason: "body-too-large", correlationId, limit: max })
  const unreadable = () => new EnvelopeUnreadable({ reason: "body-unreadable", correlationId })
  const declared = request.headers["content-length"]
  if (declared !== undefined) {
    if (!DIGITS.test(declared)) return Effect.fail(unreadable())
    if (Number(declared) > max) return Effect.fail(tooLarge())
  }
  // A request without a body has no stream at all; it is an empty (so malformed) envelope.
  const source = request.source as { readonly body?: unknown }
  if ("body" in source && source.body === null) return Effect.succeed(new Uint8Array(0))
  // A declared length within the limit bounds the read already: the server delivers exactly that many
  // bytes or fails the request. Only an undeclared (chunked) body needs counting as it streams in.
  if (declared !== undefined) {
    return Effect.flatMap(Effect.mapError(request.arrayBuffer, unreadable), (buffer) =>
      buffer.byteLength > max ? Effect.fail(tooLarge()) : Effect.succeed(new Uint8Array(buffer)))
  }
  return readChunked(request, max, tooLarge, unreadable)
}

const readChunked = (
  request: HttpServerRequest.HttpServerRequest,
  max: number,
  tooLarge: () => EnvelopeTooLarge,
  unreadable: () => EnvelopeUnreadable
) =>
  Effect.gen(function* () {
    const chunks: Array<Uint8Array> = []
    let total = 0
    yield* Stream.runForEachWhile(request.stream, (chunk) =>
      Effect.sync(() => {
        total += chunk.length
        if (total > max) return false
        chunks.push(chunk)
        return true
      })).pipe(Effect.mapError(unreadable))
    if (total > max) return yield* tooLarge()
    const body = new Uint8Array(total)
    let offset = 0
    for (const chunk of chunks) {
      body.set(chunk, offset)
      offset += chunk.length
    }
    return body
  })

/** The intake middleware (see `EnvelopeIntake`): the request's correlation id, body limit, bounded read. */
export const EnvelopeIntakeLive = Layer.effect(
  EnvelopeIntake,
  Effect.map(MaxEnvelopeBytesConfig, (max) =>
    // The correlation id was assigned at the HTTP edge, which also puts it on the response.
    Effect.flatMap(Effect.zip(HttpServerRequest.HttpServerRequest, requestCorrelationId), ([request, correlationId]) =>
      Effect.map(readBounded(request, max, correlationId), (body) => ({ correlationId, body }))))
)

// Handlers are registered by API id and group name, so a one-group API with the backend's id suffices.
const InboxOnlyApi = HttpApi.make(deliveryApiId).add(EnvelopeInboxApi)

/**
 * Handlers, one call deep. Needs `EnvelopeInbox` and the Authentication middleware implementation
 * (identity's `AuthenticationLive`, provided where the backend composes its API).
 */
export const EnvelopeInboxHttpLive = HttpApiBuilder.group(InboxOnlyApi, "controlplane", (handlers) =>
  Effect.gen(function* () {
    const inbox = yield* EnvelopeInbox
    return handlers.handleRaw("ingest", () =>
      Effect.flatMap(Effect.zip(CurrentIdentity, IntakeRequest), ([identity, { body, correlationId }]) =>
        inbox.receive({ identity, body, correlationId }).pipe(
          Effect.tapErrorTag("SyncRateLimited", ({ retryAfter }) => withHeader("retry-after", String(retryAfterSeconds(retryAfter)))),
          // Nothing was committed: the same request may simply be sent again.
          Effect.tapErrorTag("InboxStorageUnavailable", () => withHeader("retry-after", "1"))
        )))
  })).pipe(Layer.provide(EnvelopeIntakeLive))
