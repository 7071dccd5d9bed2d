import { describe, expect, it } from "@effect/vitest"
import { RateLimiter } from "@effect/experimental"
import { freePort, startRedis } from "@delivery/testing"
import { ConfigProvider, Context, Duration, Effect, Either, Layer, Metric, Option, Redacted, Schedule } from "effect"
import {
  LimitStoreConfig,
  LimitStoreInfo,
  limitStoreErrors,
  limitStoreLayer,
  type LimitStoreSettings,
  redisOptionsOf,
  withLocalFallback
} from "../src/LimitStore.ts"

const settingsFor = (url: string, commandTimeout = Duration.millis(250)): LimitStoreSettings => ({
  url: Option.some(Redacted.make(url)),
  prefix: `test:${Math.random().toString(36).slice(2)}:`,
  commandTimeout
})

/** A store and its info, built in the test's scope (each call is one client: one process's view of Redis). */
const buildStore = (settings: LimitStoreSettings) =>
  Effect.map(Layer.build(limitStoreLayer(settings)), (context) => ({
    store: Context.get(context, RateLimiter.RateLimiterStore),
    info: Context.get(context, LimitStoreInfo)
  }))

const limiterOver = (store: RateLimiter.RateLimiterStore["Type"]) =>
  Effect.provide(RateLimiter.make, Layer.succeed(RateLimiter.RateLimiterStore, store))

const consume = (limiter: RateLimiter.RateLimiter, key: string, limit: number) =>
  limiter.consume({ key, limit, window: Duration.minutes(1), algorithm: "fixed-window", onExceeded: "fail" }).pipe(
    Effect.as("granted" as const),
    Effect.catchAll((error) => Effect.succeed(error.reason === "Exceeded" ? "exceeded" as const : "store-error" as const))
  )

const errorCount = Effect.map(Metric.value(limitStoreErrors), (state) => state.count)

const timed = <A, E, R>(self: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.timed(self), ([elapsed, value]) => ({ millis: Duration.toMillis(elapsed), value }))

describe("the limit store (REDIS_URL)", () => {
  it("REDIS_URL takes redis:// and rediss:// URLs with host, port, database and credentials; anything else is refused without echoing the value", () => {
    expect(redisOptionsOf("redis://127.0.0.1:6380/2")).toEqual({ host: "127.0.0.1", port: 6380, db: 2 })
    expect(redisOptionsOf("redis://cache.internal")).toEqual({ host: "cache.internal", port: 6379, db: 0 })
    expect(redisOptionsOf("redis://app:s%40cret@[::1]:7000")).toEqual({ host: "::1", port: 7000, db: 0, username: "app", password: "s@cret" })
    expect(redisOptionsOf("rediss://:pw@cache.example:6380/0")).toEqual({
      host: "cache.example",
      port: 6380,
      db: 0,
      password: "pw",
      tls: { servername: "cache.example" }
    })
    for (const bad of ["", "localhost:6379", "http://127.0.0.1:6379", "redis://", "redis://h/16", "redis://h/x", "redis://h/1/2", "redis://h?db=1", "redis://h#x"]) {
      expect([bad, redisOptionsOf(bad)]).toEqual([bad, undefined])
    }
    const secret = "hunter2-not-echoed"
    const refused = Effect.runSync(Effect.either(LimitStoreConfig.pipe(
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["REDIS_URL", `http://u:${secret}@h`]])))
    )))
    expect(Either.isLeft(refused)).toBe(true)
    const message = String(Either.getLeft(refused).pipe(Option.getOrThrow))
    expect(message).toContain("REDIS_URL")
    expect(message).not.toContain(secret)
  })

  it.effect("without REDIS_URL every limit counts in this process's memory, and says so", () =>
    Effect.gen(function* () {
      const settings = yield* LimitStoreConfig.pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map())))
      const { info, store } = yield* buildStore(settings)
      expect(info).toEqual({ kind: "memory", target: "memory" })
      const limiter = yield* limiterOver(store)
      expect(yield* Effect.all([consume(limiter, "k", 1), consume(limiter, "k", 1)])).toEqual(["granted", "exceeded"])
    }).pipe(Effect.scoped))

  it.scopedLive("shared limit: two clients (two processes' stores) over one Redis enforce one fixed window: of 40 concurrent requests for a limit of 15, exactly 15 are granted; a limit above its window's milliseconds (1,000,000 a minute) counts as well", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis
      const settings = settingsFor(redis.url)
      const first = yield* buildStore(settings)
      const second = yield* buildStore(settings)
      expect(first.info).toEqual({ kind: "redis", target: `redis://127.0.0.1:${redis.port}/0` })
      const limiters = [yield* limiterOver(first.store), yield* limiterOver(second.store)]
      const outcomes = yield* Effect.all(
        Array.from({ length: 40 }, (_, i) => consume(limiters[i % 2]!, "sync:tenant:account:device", 15)),
        { concurrency: "unbounded" }
      )
      expect(outcomes.filter((o) => o === "granted")).toHaveLength(15)
      expect(outcomes.filter((o) => o === "exceeded")).toHaveLength(25)
      // Another key has its own window.
      expect(yield* consume(limiters[1]!, "sync:tenant:account:other", 15)).toBe("granted")
      // A limit above its window's milliseconds (a fractional refill rate) counts too: 1,000,000 a minute.
      expect(yield* Effect.all(Array.from({ length: 5 }, () => consume(limiters[0]!, "peer:many", 1_000_000)))).toEqual(Array(5).fill("granted"))
    }))

  it.scopedLive("start-up: a REDIS_URL that does not answer fails within 5 s with LimitStoreUnavailable naming REDIS_URL and the host, never the password", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const { millis, value } = yield* timed(Effect.either(buildStore(settingsFor(`redis://app:pw-not-shown@127.0.0.1:${port}`))))
      expect(Either.isLeft(value)).toBe(true)
      const error = Either.getLeft(value).pipe(Option.getOrThrow)
      expect(error._tag).toBe("LimitStoreUnavailable")
      expect(error.message).toBe(`REDIS_URL: the limit store redis://127.0.0.1:${port}/0 did not answer within 5s`)
      expect(millis).toBeGreaterThanOrEqual(4_900)
      expect(millis).toBeLessThan(8_000)
    }), { timeout: 20_000 })

  it.scopedLive("outage: a stopped Redis fails each command at once (never held for a reconnect) and counts it in delivery_limit_store_errors; a paused one fails within REDIS_COMMAND_TIMEOUT; a restarted one counts again with the same client", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis
      const { store } = yield* buildStore(settingsFor(redis.url, Duration.millis(300)))
      const limiter = yield* limiterOver(store)
      expect(yield* consume(limiter, "k", 100)).toBe("granted")

      yield* redis.pause
      const paused = yield* timed(consume(limiter, "k", 100))
      expect(paused.value).toBe("store-error")
      expect(paused.millis).toBeGreaterThanOrEqual(250)
      expect(paused.millis).toBeLessThan(1_500)
      yield* redis.resume

      const before = yield* errorCount
      yield* redis.stop
      // Let the client notice the closed connection, then every command fails without waiting.
      yield* Effect.sleep(Duration.millis(200))
      const stopped = yield* timed(Effect.all(Array.from({ length: 20 }, () => consume(limiter, "k", 100))))
      expect(stopped.value.every((o) => o === "store-error")).toBe(true)
      expect(stopped.millis).toBeLessThan(200)
      expect((yield* errorCount) - before).toBe(20)

      // Started again, empty: the client reconnects by itself (its retry delay is at most 1 s) and counts anew.
      yield* redis.start
      const back = yield* consume(limiter, "k", 100).pipe(
        Effect.filterOrFail((o) => o === "granted", () => "not yet"),
        Effect.retry(Schedule.spaced(Duration.millis(100))),
        Effect.timeout(Duration.seconds(10)),
        Effect.either
      )
      expect(back).toEqual(Either.right("granted"))
    }), { timeout: 30_000 })

  it.scopedLive("withLocalFallback: while the shared store cannot answer, this process's own window counts (the limit still refuses past it); once Redis is back the shared window counts again", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis
      const { store: shared } = yield* buildStore(settingsFor(redis.url))
      const local = yield* Effect.provide(RateLimiter.RateLimiterStore, RateLimiter.layerStoreMemory)
      const limiter = yield* limiterOver(withLocalFallback(shared, local))
      const other = yield* limiterOver(shared)
      // Two grants in the shared window, seen by another client too.
      expect(yield* Effect.all([consume(limiter, "peer", 3), consume(limiter, "peer", 3)])).toEqual(["granted", "granted"])
      expect(yield* consume(other, "peer", 3)).toBe("granted")
      expect(yield* consume(other, "peer", 3)).toBe("exceeded")

      yield* redis.stop
      yield* Effect.sleep(Duration.millis(200))
      // The local window is fresh: three grants, then the limit refuses, with no store error surfacing.
      expect(yield* Effect.all(Array.from({ length: 5 }, () => consume(limiter, "peer", 3)))).toEqual([
        "granted",
        "granted",
        "granted",
        "exceeded",
        "exceeded"
      ])

      yield* redis.start
      const back = yield* consume(other, "fresh", 3).pipe(
        Effect.filterOrFail((o) => o === "granted", () => "not yet"),
        Effect.retry(Schedule.spaced(Duration.millis(100))),
        Effect.timeout(Duration.seconds(10)),
        Effect.either
      )
      expect(back).toEqual(Either.right("granted"))
      // The shared window again (Redis restarted empty): the other client's grant is visible to the fallback limiter.
      expect(yield* consume(limiter, "fresh", 3)).toBe("granted")
      expect(yield* consume(other, "fresh", 3)).toBe("granted")
      expect(yield* consume(limiter, "fresh", 3)).toBe("exceeded")
    }), { timeout: 30_000 })
})
