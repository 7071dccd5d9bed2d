import { FetchHttpClient, Headers, HttpClient, HttpClientRequest } from "@effect/platform"
import type { HttpClientError, HttpClientResponse } from "@effect/platform"
import { Cause, type Duration, Effect, Layer, Option, Schema, Stream } from "effect"
import { dual } from "effect/Function"
import { AmbiguousCode, DeliveredCode, RejectedCode, TemporaryCode } from "./ErrorCodes.ts"
import type { ProviderEndpoint } from "./ProviderEndpoint.ts"

export * from "./ProviderEndpoint.ts"

// ---------------------------------------------------------------------------
// Outcome: the four classes every service maps to its own rule.

const status = Schema.optionalWith(Schema.Int, { exact: true })
const retryAfter = Schema.optionalWith(Schema.String, { exact: true })

/** 2xx: the provider acknowledged the request; not proof that it reached an inbox. */
export class Delivered extends Schema.TaggedClass<Delivered>()("Delivered", {
  code: DeliveredCode,
  status: Schema.Int,
  retryAfter
}) {}

/** 4xx or a redirect: permanent, retrying the same request cannot help. */
export class Rejected extends Schema.TaggedClass<Rejected>()("Rejected", {
  code: RejectedCode,
  status: Schema.Int,
  retryAfter
}) {}

/** The request may have been received and we stopped waiting: a timeout, or our own interruption after sending. */
export class Ambiguous extends Schema.TaggedClass<Ambiguous>()("Ambiguous", {
  code: AmbiguousCode,
  status,
  retryAfter
}) {}

/**
 * 5xx or a transport failure (refused, never connected, dropped mid-exchange); does not prove the
 * provider received nothing (spec 002), so callers still send a stable Idempotency-Key.
 */
export class Temporary extends Schema.TaggedClass<Temporary>()("Temporary", {
  code: TemporaryCode,
  status,
  retryAfter
}) {}

export const ProviderOutcome = Schema.Union(Delivered, Rejected, Ambiguous, Temporary)
export type ProviderOutcome = typeof ProviderOutcome.Type

// ---------------------------------------------------------------------------
// Sending.

export interface ProviderRequest {
  readonly endpoint: ProviderEndpoint
  /** Sent verbatim as `Idempotency-Key`; a retry must pass the same key. */
  readonly idempotencyKey: string
  readonly body: Uint8Array | string
  readonly contentType: string
  /** Extra headers; they can never replace Idempotency-Key or Content-Type. */
  readonly headers?: Readonly<Record<string, string>>
  /** Bounds the wait for the response status; the body drain gets what is left of it. */
  readonly timeout: Duration.DurationInput
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
const HEADER_VALUE = /^[\t\x20-\x7e]*$/
const RETRY_AFTER = /^[\x20-\x7e]{1,64}$/
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/

// A malformed key or header is a bug in the caller; letting fetch refuse it
// would be misread as a transport failure, so it is a defect instead.
const checkRequest = (request: ProviderRequest): string | undefined => {
  if (!IDEMPOTENCY_KEY.test(request.idempotencyKey)) return "invalid Idempotency-Key"
  if (!HEADER_VALUE.test(request.contentType)) return "invalid Content-Type"
  for (const [name, value] of Object.entries(request.headers ?? {})) {
    if (!TOKEN.test(name) || !HEADER_VALUE.test(value)) return "invalid header"
  }
  return undefined
}

// Only Retry-After leaves the adapter, and only when it looks like one: it
// ends up in rows, and a provider must not be able to write arbitrary text there.
const retryAfterOf = (response: HttpClientResponse.HttpClientResponse): { retryAfter?: string } => {
  const value = response.headers["retry-after"]
  return value !== undefined && RETRY_AFTER.test(value) ? { retryAfter: value } : {}
}

export const classifyStatus = (code: number, extra: { retryAfter?: string } = {}): ProviderOutcome => {
  const fields = { status: code, ...extra }
  if (code >= 200 && code < 300) return new Delivered({ code: "provider-2xx", ...fields })
  if (code >= 300 && code < 400) return new Rejected({ code: "provider-redirect", ...fields })
  if (code >= 400 && code < 500) return new Rejected({ code: "provider-4xx", ...fields })
  if (code >= 500 && code < 600) return new Temporary({ code: "provider-5xx", ...fields })
  return new Temporary({ code: "provider-unexpected-status", ...fields })
}

const errorCodes = (cause: unknown): ReadonlyArray<string> => {
  // Stryker disable next-line ArrayDeclaration: the codes only feed lookups in the sets of known codes below; an extra entry in none of them changes no classification
  const codes: Array<string> = []
  let current: unknown = cause
  for (let depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
    const code = (current as { code?: unknown }).code
    // Stryker disable next-line ConditionalExpression: every known code is a string, so pushing a non-string code as well matches nothing more
    if (typeof code === "string") codes.push(code)
    current = (current as { cause?: unknown }).cause
  }
  return codes
}

// Bun reports ECONNREFUSED / ECONNRESET (older Bun: ConnectionRefused /
// ConnectionClosed); Node's undici nests the errno under `cause`.
const REFUSED = new Set(["ECONNREFUSED", "ConnectionRefused"])
// DNS, routing and TLS failures all happen before a request byte is written.
const NEVER_CONNECTED = new Set([
  "ENOTFOUND",
  "EAI_AGAIN",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "ENETDOWN",
  "EADDRNOTAVAIL",
  "FailedToOpenSocket",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "CERT_HAS_EXPIRED",
  "ERR_TLS_CERT_ALTNAME_INVALID"
])
const DROPPED = new Set(["ECONNRESET", "ConnectionClosed", "EPIPE", "UND_ERR_SOCKET", "ECONNABORTED"])

/**
 * Transport failures are all temporary (spec 002 "Provider limits": only a timeout is ambiguous); the
 * code still says which kind, for diagnostics.
 */
export const classifyTransportError = (cause: unknown): ProviderOutcome => {
  const codes = errorCodes(cause)
  if (codes.some((c) => REFUSED.has(c))) return new Temporary({ code: "provider-connection-refused" })
  if (codes.some((c) => NEVER_CONNECTED.has(c))) return new Temporary({ code: "provider-connection-failed" })
  if (codes.some((c) => DROPPED.has(c))) return new Temporary({ code: "provider-connection-dropped" })
  return new Temporary({ code: "provider-transport-error" })
}

// Bodies up to this size with a declared length are read in one call; others go through a stream.
const smallBodyBytes = 64 * 1024

const drain = (response: HttpClientResponse.HttpClientResponse) => {
  // The body is read and discarded so the connection can be reused; it is never kept. The status already
  // decided the outcome, so a failing or slow drain changes nothing. A small declared body is read in one
  // call (a Stream costs ~0.5 ms of CPU per response on Bun); anything else streams, so memory stays bounded.
  const length = Number(response.headers["content-length"] ?? Number.NaN)
  const read = Number.isFinite(length) && length <= smallBodyBytes ? response.arrayBuffer : Stream.runDrain(response.stream)
  return Effect.ignore(read)
}

/**
 * POSTs once, never follows a redirect, and classifies the result. Never
 * fails; if the calling fiber is interrupted, this effect is interrupted too
 * and the request is aborted (see `onInterrupted`, `interruptionAsAmbiguous`).
 */
export const send = (
  request: ProviderRequest
): Effect.Effect<ProviderOutcome, never, HttpClient.HttpClient> =>
  Effect.flatMap(HttpClient.HttpClient, (client) => sendWith(client, request))

export const sendWith = (client: HttpClient.HttpClient, request: ProviderRequest): Effect.Effect<ProviderOutcome> =>
  Effect.suspend(() => {
    const invalid = checkRequest(request)
    if (invalid !== undefined) return Effect.dieMessage(`ProviderHttp.send: ${invalid}`)
    const base = HttpClientRequest.post(request.endpoint).pipe(
      HttpClientRequest.setHeaders(request.headers ?? {}),
      typeof request.body === "string"
        ? HttpClientRequest.bodyText(request.body, request.contentType)
        : HttpClientRequest.bodyUint8Array(request.body, request.contentType),
      HttpClientRequest.setHeader("idempotency-key", request.idempotencyKey)
    )
    // Set once the status arrived: from then on the outcome is decided, and the timeout (one for the
    // status and the body drain together, so the drain gets what is left of it) only ends the drain.
    let decided: ProviderOutcome | undefined
    // Trace headers would leak internal ids to a third party.
    const exchange = HttpClient.withTracerPropagation(client, false).execute(base).pipe(
      Effect.flatMap((response) => {
        decided = classifyStatus(response.status, retryAfterOf(response))
        return Effect.as(drain(response), decided)
      }),
      withManualRedirects,
      // Caller headers may carry signatures; spans keep their names, not values.
      Effect.locallyWith(Headers.currentRedactedNames, (names) => [
        ...names,
        // Stryker disable next-line MethodExpression: Headers.redact lowercases every name it is given, so the case passed here cannot change what is redacted
        ...Object.keys(request.headers ?? {}).map((name) => name.toLowerCase())
      ])
    )
    return exchange.pipe(
      Effect.timeoutFail({ duration: request.timeout, onTimeout: () => "timeout" as const }),
      Effect.match({
        onFailure: (error: HttpClientError.HttpClientError | "timeout") =>
          decided ?? (error === "timeout" ? new Ambiguous({ code: "provider-timeout" }) : classifyTransportError(error.cause)),
        onSuccess: (outcome) => outcome
      }),
      Effect.tap((outcome) => Effect.annotateCurrentSpan("provider.outcome", outcome.code)),
      // A stack trace per call costs more CPU than the rest of the span; the name says where it comes from.
      Effect.withSpan("ProviderHttp.send", { captureStackTrace: false })
    )
  })

// fetch follows redirects by default (turning a POST into a GET on 302);
// "manual" hands the 3xx back so it is classified, never followed. Existing
// RequestInit options from the environment are kept.
const withManualRedirects = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(Effect.serviceOption(FetchHttpClient.RequestInit), (init) =>
    Effect.provideService(effect, FetchHttpClient.RequestInit, {
      // Stryker disable next-line ArrowFunction: spreading undefined adds no property, exactly like spreading {}
      ...Option.getOrElse(init, () => ({})),
      redirect: "manual"
    }))

/**
 * Runs `record` with an `Ambiguous` outcome when `self` is interrupted (for
 * example at shutdown): the fiber stays interrupted, the aborted call gets
 * recorded by the caller's own rule.
 */
export const onInterrupted: {
  <R2>(
    record: (outcome: Ambiguous) => Effect.Effect<void, never, R2>
  ): <E, R>(self: Effect.Effect<ProviderOutcome, E, R>) => Effect.Effect<ProviderOutcome, E, R | R2>
  <E, R, R2>(
    self: Effect.Effect<ProviderOutcome, E, R>,
    record: (outcome: Ambiguous) => Effect.Effect<void, never, R2>
  ): Effect.Effect<ProviderOutcome, E, R | R2>
} = dual(
  2,
  <E, R, R2>(
    self: Effect.Effect<ProviderOutcome, E, R>,
    record: (outcome: Ambiguous) => Effect.Effect<void, never, R2>
  ): Effect.Effect<ProviderOutcome, E, R | R2> =>
    Effect.onInterrupt(self, () => record(new Ambiguous({ code: "provider-interrupted" })))
)

/**
 * Turns an interruption of `self` into an `Ambiguous` value. This only sees
 * interruptions that do not also interrupt the caller (a joined child fiber,
 * a race); an interrupted caller has nobody to hand a value to, so it should
 * use `onInterrupted` instead.
 */
export const interruptionAsAmbiguous = <E, R>(
  self: Effect.Effect<ProviderOutcome, E, R>
): Effect.Effect<ProviderOutcome, E, R> =>
  Effect.catchAllCause(self, (cause) =>
    Cause.isInterruptedOnly(cause)
      ? Effect.succeed<ProviderOutcome>(new Ambiguous({ code: "provider-interrupted" }))
      : Effect.failCause(cause))

/** The adapter as a service: yields the `HttpClient` once so `send` needs nothing. */
export class ProviderHttp extends Effect.Service<ProviderHttp>()("@delivery/core/ProviderHttp", {
  effect: Effect.map(HttpClient.HttpClient, (client) => ({
    send: (request: ProviderRequest) => sendWith(client, request)
  }))
}) {
  /** On Bun the client is fetch-based; `send` still forces manual redirects itself. */
  static readonly layerFetch: Layer.Layer<ProviderHttp> = ProviderHttp.Default.pipe(
    Layer.provide(FetchHttpClient.layer)
  )
}
