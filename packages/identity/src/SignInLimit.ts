import { Canonical, integerBetween, LimitStoreLive, positiveDuration } from "@delivery/core"
import { RateLimiter } from "@effect/experimental"
import { Config, Context, Duration, Effect, Layer } from "effect"
import type { Email, IdentityRateLimited, IdentityStorageUnavailable, TenantId } from "./Domain.ts"
import { consumeOrRefuse } from "./PeerLimit.ts"

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
    `identity-signin:${tenant}:${Canonical.sha256Hex(email)}`
  const admit = (tenant: TenantId, email: Email) =>
    consumeOrRefuse(limiter, { key: keyOf(tenant, email), limit: config.limit, window: config.window, operation: "SignIn.addressLimit", reason: "identity-signin" })
  return SignInLimit.of({ admit })
})

/**
 * Over the process's limit store (memory, or Redis shared by every process). A shared store that cannot answer
 * refuses sign-ins with 503 (fail closed): this limit is a guessing budget per address, which one window per
 * process would multiply (docs/scaling.md).
 */
export const SignInLimitLive = Layer.effect(SignInLimit, make).pipe(Layer.provide(RateLimiter.layer), Layer.provide(LimitStoreLive))
