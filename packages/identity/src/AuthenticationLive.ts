import type { RateLimiter } from "@effect/experimental"
import { HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Option, type Redacted } from "effect"
import { AuthenticatedRequest, Authentication } from "./Authentication.ts"
import { invalidTokenHeader, requireBearerHeader } from "./BearerHeader.ts"
import { Identity } from "./Identity.ts"
import { PeerLimit, peerLimitLayer, PeerLimitLive } from "./PeerLimit.ts"

const make = Effect.gen(function* () {
  const identity = yield* Identity
  const peers = yield* PeerLimit

  // Order (spec 000): the peer limit, then the header, and only then a lookup and a hash.
  const bearer = Effect.fn("Authentication.bearer")(function* (token: Redacted.Redacted<string>) {
    const request = yield* HttpServerRequest.HttpServerRequest
    yield* peers.admit(request)
    yield* requireBearerHeader(request)
    const verified = yield* identity.authenticate(token).pipe(
      Effect.tapErrorTag("Unauthenticated", () => invalidTokenHeader)
    )
    const note = yield* Effect.serviceOption(AuthenticatedRequest)
    if (Option.isSome(note)) note.value.identity = verified
    return verified
  })

  return Authentication.of({ bearer })
})

/** The middleware with the limiter store left open: provide a shared store (e.g. Redis) for many processes. */
export const authenticationLayer: Layer.Layer<
  Authentication,
  Layer.Layer.Error<typeof peerLimitLayer>,
  Identity | RateLimiter.RateLimiterStore
> = Layer.effect(Authentication, make).pipe(Layer.provide(peerLimitLayer))

/**
 * The middleware with an in-process limiter store: each backend process counts its own peers.
 * `PeerLimitLive` is shared with `OperatorAuthenticationLive`, so both count against one budget.
 */
export const AuthenticationLive = Layer.effect(Authentication, make).pipe(Layer.provide(PeerLimitLive))
