import { makeInFlight } from "@delivery/core"
import { Duration, Effect } from "effect"
import { CloudSettingsTag } from "./CloudConfig.ts"
import { WakeProxy } from "./WakeProxy.ts"

/** After the drain, the listener's remaining connections are closed; the last answers get this long to leave. */
const FLUSH_GRACE = Duration.seconds(1)

/**
 * The wake proxy's own listener (`IDLE_WAKE_PROXY_HOST`:`IDLE_WAKE_PROXY_PORT`), apart from the operator API: stack
 * hosts never reach the cloud's operator routes, and operator hosts are never proxied. Bun's idle timeout is raised
 * above the readiness bound so a request held for a cold start keeps its connection. On scope close it stops
 * accepting, lets requests in flight finish (held ones included) for up to `drainMs`, then closes what is left.
 */
export const serveProxy = (options: { readonly drainMs: number }) =>
  Effect.gen(function* () {
    const settings = yield* CloudSettingsTag
    const proxy = yield* WakeProxy
    const inFlight = makeInFlight()
    const idleTimeout = Math.min(255, Math.ceil(Duration.toSeconds(settings.admission.readinessWait)) + 30)

    const server = yield* Effect.acquireRelease(
      Effect.sync(() =>
        Bun.serve({
          hostname: settings.proxyHost,
          port: settings.proxyPort,
          idleTimeout,
          fetch(request, server) {
            inFlight.enter()
            const answer = proxy.handle(request, server.requestIP(request)?.address)
            if (answer instanceof Response) {
              inFlight.leave()
              return answer
            }
            return answer.finally(inFlight.leave)
          }
        })
      ),
      (server) => Effect.sync(() => void server.stop(true))
    )

    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        const closed = server.stop(false)
        yield* Effect.logInfo(`shutdown: wake proxy stopped accepting; ${inFlight.count()} request(s) in flight`)
        yield* Effect.interruptible(inFlight.idle).pipe(Effect.timeoutOption(Duration.millis(options.drainMs)))
        yield* Effect.interruptible(Effect.promise(() => closed)).pipe(Effect.timeoutOption(FLUSH_GRACE))
        void server.stop(true)
        yield* Effect.logInfo("shutdown: wake proxy closed")
      })
    )
    return { url: `http://${server.hostname}:${server.port}` }
  })
