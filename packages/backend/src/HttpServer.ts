import {
  Etag,
  FileSystem,
  HttpApp,
  HttpMiddleware,
  HttpPlatform,
  type HttpRouter,
  HttpServerError,
  HttpServerRequest,
  HttpServerResponse,
  HttpTraceContext,
  Path
} from "@effect/platform"
import { CORRELATION_HEADER, type CorrelationId, correlationRefs, makeCorrelationId, makeInFlight } from "@delivery/core"
import { Context, Duration, Effect, FiberRef, FiberRefs, FiberSet, LogLevel, Option, Runtime, type Tracer } from "effect"
import { bodyTooLarge, bodyTooLargeResponse, edgeFailure, refusalResponse, shuttingDown, tagOfBody } from "./EdgeAnswers.ts"
import { BoundedJsonRequest, declaredLength, limitUndeclaredBody, MAX_TARGET_LENGTH, pathOf, targetProblem } from "./EdgeRequest.ts"
import { observeRequest } from "./HttpMetrics.ts"
import { PathInvalid, UriTooLong } from "./Refusals.ts"
import { methodLabel, type RouteLabels, UNMATCHED } from "./RouteLabels.ts"
import { constTrue } from "effect/Function"

export interface ServeOptions {
  readonly hostname: string
  readonly port: number
  /** MAX_REQUEST_BODY_BYTES: enforced by the edge itself, so that the refusal is the documented 413. */
  readonly maxRequestBodySize: number
  /** How long shutdown waits for in-flight requests before interrupting them. */
  readonly drainMs: number
  /** Route templates for metrics and span names; without them every request is `unmatched`. */
  readonly routes?: RouteLabels
  /** Several processes listen on one port (WORKERS > 1); the kernel spreads connections across them. */
  readonly reusePort?: boolean
}

export interface DrainStatus {
  readonly url: string
  readonly inFlight: () => number
}

/**
 * How long the process keeps its listener after SIGTERM while every answer already says `Connection: close`:
 * requests that clients had sent on idle keep-alive connections are read and answered 503 instead of being
 * reset when Bun closes those connections together with the listener.
 */
const closeNotice = Duration.millis(100)

/** After a drain, Bun still writes the last answers; connections close once they are written. */
const flushGrace = Duration.seconds(1)

/** Sets a header, also on a response whose headers are immutable (one passed through from a `fetch`). */
const withHeader = (response: Response, name: string, value: string): Response => {
  try {
    response.headers.set(name, value)
    return response
  } catch {
    const copy = new Response(response.body, response)
    copy.headers.set(name, value)
    return copy
  }
}

/** One request from Bun's `fetch` call until its answer is handed back to Bun. */
interface Exchange {
  readonly id: CorrelationId
  readonly method: string
  readonly url: string
  /** Labels: the method from a closed set, the route template or `unmatched`. */
  readonly methodLabel: string
  readonly route: string
  /** `performance.now()` when Bun handed the request over. */
  readonly startedAt: number
  readonly resolve: (response: Response) => void
  answered: boolean
  /** The client went away: nobody reads the answer. */
  aborted: boolean
  /** The undeclared body passed MAX_REQUEST_BODY_BYTES: the answer is 413 whatever the route made of it. */
  bodyTooLarge: boolean
  /** For a 5xx: the failure's tag or the defect's kind. */
  kind: string | undefined
}

/**
 * What an app of `HttpApiBuilder.httpApp` reads while it handles a request (HttpRouter's default services), and
 * nothing more: the context `serveDraining` starts each request's fiber in. Effect copies a fiber's context for
 * every span and every provided service and compares the old context with the new one entry by entry, so a
 * request that started with the whole backend's context (about 50 services, which its handlers took when they
 * were built) paid for each of them many times over.
 */
const routerServices = Effect.map(
  Effect.context<HttpRouter.HttpRouter.DefaultServices>(),
  Context.pick(HttpPlatform.HttpPlatform, Etag.Generator, FileSystem.FileSystem, Path.Path)
)

/**
 * Serves `app` with Bun.serve as the HTTP edge of the backend: every request gets a correlation id before
 * anything else runs (handlers read it with `requestCorrelationId`, every log line of the request carries
 * it, every answer has it as `x-correlation-id`); the request target, the body size and JSON bodies are
 * bounded before any route runs; failures the API does not answer itself get the documented JSON refusals
 * (docs/http.md); every 5xx logs one error line; every answer is counted and timed by method, route template and
 * status, and the request's server span (named by its route template) has only bounded attributes.
 *
 * Each request runs in HttpRouter's default services (`routerServices`) and in nothing else of the caller's context.
 *
 * Bun.serve's own `maxRequestBodySize` is unbounded on purpose: Bun answers a declared length over it with a
 * bare 413, so the edge checks MAX_REQUEST_BODY_BYTES itself (declared lengths before reading, chunked bodies
 * as they stream). Without `Connection: close` on that 413, Bun reads and discards the rest of the body, so
 * the client gets to read the answer.
 *
 * Draining, which BunHttpServer 0.91 does not do (its finalizer interrupts every running handler). Bun 1.4.4's
 * `server.stop(false)` closes the listener and, at the same moment, every idle keep-alive connection (it has no
 * way to do one without the other); a request a client had already sent on such a connection is then never
 * read and the client sees a reset. So when the scope closes:
 * 1. every answer from now on carries `Connection: close` (no client reuses a connection that is about to
 *    close), and a request that reaches `fetch` gets 503 `shutting-down` with `Retry-After`; for `closeNotice`
 *    the listener stays open, so requests already on their way over idle connections are read and answered;
 * 2. `server.stop(false)`: new connections are refused, idle connections closed;
 * 3. in-flight requests (from Bun's `fetch` call until their answer is handed to Bun) get up to `drainMs` in
 *    all to finish; then their fibers are interrupted and they are answered 503 `shutting-down`;
 * 4. the last answers are flushed (bounded), then remaining connections are closed.
 * Only then do earlier-acquired resources (workers, the database pool) get released.
 * Caveat: a streamed response body counts as finished once its headers are handed over.
 */
export const serveDraining = <E>(app: HttpApp.Default<E, HttpRouter.HttpRouter.DefaultServices>, options: ServeOptions) =>
  Effect.gen(function* () {
    const fibers = yield* FiberSet.make<void, never>()
    // Each request's fiber starts in the router's services alone, not in the caller's context (every service of the backend).
    const services = yield* routerServices
    const runFork = yield* FiberSet.runtime(fibers)<HttpRouter.HttpRouter.DefaultServices>().pipe(
      Effect.mapInputContext((_: Context.Context<never>) => services)
    )
    const runtime = yield* Effect.runtime<never>()
    const runSync = Runtime.runSync(runtime)
    const debug = LogLevel.lessThanEqual(
      FiberRefs.getOrDefault(runtime.fiberRefs, FiberRef.currentMinimumLogLevel),
      LogLevel.Debug
    )

    let draining = false
    const inFlight = makeInFlight()

    const log = (level: LogLevel.LogLevel, message: string, exchange: Exchange, annotations: Record<string, unknown>) =>
      runSync(Effect.logWithLevel(level, message).pipe(
        Effect.annotateLogs({ method: exchange.method, path: pathOf(exchange.url), ...annotations, correlationId: exchange.id })
      ))

    /** The one way an answer leaves: correlation id, `Connection: close` while draining, the 5xx log line. */
    const answer = (exchange: Exchange, answered: Response) => {
      if (exchange.answered) return
      exchange.answered = true
      const response = withHeader(answered, CORRELATION_HEADER, exchange.id)
      if (draining) response.headers.set("connection", "close")
      // No payload, message or secret: the status, the kind of failure and where.
      if (response.status >= 500 && !exchange.aborted) {
        log(LogLevel.Error, "request failed", exchange, { status: response.status, kind: exchange.kind ?? "response" })
      }
      if (debug) log(LogLevel.Debug, "request answered", exchange, { status: response.status, draining })
      observeRequest(exchange.methodLabel, exchange.route, response.status, (performance.now() - exchange.startedAt) / 1000)
      exchange.resolve(response)
      inFlight.leave()
    }

    const exchanges = new WeakMap<HttpServerRequest.HttpServerRequest, Exchange>()
    const exchangeOf = Effect.map(HttpServerRequest.HttpServerRequest, (request) => exchanges.get(request)!)

    const guarded = Effect.catchAllCause(app, (cause) =>
      Effect.flatMap(exchangeOf, (exchange) => {
        if (exchange.bodyTooLarge) return Effect.succeed(bodyTooLargeResponse(exchange.id, options.maxRequestBodySize))
        return Effect.map(edgeFailure(cause, exchange.id), ({ kind, response }) => {
          exchange.kind = kind
          return response
        })
      }))

    const handled = HttpApp.toHandled(guarded, (request, response) =>
      Effect.suspend(() => {
        const exchange = exchanges.get(request)!
        const final = exchange.bodyTooLarge ? bodyTooLargeResponse(exchange.id, options.maxRequestBodySize) : response
        if (final.status >= 500 && exchange.kind === undefined) exchange.kind = tagOfBody(final)
        answer(
          exchange,
          HttpServerResponse.toWeb(HttpApp.unsafeEjectStreamScope(final), { withoutBody: request.method === "HEAD", runtime })
        )
        return Effect.annotateCurrentSpan("http.response.status_code", final.status)
      }))

    // The request's server span, in place of the platform's: that one records the URL (tenant names, query values)
    // and every request header (a GitHub signature among them). This one has the route template and the method;
    // the correlation id reaches it, and every span under it, from the fiber's refs.
    const traced = (exchange: Exchange, request: HttpServerRequest.HttpServerRequest): typeof handled => {
      const parent = HttpTraceContext.fromHeaders(request.headers)
      const span: Tracer.SpanOptions = {
        kind: "server",
        captureStackTrace: false,
        attributes: { "http.request.method": exchange.methodLabel, "http.route": exchange.route },
        ...(Option.isSome(parent) ? { parent: parent.value } : { root: true })
      }
      return handled.pipe(Effect.withSpan(`${exchange.methodLabel} ${exchange.route}`, span))
    }

    const requestRefs = (id: CorrelationId) => {
      const correlation = correlationRefs(id)
      return (refs: FiberRefs.FiberRefs, fiberId: Parameters<typeof correlation>[1]) =>
        FiberRefs.updateAs(correlation(refs, fiberId), {
          fiberId,
          fiberRef: HttpMiddleware.currentTracerDisabledWhen,
          value: constTrue
        })
    }

    const handle = (exchange: Exchange, request: Request, remoteAddress: string | undefined) => {
      const source = limitUndeclaredBody(request, options.maxRequestBodySize, () => {
        exchange.bodyTooLarge = true
      })
      const platform = HttpServerRequest.fromWeb(source)
      const serverRequest = new BoundedJsonRequest(
        remoteAddress === undefined ? platform : platform.modify({ remoteAddress }),
        exchange.id
      )
      exchanges.set(serverRequest, exchange)
      const fiber = runFork(Effect.provideService(traced(exchange, serverRequest), HttpServerRequest.HttpServerRequest, serverRequest), {
        updateRefs: requestRefs(exchange.id)
      })
      // A fiber interrupted before it answered (drain bound reached, client gone) still settles its request.
      fiber.addObserver(() => {
        // Built only when unanswered: a refusal's construction and encoding cost more than the rest of this path.
        if (exchange.answered) return
        exchange.kind ??= "interrupted"
        answer(exchange, refusalResponse(shuttingDown(exchange.id)))
      })
      request.signal.addEventListener(
        "abort",
        () => {
          exchange.aborted = true
          fiber.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId)
        },
        { once: true }
      )
    }

    const server = yield* Effect.acquireRelease(
      Effect.try({
        try: () =>
          Bun.serve({
            hostname: options.hostname,
            port: options.port,
            reusePort: options.reusePort ?? false,
            // See above: the edge enforces options.maxRequestBodySize itself.
            maxRequestBodySize: Number.POSITIVE_INFINITY,
            fetch(request, server) {
              return new Promise<Response>((resolve) => {
                inFlight.enter()
                const method = methodLabel(request.method)
                const exchange: Exchange = {
                  id: makeCorrelationId(),
                  method: request.method,
                  url: request.url,
                  methodLabel: method,
                  route: options.routes?.of(method, request.url) ?? UNMATCHED,
                  startedAt: performance.now(),
                  resolve,
                  answered: false,
                  aborted: false,
                  bodyTooLarge: false,
                  kind: undefined
                }
                if (draining) {
                  exchange.kind = "shutting-down"
                  return answer(exchange, refusalResponse(shuttingDown(exchange.id)))
                }
                const problem = targetProblem(request.url)
                if (problem !== undefined) {
                  const correlationId = exchange.id
                  return answer(exchange, refusalResponse(
                    problem === "uri-too-long"
                      ? new UriTooLong({ reason: problem, correlationId, limit: MAX_TARGET_LENGTH })
                      : new PathInvalid({ reason: problem, correlationId })
                  ))
                }
                const declared = declaredLength(request)
                if (declared !== undefined && declared > options.maxRequestBodySize) {
                  return answer(exchange, refusalResponse(bodyTooLarge(exchange.id, options.maxRequestBodySize)))
                }
                handle(exchange, request, server.requestIP(request)?.address)
              })
            }
          }),
        catch: (cause) => new HttpServerError.ServeError({ cause })
      }),
      (server) => Effect.sync(() => void server.stop(true))
    )

    // Registered last, so it runs first: before the hard stop above and before the FiberSet interrupts.
    // Finalizers are uninterruptible; the waits are made interruptible so their timeouts can fire.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        draining = true
        const notice = Duration.min(closeNotice, Duration.millis(options.drainMs))
        yield* Effect.sleep(notice)
        const closed = server.stop(false)
        yield* Effect.logInfo(
          `shutdown: HTTP stopped accepting; draining ${inFlight.count()} in-flight request(s) for up to ${options.drainMs} ms`
        )
        const drained = yield* Effect.interruptible(inFlight.idle).pipe(Effect.timeoutOption(Duration.subtract(Duration.millis(options.drainMs), notice)))
        if (Option.isNone(drained)) {
          yield* Effect.logWarning(`shutdown: drain bound reached, interrupting ${inFlight.count()} request(s)`)
          yield* FiberSet.clear(fibers)
        } else {
          yield* Effect.logInfo("shutdown: in-flight requests drained")
        }
        yield* Effect.interruptible(Effect.promise(() => closed)).pipe(Effect.timeoutOption(flushGrace))
        void server.stop(true)
        yield* Effect.logInfo("shutdown: HTTP server closed")
      })
    )

    const url = `http://${server.hostname}:${server.port}`
    return { url, inFlight: inFlight.count } satisfies DrainStatus
  })
