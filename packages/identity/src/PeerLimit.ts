import { integerBetween, type LimiterReason, limiterWithLocalFallback, LimitStoreLive, positiveDuration, recordLimiterRefusal } from "@delivery/core"
import { RateLimiter } from "@effect/experimental"
import { HttpApp, type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Config, Context, Duration, Effect, Layer } from "effect"
import { IdentityRateLimited, IdentityStorageUnavailable } from "./Domain.ts"
import { peerOf } from "./Peer.ts"

export const IDENTITY_PEER_LIMIT = "IDENTITY_PEER_LIMIT"
export const IDENTITY_PEER_WINDOW = "IDENTITY_PEER_WINDOW"
export const TRUSTED_PROXY_HOPS = "TRUSTED_PROXY_HOPS"

/**
 * - `IDENTITY_PEER_LIMIT` (default 1200): authentication attempts one peer may make per window,
 *   successful ones included; every attempt costs a lookup and a hash. The default sits above the
 *   inbox's sync limit (600 a minute per device) so that a device within its sync rate is never
 *   stopped here, while one address still cannot cause unbounded lookup and hash work.
 * - `IDENTITY_PEER_WINDOW` (default "1 minute"): the fixed window of that limit.
 * - `TRUSTED_PROXY_HOPS` (default 0): how many reverse proxies we sit behind. 0 means the peer is
 *   the socket address and `X-Forwarded-For` is ignored; n > 0 means the n-th entry from the right
 *   of `X-Forwarded-For`. Setting it higher than the real number of proxies lets clients choose
 *   their own peer key.
 */
export const PeerLimitConfig = Config.all({
  limit: integerBetween(IDENTITY_PEER_LIMIT, 1, 1_000_000, 1200),
  window: positiveDuration(IDENTITY_PEER_WINDOW, Duration.minutes(1)
  ),
  trustedProxyHops: integerBetween(TRUSTED_PROXY_HOPS, 0, 16, 0)
})

/** Seconds, rounded up and at least 1: a client told "0" would retry at once and be refused again. */
export const retryAfterSeconds = (millis: number): number => Math.max(1, Math.ceil(millis / 1000))

// HttpApi encodes declared errors as JSON with their status only; headers that
// belong to the refusal are added to the final response of this request.
export const withHeader = (name: string, value: string) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeader(response, name, value)))

/**
 * The peer-keyed identity limit (spec 000: "Authentication adapters must apply the separate
 * peer-keyed identity limit before expensive credential verification"). Every bearer middleware of
 * this package admits the peer here first, against one counter per peer: a client cannot get a
 * second budget for guessing by switching from API keys to the operator token.
 */
export class PeerLimit extends Context.Tag("@delivery/identity/PeerLimit")<PeerLimit, {
  /** Cheap: a header read and one counter in the limiter's store; no hashing, no database. */
  readonly admit: (
    request: HttpServerRequest.HttpServerRequest
  ) => Effect.Effect<void, IdentityRateLimited | IdentityStorageUnavailable>
}>() {}

/**
 * One fixed-window token for `key`, or the refusal every identity limit answers with: 429 with `Retry-After`
 * when the window is spent, 503 (fail closed) when the limiter's store cannot be reached.
 */
export const consumeOrRefuse = (
  limiter: RateLimiter.RateLimiter,
  options: {
    readonly key: string
    readonly limit: number
    readonly window: Duration.DurationInput
    readonly operation: string
    /** The refusal's label in `delivery_limiter_refusals_total`. */
    readonly reason: LimiterReason
  }
): Effect.Effect<void, IdentityRateLimited | IdentityStorageUnavailable> =>
  limiter.consume({ key: options.key, limit: options.limit, window: options.window, algorithm: "fixed-window", onExceeded: "fail" }).pipe(
    Effect.asVoid,
    Effect.catchAll((error): Effect.Effect<never, IdentityRateLimited | IdentityStorageUnavailable> => {
      if (error.reason === "Exceeded") {
        const retryAfter = Duration.toMillis(error.retryAfter)
        return withHeader("retry-after", String(retryAfterSeconds(retryAfter))).pipe(
          Effect.zipRight(recordLimiterRefusal(options.reason)),
          Effect.zipRight(Effect.fail(new IdentityRateLimited({ retryAfter })))
        )
      }
      // The limiter's store is down: refuse rather than let the guarded work go unbounded.
      return Effect.fail(new IdentityStorageUnavailable({ operation: options.operation }))
    })
  )

const makeWith = <R>(limiterOf: Effect.Effect<RateLimiter.RateLimiter, never, R>) => Effect.gen(function* () {
  const limiter = yield* limiterOf
  const config = yield* PeerLimitConfig
  const admit = (request: HttpServerRequest.HttpServerRequest) =>
    consumeOrRefuse(limiter, {
      key: `identity-peer:${peerOf(request, config.trustedProxyHops)}`,
      limit: config.limit,
      window: config.window,
      operation: "Authentication.peerLimit",
      reason: "identity-peer"
    })
  return PeerLimit.of({ admit })
})

/** The limit with its store left open: provide a shared `RateLimiterStore` (e.g. Redis) for many processes. */
export const peerLimitLayer = Layer.effect(PeerLimit, makeWith(RateLimiter.RateLimiter)).pipe(Layer.provide(RateLimiter.layer))

/**
 * The limit over the process's limit store (memory, or Redis shared by every process: `limitStoreLayer`). If a shared
 * store cannot answer, the peer's window is counted in this process's memory instead: the limit exists to bound the
 * hashing and lookups one peer causes in this process, which a local window still does, where refusing every
 * authentication would make Redis an outage of the whole API (docs/scaling.md). One value, so every middleware layer
 * that provides it shares one instance (layers are memoized by reference in a build).
 */
export const PeerLimitLive = Layer.effect(PeerLimit, makeWith(limiterWithLocalFallback)).pipe(Layer.provide(LimitStoreLive))

/** What the backend lists in its configuration table. */
export const IDENTITY_CONFIG = [
  {
    name: IDENTITY_PEER_LIMIT,
    default: "1200",
    meaning: "authentication attempts (tenant and operator bearers and password sign-ins together) one peer may make per window, successful ones included",
    secret: false
  },
  { name: IDENTITY_PEER_WINDOW, default: "1 minute", meaning: "the fixed window of IDENTITY_PEER_LIMIT", secret: false },
  {
    name: "IDENTITY_SIGNIN_LIMIT",
    default: "10",
    meaning: "password sign-in attempts for one address of one tenant per window, from every peer together",
    secret: false
  },
  { name: "IDENTITY_SIGNIN_WINDOW", default: "15 minutes", meaning: "the fixed window of IDENTITY_SIGNIN_LIMIT", secret: false },
  {
    name: "IDENTITY_SESSION_TTL",
    default: "15 minutes",
    meaning: "how long a session issued by a password sign-in (POST /api/sessions) authenticates",
    secret: false
  },
  {
    name: "PASSWORD_RESET_TOKEN_KEY",
    default: "(unset: reset requests answer 503 `password-reset-unavailable`)",
    meaning: "32 random bytes as base64 (`openssl rand -base64 32`): seals reset tokens (AES-256-GCM) and keys their lookup hash (HMAC-SHA256); every process that serves reset routes or delivers reset mail needs the same value; changing it makes tokens already issued unusable",
    secret: true
  },
  {
    name: "PASSWORD_RESET_TTL",
    default: "1 hour",
    meaning: "how long a password-reset token can complete a reset; delivery never extends it",
    secret: false
  },
  {
    name: TRUSTED_PROXY_HOPS,
    default: "0",
    meaning: "0: the peer is the socket address and X-Forwarded-For is ignored; n (at most 16): the n-th X-Forwarded-For entry from the right (never above the real number of proxies)",
    secret: false
  }
] as const
