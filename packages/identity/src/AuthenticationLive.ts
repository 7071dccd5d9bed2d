import { RateLimiter } from "@effect/experimental"
import { HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Config, Duration, Effect, Layer, type Redacted } from "effect"
import { Authentication } from "./Authentication.ts"
import { IdentityRateLimited, IdentityStorageUnavailable, Unauthenticated } from "./Domain.ts"
import { Identity } from "./Identity.ts"
import { peerOf } from "./Peer.ts"

/**
 * - `IDENTITY_PEER_LIMIT` (default 60): authentication attempts one peer may make per window,
 *   successful ones included; every attempt costs a lookup and a hash.
 * - `IDENTITY_PEER_WINDOW` (default "1 minute"): the fixed window of that limit.
 * - `TRUSTED_PROXY_HOPS` (default 0): how many reverse proxies we sit behind. 0 means the peer is
 *   the socket address and `X-Forwarded-For` is ignored; n > 0 means the n-th entry from the right
 *   of `X-Forwarded-For`. Setting it higher than the real number of proxies lets clients choose
 *   their own peer key.
 */
export const PeerLimitConfig = Config.all({
  limit: Config.integer("IDENTITY_PEER_LIMIT").pipe(
    Config.withDefault(60),
    Config.validate({ message: "IDENTITY_PEER_LIMIT must be at least 1", validation: (n) => n >= 1 })
  ),
  window: Config.duration("IDENTITY_PEER_WINDOW").pipe(
    Config.withDefault(Duration.minutes(1)),
    Config.validate({
      message: "IDENTITY_PEER_WINDOW must be a positive duration",
      validation: (d) => Duration.toMillis(d) > 0 && Duration.isFinite(d)
    })
  ),
  trustedProxyHops: Config.integer("TRUSTED_PROXY_HOPS").pipe(
    Config.withDefault(0),
    Config.validate({ message: "TRUSTED_PROXY_HOPS must be between 0 and 16", validation: (n) => n >= 0 && n <= 16 })
  )
})

/** Seconds, rounded up and at least 1: a client told "0" would retry at once and be refused again. */
export const retryAfterSeconds = (millis: number): number => Math.max(1, Math.ceil(millis / 1000))

// HttpApi encodes declared errors as JSON with their status only; headers that
// belong to the refusal are added to the final response of this request.
const withHeader = (name: string, value: string) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeader(response, name, value)))

const BEARER = /^bearer /i

const make = Effect.gen(function* () {
  const identity = yield* Identity
  const limiter = yield* RateLimiter.RateLimiter
  const config = yield* PeerLimitConfig

  // Cheap and first: a header read and one counter in the limiter's store.
  const admitPeer = (request: HttpServerRequest.HttpServerRequest) =>
    limiter.consume({
      key: `identity-peer:${peerOf(request, config.trustedProxyHops)}`,
      limit: config.limit,
      window: config.window,
      algorithm: "fixed-window",
      onExceeded: "fail"
    }).pipe(
      Effect.asVoid,
      Effect.catchAll((error): Effect.Effect<never, IdentityRateLimited | IdentityStorageUnavailable> => {
        if (error.reason === "Exceeded") {
          const retryAfter = Duration.toMillis(error.retryAfter)
          return withHeader("retry-after", String(retryAfterSeconds(retryAfter))).pipe(
            Effect.zipRight(Effect.fail(new IdentityRateLimited({ retryAfter })))
          )
        }
        // The limiter's store is down: refuse (fail closed) rather than verify without a limit.
        return Effect.fail(new IdentityStorageUnavailable({ operation: "Authentication.peerLimit" }))
      })
    )

  const bearer = Effect.fn("Authentication.bearer")(function* (token: Redacted.Redacted<string>) {
    const request = yield* HttpServerRequest.HttpServerRequest
    yield* admitPeer(request)
    const header = request.headers.authorization
    if (header === undefined || header.trim() === "") {
      return yield* withHeader("www-authenticate", "Bearer").pipe(
        Effect.zipRight(Effect.fail(new Unauthenticated({ reason: "missing" })))
      )
    }
    // The platform's bearer decoder slices the first seven characters whatever the scheme was.
    if (!BEARER.test(header)) {
      return yield* withHeader("www-authenticate", "Bearer error=\"invalid_request\"").pipe(
        Effect.zipRight(Effect.fail(new Unauthenticated({ reason: "malformed" })))
      )
    }
    return yield* identity.authenticate(token).pipe(
      Effect.tapErrorTag("Unauthenticated", () => withHeader("www-authenticate", "Bearer error=\"invalid_token\""))
    )
  })

  return Authentication.of({ bearer })
})

/** The middleware with the limiter store left open: provide a shared store (e.g. Redis) for many processes. */
export const authenticationLayer = Layer.effect(Authentication, make).pipe(Layer.provide(RateLimiter.layer))

/** The middleware with an in-process limiter store: each backend process counts its own peers. */
export const AuthenticationLive = authenticationLayer.pipe(Layer.provide(RateLimiter.layerStoreMemory))
