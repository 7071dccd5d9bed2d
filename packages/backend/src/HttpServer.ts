import { HttpApp, HttpServerError, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Duration, Effect, FiberSet, Option, type Scope } from "effect"

export interface ServeOptions {
  readonly hostname: string
  readonly port: number
  /** Passed to Bun.serve: bodies above it get 413 (HttpIncomingMessage.withMaxBodySize is ignored on Bun). */
  readonly maxRequestBodySize: number
  /** How long shutdown waits for in-flight requests before interrupting them. */
  readonly drainMs: number
}

export interface DrainStatus {
  readonly url: string
  readonly inFlight: () => number
}

/** After a drain, Bun still writes the last responses; connections close once they are written. */
const flushGrace = Duration.seconds(1)

const refused = () =>
  new Response("shutting down\n", {
    status: 503,
    headers: { "content-type": "text/plain", connection: "close", "retry-after": "1" }
  })

/**
 * Serves `app` with Bun.serve and drains on release, which BunHttpServer 0.91 does not do (its finalizer
 * interrupts every running handler, so clients get 503). When the scope closes:
 * 1. new requests are refused: the listener is closed (`server.stop(false)`: new connections are refused,
 *    idle keep-alive connections are closed) and a request that still reaches `fetch` gets 503. (Bun 1.4.4
 *    closes a busy connection when a pipelined request arrives on it, aborting its in-flight request; the
 *    rest of a request body that is still being uploaded is delivered normally.)
 * 2. in-flight requests (counted from Bun's `fetch` call until their response is handed to Bun) get up to
 *    `drainMs` to finish, then their fibers are interrupted;
 * 3. remaining connections are closed.
 * Only then do earlier-acquired resources (workers, the database pool) get released.
 * Caveat: a streamed response body counts as finished once its headers are handed over.
 */
export const serveDraining = <E, R>(app: HttpApp.Default<E, R>, options: ServeOptions) =>
  Effect.gen(function* () {
    const fibers = yield* FiberSet.make<void, never>()
    const runFork = yield* FiberSet.runtime(fibers)<
      Exclude<Exclude<R, Scope.Scope>, HttpServerRequest.HttpServerRequest>
    >()
    const runtime = yield* Effect.runtime<never>()

    const resolvers = new WeakMap<HttpServerRequest.HttpServerRequest, (response: Response) => void>()
    const handled = HttpApp.toHandled(app, (request, response) =>
      Effect.sync(() => {
        const web = HttpServerResponse.toWeb(HttpApp.unsafeEjectStreamScope(response), {
          withoutBody: request.method === "HEAD",
          runtime
        })
        resolvers.get(request)?.(web)
      }))

    const handle = (request: Request, remoteAddress: string | undefined) =>
      new Promise<Response>((resolve) => {
        const serverRequest = HttpServerRequest.fromWeb(request).modify(remoteAddress === undefined ? {} : { remoteAddress })
        resolvers.set(serverRequest, resolve)
        const fiber = runFork(Effect.provideService(handled, HttpServerRequest.HttpServerRequest, serverRequest))
        // A fiber interrupted before it answered (drain bound reached) still settles its request.
        fiber.addObserver(() => resolve(new Response(null, { status: 503 })))
        request.signal.addEventListener(
          "abort",
          () => fiber.unsafeInterruptAsFork(HttpServerError.clientAbortFiberId),
          { once: true }
        )
      })

    let draining = false
    let inFlight = 0
    let onIdle: (() => void) | undefined

    const server = yield* Effect.acquireRelease(
      Effect.try({
        try: () =>
          Bun.serve({
            hostname: options.hostname,
            port: options.port,
            maxRequestBodySize: options.maxRequestBodySize,
            fetch(request, server) {
              if (draining) return refused()
              inFlight += 1
              return handle(request, server.requestIP(request)?.address).finally(() => {
                inFlight -= 1
                if (inFlight === 0) onIdle?.()
              })
            }
          }),
        catch: (cause) => new HttpServerError.ServeError({ cause })
      }),
      (server) => Effect.sync(() => void server.stop(true))
    )

    const idle = Effect.async<void>((resume) => {
      if (inFlight === 0) return resume(Effect.void)
      onIdle = () => resume(Effect.void)
      return Effect.sync(() => {
        onIdle = undefined
      })
    })

    // Registered last, so it runs first: before the hard stop above and before the FiberSet interrupts.
    // Finalizers are uninterruptible; the waits are made interruptible so their timeouts can fire.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        draining = true
        const closed = server.stop(false)
        yield* Effect.logInfo(
          `shutdown: HTTP stopped accepting; draining ${inFlight} in-flight request(s) for up to ${options.drainMs} ms`
        )
        const drained = yield* Effect.interruptible(idle).pipe(Effect.timeoutOption(Duration.millis(options.drainMs)))
        if (Option.isNone(drained)) {
          yield* Effect.logWarning(`shutdown: drain bound reached, interrupting ${inFlight} request(s)`)
          yield* FiberSet.clear(fibers)
        } else {
          yield* Effect.logInfo("shutdown: in-flight requests drained")
          yield* Effect.interruptible(Effect.promise(() => closed)).pipe(Effect.timeoutOption(flushGrace))
        }
        void server.stop(true)
        yield* Effect.logInfo("shutdown: HTTP server closed")
      })
    )

    const url = `http://${server.hostname}:${server.port}`
    return { url, inFlight: () => inFlight } satisfies DrainStatus
  })
