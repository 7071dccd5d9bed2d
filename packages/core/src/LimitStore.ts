import { RateLimiter } from "@effect/experimental"
import { ConfigError, Effect, Layer, Metric, Option } from "effect"
import {
  LimitStoreConfig,
  LimitStoreInfo,
  type LimitStoreSettings,
  LimitStoreUnavailable,
  limitStoreUp
} from "./LimitStoreConfig.ts"
import { makeRedisStore } from "./RedisLimitStore.ts"

export * from "./LimitStoreConfig.ts"

/**
 * The one `RateLimiterStore` every limit of the process counts in: Redis with REDIS_URL (one limit across every
 * process sharing it), otherwise this process's memory. Fails start-up when REDIS_URL does not answer.
 */
export const limitStoreLayer = (settings: LimitStoreSettings): Layer.Layer<
  RateLimiter.RateLimiterStore | LimitStoreInfo,
  LimitStoreUnavailable
> =>
  Option.match(settings.url, {
    onNone: () =>
      Layer.merge(
        RateLimiter.layerStoreMemory,
        Layer.effect(LimitStoreInfo, Effect.as(Metric.set(limitStoreUp, 1), LimitStoreInfo.of({ kind: "memory", target: "memory" })))
      ),
    onSome: (url) =>
      Layer.unwrapScoped(
        Effect.map(makeRedisStore(url, settings), ({ info, store }) =>
          Layer.merge(Layer.succeed(RateLimiter.RateLimiterStore, store), Layer.succeed(LimitStoreInfo, info)))
      )
  })

const isStoreError = (error: RateLimiter.RateLimiterError) => error.reason === "StoreError"

/**
 * The process's one limit store from REDIS_URL and its companions. One value: every package layer that provides it
 * gets the same instance within a build (layers are memoized by reference), so a process holds one Redis client.
 */
export const LimitStoreLive: Layer.Layer<
  RateLimiter.RateLimiterStore | LimitStoreInfo,
  LimitStoreUnavailable | ConfigError.ConfigError
> = Layer.unwrapEffect(Effect.map(LimitStoreConfig, limitStoreLayer))

/**
 * A store that counts in `primary` and, for each command `primary` cannot run, in `local` (this process's own
 * window). For a limit whose purpose is to bound this process's work, a shared store's outage then loosens the limit
 * to one window per process instead of lifting it or refusing everyone.
 */
export const withLocalFallback = (
  primary: RateLimiter.RateLimiterStore["Type"],
  local: RateLimiter.RateLimiterStore["Type"]
): RateLimiter.RateLimiterStore["Type"] =>
  RateLimiter.RateLimiterStore.of({
    fixedWindow: (request) => Effect.catchIf(primary.fixedWindow(request), isStoreError, () => local.fixedWindow(request)),
    tokenBucket: (request) => Effect.catchIf(primary.tokenBucket(request), isStoreError, () => local.tokenBucket(request))
  })

/**
 * A `RateLimiter` of its own over `withLocalFallback(the store in context, a fresh memory store)`. Not a layer on
 * purpose: `RateLimiter.layer` is one value, memoized across a build, so a fallback store provided under it would
 * leak into (or miss) every other limit built from it.
 */
export const limiterWithLocalFallback: Effect.Effect<RateLimiter.RateLimiter, never, RateLimiter.RateLimiterStore> = Effect.gen(
  function* () {
    const primary = yield* RateLimiter.RateLimiterStore
    const local = yield* Effect.provide(RateLimiter.RateLimiterStore, RateLimiter.layerStoreMemory)
    return yield* Effect.provideService(RateLimiter.make, RateLimiter.RateLimiterStore, withLocalFallback(primary, local))
  }
)
