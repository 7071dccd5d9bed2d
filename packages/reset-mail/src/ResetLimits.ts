import { Canonical, LimitStoreLive, requestCorrelationId } from "@delivery/core"
import { consumeOrRefuse, type Email, peerOf, PeerLimitConfig, retryAfterSeconds, type TenantId } from "@delivery/identity"
import { RateLimiter } from "@effect/experimental"
import type { HttpServerRequest } from "@effect/platform"
import { Context, Effect, Layer } from "effect"
import { ResetRateLimited, ResetUnavailable } from "./Api.ts"
import { ResetRequestConfig } from "./ResetMailConfig.ts"

/**
 * Reset requests and completions, per source (the peer, as the identity limit finds it behind
 * TRUSTED_PROXY_HOPS proxies) and, for requests, per address of a tenant across sources, so one address cannot
 * be flooded with mail from many peers. The address is hashed: a limiter store never holds addresses.
 */
export class ResetLimits extends Context.Tag("@delivery/reset-mail/ResetLimits")<ResetLimits, {
  readonly admitSource: (request: HttpServerRequest.HttpServerRequest) => Effect.Effect<void, ResetRateLimited | ResetUnavailable>
  readonly admitAddress: (tenant: TenantId, email: Email) => Effect.Effect<void, ResetRateLimited | ResetUnavailable>
}>() {}

const make = Effect.gen(function* () {
  const limiter = yield* RateLimiter.RateLimiter
  const config = yield* ResetRequestConfig
  const { trustedProxyHops } = yield* PeerLimitConfig
  const consume = (
    key: string,
    limit: number,
    window: typeof config.sourceWindow,
    operation: string,
    reason: "password-reset-source" | "password-reset-address"
  ) =>
    consumeOrRefuse(limiter, { key, limit, window, operation, reason }).pipe(
      Effect.catchTags({
        IdentityRateLimited: (error) =>
          Effect.flatMap(requestCorrelationId, (correlationId) =>
            Effect.fail(new ResetRateLimited({ reason: "rate-limited", retryAfterSeconds: retryAfterSeconds(error.retryAfter), correlationId }))),
        IdentityStorageUnavailable: () =>
          Effect.flatMap(requestCorrelationId, (correlationId) =>
            Effect.fail(new ResetUnavailable({ reason: "storage-unavailable", correlationId })))
      })
    )
  return ResetLimits.of({
    admitSource: (request) =>
      consume(`password-reset-source:${peerOf(request, trustedProxyHops)}`, config.sourceLimit, config.sourceWindow, "PasswordReset.sourceLimit", "password-reset-source"),
    admitAddress: (tenant, email) =>
      consume(
        `password-reset-address:${tenant}:${Canonical.sha256Hex(email)}`,
        config.addressLimit,
        config.addressWindow,
        "PasswordReset.addressLimit",
        "password-reset-address"
      )
  })
})

/**
 * Over the process's limit store (memory, or Redis shared by every process). A shared store that cannot answer
 * refuses with 503 `storage-unavailable` (fail closed): these limits are mail budgets per source and per address,
 * which one window per process would multiply (docs/scaling.md).
 */
export const ResetLimitsLive = Layer.effect(ResetLimits, make).pipe(Layer.provide(RateLimiter.layer), Layer.provide(LimitStoreLive))
