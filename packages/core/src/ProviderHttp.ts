import { FetchHttpClient } from "@effect/platform"
import { Clock, Context, Duration, Effect, Exit, type Fiber, type FiberId, type Layer, Option, type Tracer } from "effect"
import type { ProviderEndpoint } from "./ProviderEndpoint.ts"
import { Ambiguous, classifyStatus, classifyTransportError, type ProviderOutcome } from "./ProviderOutcome.ts"
import { plainSpans } from "./Spans.ts"

export * from "./ProviderEndpoint.ts"
export * from "./ProviderOutcome.ts"

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
  /**
   * The span the call's span nests in, for a caller that made its own span with `Effect.useSpan` rather than
   * making it the current one (`withSpan` provides it to the whole effect, which costs more than the call's own
   * bookkeeping); without it, the current span.
   */
  readonly parentSpan?: Tracer.AnySpan
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
const HEADER_VALUE = /^[\t\x20-\x7e]*$/
const RETRY_AFTER = /^[\x20-\x7e]{1,64}$/
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/

// A malformed key or header is a bug in the caller; letting fetch refuse it would be misread as a transport
// failure, so it is a defect instead. The checked headers come back as the plain object fetch is given (a
// `Headers` instance cost more than the checks): names in lower case, the caller's `Idempotency-Key` and
// `Content-Type` replaced by the request's own.
const checkedHeaders = (request: ProviderRequest): Record<string, string> | string => {
  if (!IDEMPOTENCY_KEY.test(request.idempotencyKey)) return "invalid Idempotency-Key"
  if (!HEADER_VALUE.test(request.contentType)) return "invalid Content-Type"
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(request.headers ?? {})) {
    if (!TOKEN.test(name) || !HEADER_VALUE.test(value)) return "invalid header"
    headers[name.toLowerCase()] = value
  }
  headers["content-type"] = request.contentType
  headers["idempotency-key"] = request.idempotencyKey
  return headers
}

// Only Retry-After leaves the adapter, and only when it looks like one: it
// ends up in rows, and a provider must not be able to write arbitrary text there.
const retryAfterOf = (response: Response): { retryAfter?: string } => {
  const value = response.headers.get("retry-after")
  return value !== null && RETRY_AFTER.test(value) ? { retryAfter: value } : {}
}

// Bodies up to this size with a declared length are read in one call; others go through a stream.
const smallBodyBytes = 64 * 1024

// The body is read and discarded so the connection can be reused; it is never kept. The status already decided the
// outcome, so a failing or slow drain changes nothing. A small declared body is read in one call; anything else is
// read chunk by chunk and dropped, so memory stays bounded.
const drain = async (response: Response): Promise<void> => {
  const length = Number(response.headers.get("content-length") ?? Number.NaN)
  if (Number.isFinite(length) && length <= smallBodyBytes) {
    await response.arrayBuffer()
    return
  }
  const body = response.body
  // Stryker disable next-line ConditionalExpression: without the check a bodiless response (a 204) throws in the loop below, which ends the drain like any failed read: the status already decided
  if (body === null) return
  for await (const _chunk of body) {
    // discarded
  }
}

/**
 * POSTs once with fetch, never follows a redirect, and classifies the result. Never fails; if the calling fiber is
 * interrupted, this effect is interrupted too and the request is aborted (see `onInterrupted`,
 * `interruptionAsAmbiguous`). One timeout (an `AbortSignal.timeout`) bounds the status and the body drain together:
 * once the status arrived the outcome is decided, and the timeout only ends the drain.
 *
 * Plain fetch rather than @effect/platform's HttpClient: the client's request and response models, its span and
 * the fiber it forks per call cost two to three times the exchange itself, on every delivery. What the client would
 * add is not wanted here anyway: no trace headers go to a third party (they would leak internal ids), and no span
 * records the URL or the caller's headers (they may carry signatures). `FetchHttpClient.Fetch` and
 * `FetchHttpClient.RequestInit` from the context are honoured, so a deployment or a test can still supply its own;
 * `redirect` is always "manual".
 *
 * The call's span (`ProviderHttp.send`, with `provider.outcome`) is ended by the call itself, when the outcome is
 * decided or the call is interrupted, rather than by `Effect.useSpan`, whose exit handling cost more per delivery
 * than the span; it is never made the current span (nothing inside reads it). A fiber interrupted after the span was
 * made and before the request started (it can only happen where the runtime makes a long-running fiber yield) leaves
 * it unended, and an unended span is never exported: no request was made.
 */
export const send = (request: ProviderRequest): Effect.Effect<ProviderOutcome> =>
  Effect.flatMap(
    Effect.makeSpan(
      "ProviderHttp.send",
      // A stack trace per call costs more CPU than the rest of the span; the name says where it comes from.
      // Stryker disable next-line ObjectLiteral,BooleanLiteral: CPU only; no test can tell a span's stack trace from none
      { captureStackTrace: false, ...(request.parentSpan === undefined ? {} : { parent: request.parentSpan }) }
    ),
    (span) => Effect.withFiberRuntime((fiber) => call(request, span, fiber))
  )

/** What a call needs from the fiber that makes it: its clock, and the fetch and its settings from its context. */
interface CallEnvironment {
  readonly clock: Clock.Clock
  readonly fetch: typeof globalThis.fetch
  readonly init: RequestInit
}

const environmentOf = (fiber: Fiber.RuntimeFiber<unknown, unknown>): CallEnvironment => {
  const context = fiber.currentContext
  return {
    clock: Context.get(fiber.currentDefaultServices, Clock.Clock),
    fetch: Context.getOrElse(context, FetchHttpClient.Fetch, () => globalThis.fetch),
    // Stryker disable next-line ArrowFunction: spreading undefined adds no property, exactly like spreading {}
    init: Context.getOrElse(context, FetchHttpClient.RequestInit, () => ({}))
  }
}

/** Stops a call: aborts its request and ends its span with the interruption of `by`; its outcome is never handed over. */
export type Abort = (by: FiberId.FiberId) => void

/**
 * The exchange itself, without a fiber: starts the request at once and hands its outcome to `done` once, unless it
 * was aborted first. `send` and `starter` are this with a fiber around it or without one. `headers` were checked.
 */
const start = (
  request: ProviderRequest,
  headers: Record<string, string>,
  span: Tracer.Span,
  environment: CallEnvironment,
  done: (outcome: ProviderOutcome) => void
): Abort => {
  // One controller for both ends of the wait, the timeout and our interruption; the flag says which it was.
  // (`AbortSignal.any` over a timeout signal cost about 3 µs more per call, and its timer still fired after
  // the call had ended.)
  const controller = new AbortController()
  let timedOut = false
  let aborted = false
  // Whether the outcome was handed over; not read from the span, which a tracer turned off ends from the start.
  let settled = false
  const timer = setTimeout(() => {
    timedOut = true
    controller.abort()
  }, Duration.toMillis(Duration.decode(request.timeout)))
  // Stryker disable next-line OptionalChaining,BlockStatement: the pending request keeps the process alive anyway; an unref'd timer only never delays an exit on its own
  timer.unref?.()
  const settle = (outcome: ProviderOutcome) => {
    // An aborted request still settles afterwards; the interruption already ended the span, and nobody waits.
    if (aborted) return
    settled = true
    // Stryker disable next-line CallExpression: a timer left to fire only aborts a request that has already ended, which changes nothing; it is unref'd
    clearTimeout(timer)
    span.attribute("provider.outcome", outcome.code)
    span.end(environment.clock.unsafeCurrentTimeNanos(), Exit.succeed(outcome))
    done(outcome)
  }
  environment.fetch(request.endpoint, {
    ...environment.init, method: "POST", headers, body: request.body, redirect: "manual", signal: controller.signal
  }).then(
    (response) => {
      // The status decides; the drain only has to end (read to its end, failed, or cut off by the timeout).
      const decided = classifyStatus(response.status, retryAfterOf(response))
      const answer = () => settle(decided)
      drain(response).then(answer, answer)
    },
    (error: unknown) => settle(timedOut ? new Ambiguous({ code: "provider-timeout" }) : classifyTransportError(error))
  )
  return (by) => {
    if (aborted || settled) return
    aborted = true
    // Stryker disable next-line CallExpression: as in settle, the timer would only abort the request aborted here
    clearTimeout(timer)
    controller.abort()
    span.end(environment.clock.unsafeCurrentTimeNanos(), Exit.interrupt(by))
  }
}

const call = (request: ProviderRequest, span: Tracer.Span, fiber: Fiber.RuntimeFiber<unknown, unknown>): Effect.Effect<ProviderOutcome> => {
  const headers = checkedHeaders(request)
  if (typeof headers === "string") {
    const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
    return Effect.onExit(
      Effect.dieMessage(`ProviderHttp.send: ${headers}`),
      (exit) => Effect.sync(() => span.end(clock.unsafeCurrentTimeNanos(), exit))
    )
  }
  const environment = environmentOf(fiber)
  return Effect.async<ProviderOutcome>((resume) => {
    const abort = start(request, headers, span, environment, (outcome) => resume(Effect.succeed(outcome)))
    return Effect.sync(() => abort(fiber.id()))
  })
}

/**
 * Starts one call without a fiber of its own and hands its outcome to `done`, or throws a defect for a malformed
 * key or header (as `send` dies). For a caller that runs many calls from one fiber and resumes it once for all of
 * them (the outbox's lanes): resuming a fiber per call cost more than the rest of the adapter. The call and its span
 * are `send`'s; the returned `Abort` stops it.
 */
export type Starter = (request: ProviderRequest, done: (outcome: ProviderOutcome) => void) => Abort

/**
 * A `Starter` bound to the running fiber's clock, fetch and tracer, when its span can be made without the fiber
 * (`plainSpans`: the span `Effect.makeSpan` would make, under the request's `parentSpan` or the fiber's current
 * span). `undefined` where Effect's own rules for a span add something: the caller then uses `send`.
 */
export const starter: Effect.Effect<Starter | undefined> = Effect.withFiberRuntime((fiber) => {
  const spans = plainSpans(fiber)
  if (spans === undefined) return Effect.succeed(undefined)
  const environment = environmentOf(fiber)
  return Effect.succeed<Starter>((request, done) => {
    const headers = checkedHeaders(request)
    if (typeof headers === "string") throw new Error(`ProviderHttp.send: ${headers}`)
    const span = spans("ProviderHttp.send", request.parentSpan === undefined ? undefined : Option.some(request.parentSpan))
    return start(request, headers, span, environment, done)
  })
})

/** The adapter as a service, for packages that take their provider calls from the context. */
export class ProviderHttp extends Effect.Service<ProviderHttp>()("@delivery/core/ProviderHttp", {
  succeed: { send, starter }
}) {
  /** The service over fetch (the only transport); the name stays for the layers that provide it. */
  static readonly layerFetch: Layer.Layer<ProviderHttp> = ProviderHttp.Default
}
