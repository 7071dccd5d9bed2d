import type { RateLimiter } from "@effect/experimental"
import { HttpServerRequest } from "@effect/platform"
import { Config, Context, Effect, Layer, Option, Redacted } from "effect"
import { timingSafeEqual } from "node:crypto"
import { invalidTokenHeader, requireBearerHeader } from "./BearerHeader.ts"
import { Unauthenticated } from "./Domain.ts"
import { OperatorAccessDisabled, OperatorAuthentication, type OperatorIdentity } from "./OperatorAuthentication.ts"
import { PeerLimit, peerLimitLayer, PeerLimitLive } from "./PeerLimit.ts"
import { digest } from "./Token.ts"

export const OPERATOR_TOKEN = "OPERATOR_TOKEN"

/** Longest token accepted, configured or presented: a bound on the one hash a request may cost. */
export const maxOperatorTokenLength = 512

const TOKEN = new RegExp(`^[\\x21-\\x7e]{32,${maxOperatorTokenLength}}$`)

/**
 * `OPERATOR_TOKEN` (secret, optional): the operator credential. Unset switches operator routes off
 * (fail closed). Set, it must be 32..512 printable ASCII characters without spaces, so a short or
 * accidentally empty value stops start-up instead of becoming a guessable credential. The message
 * never contains the value; its "(value not shown)" ending tells the backend it may print it.
 */
export const OperatorTokenConfig = Config.redacted().pipe(
  Config.validate({
    message: `Expected 32 to ${maxOperatorTokenLength} printable ASCII characters without spaces (value not shown)`,
    validation: (token) => TOKEN.test(Redacted.value(token))
  }),
  Config.nested(OPERATOR_TOKEN),
  Config.option
)

const operator: OperatorIdentity = { kind: "operator", via: "environment" }

/**
 * The operator credential itself, for every way an operator signs in (the bearer middleware, the console's
 * sign-in): whether it is configured, and the constant-time comparison of a presented token. Callers admit the
 * peer against `PeerLimit` first.
 */
export class OperatorCredential extends Context.Tag("@delivery/identity/OperatorCredential")<OperatorCredential, {
  readonly enabled: boolean
  readonly verify: (presented: string) => Effect.Effect<OperatorIdentity, Unauthenticated | OperatorAccessDisabled>
}>() {}

export const OperatorCredentialLive = Layer.effect(
  OperatorCredential,
  Effect.gen(function* () {
    // Only the digest is kept: comparing two 32-byte digests takes the same time whatever the lengths
    // of the configured and presented tokens, so neither length leaks.
    const expected = Option.map(yield* OperatorTokenConfig, (token) => digest(Redacted.value(token)))
    if (Option.isNone(expected)) {
      yield* Effect.logWarning(`${OPERATOR_TOKEN} is not set: operator routes are disabled and refuse every request (403)`)
    }
    const verify = (presented: string): Effect.Effect<OperatorIdentity, Unauthenticated | OperatorAccessDisabled> => {
      if (Option.isNone(expected)) return Effect.fail(new OperatorAccessDisabled({ reason: "operator-routes-disabled" }))
      if (presented.length === 0 || presented.length > maxOperatorTokenLength) {
        return Effect.fail(new Unauthenticated({ reason: "malformed" }))
      }
      if (!timingSafeEqual(digest(presented), expected.value)) return Effect.fail(new Unauthenticated({ reason: "unknown" }))
      return Effect.succeed(operator)
    }
    return { enabled: Option.isSome(expected), verify }
  })
)

const make = Effect.gen(function* () {
  const peers = yield* PeerLimit
  const credential = yield* OperatorCredential

  const operatorBearer = Effect.fn("OperatorAuthentication.bearer")(function* (token: Redacted.Redacted<string>) {
    const request = yield* HttpServerRequest.HttpServerRequest
    yield* peers.admit(request)
    if (!credential.enabled) return yield* new OperatorAccessDisabled({ reason: "operator-routes-disabled" })
    yield* requireBearerHeader(request)
    return yield* credential.verify(Redacted.value(token)).pipe(
      Effect.tapErrorTag("Unauthenticated", () => invalidTokenHeader)
    )
  })

  return OperatorAuthentication.of({ operatorBearer })
})

/** The middleware with the limiter store left open (shared with `authenticationLayer` when both get one store). */
export const operatorAuthenticationLayer: Layer.Layer<
  OperatorAuthentication,
  Layer.Layer.Error<typeof peerLimitLayer>,
  RateLimiter.RateLimiterStore
> = Layer.effect(OperatorAuthentication, make).pipe(Layer.provide(peerLimitLayer), Layer.provide(OperatorCredentialLive))

/** In-process limiter store, the same `PeerLimitLive` instance `AuthenticationLive` uses. */
export const OperatorAuthenticationLive = Layer.effect(OperatorAuthentication, make).pipe(
  Layer.provide(PeerLimitLive),
  Layer.provide(OperatorCredentialLive)
)

/** What the backend lists in its configuration table. */
export const OPERATOR_CONFIG = [
  {
    name: OPERATOR_TOKEN,
    default: "(unset: operator routes disabled, every request refused with 403)",
    meaning: `bearer token of the operator routes under /operator (32-${maxOperatorTokenLength} printable ASCII characters); only its SHA-256 is kept in memory`,
    secret: true
  }
] as const
