import { integerBetween, positiveDuration } from "@delivery/core"
import { RateLimiter } from "@effect/experimental"
import { Config, Context, Duration, Effect, Layer } from "effect"
import { createHash } from "node:crypto"
import type { Email, TenantId } from "./Domain.ts"
import { IdentityRateLimited, IdentityStorageUnavailable } from "./Domain.ts"
import { retryAfterSeconds, withHeader } from "./PeerLimit.ts"

export const IDENTITY_SIGNIN_LIMIT = "IDENTITY_SIGNIN_LIMIT"
export const IDENTITY_SIGNIN_WINDOW = "IDENTITY_SIGNIN_WINDOW"

/**
 * Sign-in attempts for one address of one tenant, from every peer together: the per-peer limit alone lets
 * many peers share the guessing of one password.
 */
export const SignInLimitConfig = Config.all({
  limit: integerBetween(IDENTITY_SIGNIN_LIMIT, 1, 1_000_000, 10),
  window: positiveDuration(IDENTITY_SIGNIN_WINDOW, Duration.minutes(15))
})

export class SignInLimit extends Context.Tag("@delivery/identity/SignInLimit")<SignInLimit, {
  readonly admit: (tenant: TenantId, email: Email) => Effect.Effect<void, IdentityRateLimited | IdentityStorageUnavailable>
}>() {}

const make = Effect.gen(function* () {
  const limiter = yield* RateLimiter.RateLimiter
  const config = yield* SignInLimitConfig
  // The address is hashed so that a limiter store (Redis, say) never holds e-mail addresses.
  const keyOf = (tenant: TenantId, email: Email) =>
    `identity-signin:${tenant}:${createHash("sha256").update(email, "utf8").digest("hex")}`
  const admit = (tenant: TenantId, email: Email) =>
    limiter.consume({ key: keyOf(tenant, email), limit: config.limit, window: config.window, algorithm: "fixed-window", onExceeded: "fail" }).pipe(
      Effect.asVoid,
      Effect.catchAll((error): Effect.Effect<never, IdentityRateLimited | IdentityStorageUnavailable> => {
        if (error.reason === "Exceeded") {
          const retryAfter = Duration.toMillis(error.retryAfter)
          return withHeader("retry-after", String(retryAfterSeconds(retryAfter))).pipe(
            Effect.zipRight(Effect.fail(new IdentityRateLimited({ retryAfter })))
          )
        }
        // The store is down: refuse (fail closed) rather than let guessing go unbounded.
        return Effect.fail(new IdentityStorageUnavailable({ operation: "SignIn.addressLimit" }))
      })
    )
  return SignInLimit.of({ admit })
})

/** Over an in-process store: each backend process counts its own attempts (docs/operations.md). */
export const SignInLimitLive = Layer.effect(SignInLimit, make).pipe(
  Layer.provide(RateLimiter.layer),
  Layer.provide(RateLimiter.layerStoreMemory)
)
