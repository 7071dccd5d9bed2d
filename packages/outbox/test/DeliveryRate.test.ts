import { describe, expect, it } from "@effect/vitest"
import { RateLimiter } from "@effect/experimental"
import { Context, Duration, Effect, Layer, Option, Redacted, TestClock } from "effect"
import { limitStoreLayer } from "@delivery/core"
import { startRedis } from "@delivery/testing"
import { takeUpTo } from "../src/DeliveryRate.ts"

const policy = { key: "tenant-scheduler-delivery:acme", limit: 5, window: Duration.hours(1) }
const memoryStore = RateLimiter.RateLimiterStore.pipe(Effect.provide(RateLimiter.layerStoreMemory))

describe("delivery rate: partial grants through the RateLimiterStore port", () => {
  it.effect("'as many rows as it has tokens': a window with 2 of 5 tokens left grants 2 of 4 wanted, then nothing until it resets", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const store = yield* memoryStore
      expect(yield* takeUpTo(store, { ...policy, wanted: 3 })).toEqual({ granted: 3, exhaustedFor: undefined })
      expect(yield* takeUpTo(store, { ...policy, wanted: 4 })).toEqual({ granted: 2, exhaustedFor: Duration.hours(1) })
      yield* TestClock.adjust("10 minutes")
      expect(yield* takeUpTo(store, { ...policy, wanted: 1 })).toEqual({ granted: 0, exhaustedFor: Duration.minutes(50) })
      yield* TestClock.adjust("50 minutes")
      // Never more than the limit in one grant.
      expect(yield* takeUpTo(store, { ...policy, wanted: 7 })).toEqual({ granted: 5, exhaustedFor: Duration.hours(1) })
    }))

  it.effect("tokens another process takes between a refusal and the next ask are never granted twice (any store keeping the port's contract)", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const shared = yield* memoryStore
      const refillRate = Duration.unsafeDivide(policy.window, policy.limit)
      const rival = (tokens: number) => shared.fixedWindow({ key: policy.key, tokens, refillRate, limit: policy.limit })
      yield* rival(2)
      // After our first (refused) ask, another process sharing the store takes one of the 3 tokens left.
      let calls = 0
      const racing: RateLimiter.RateLimiterStore["Type"] = {
        ...shared,
        fixedWindow: (options) =>
          Effect.tap(shared.fixedWindow(options), () => (++calls === 1 ? rival(1) : Effect.void))
      }
      expect(yield* takeUpTo(racing, { ...policy, wanted: 4 })).toEqual({ granted: 2, exhaustedFor: Duration.hours(1) })
      expect(calls).toBe(3)
      const [count] = yield* rival(1)
      expect(count).toBe(policy.limit + 1)
    }))
  it.effect("three asks at most, then nothing this tick: a rival that takes a token after each refusal leaves the tenant ungranted after exactly three asks, with tokens left for the next tick", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const shared = yield* memoryStore
      const refillRate = Duration.unsafeDivide(policy.window, policy.limit)
      const rival = (tokens: number) => shared.fixedWindow({ key: policy.key, tokens, refillRate, limit: policy.limit })
      yield* rival(1)
      let calls = 0
      const racing: RateLimiter.RateLimiterStore["Type"] = {
        ...shared,
        fixedWindow: (options) => Effect.tap(shared.fixedWindow(options), () => (++calls <= 3 ? rival(1) : Effect.void))
      }
      expect((yield* takeUpTo(racing, { ...policy, wanted: 5 })).granted).toBe(0)
      expect(calls).toBe(3)
      // The window still has one token: the next tick gets it.
      expect(yield* takeUpTo(shared, { ...policy, wanted: 5 })).toEqual({ granted: 1, exhaustedFor: Duration.hours(1) })
    }))

  it.effect("a window a rival fills between our refusal and the next ask is not asked again: nothing granted, the tenant skipped until it resets", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const shared = yield* memoryStore
      const refillRate = Duration.unsafeDivide(policy.window, policy.limit)
      const rival = (tokens: number) => shared.fixedWindow({ key: policy.key, tokens, refillRate, limit: policy.limit })
      yield* rival(3)
      let calls = 0
      const racing: RateLimiter.RateLimiterStore["Type"] = {
        ...shared,
        fixedWindow: (options) => Effect.tap(shared.fixedWindow(options), () => (++calls === 1 ? rival(2) : Effect.void))
      }
      expect(yield* takeUpTo(racing, { ...policy, wanted: 4 })).toEqual({ granted: 0, exhaustedFor: Duration.hours(1) })
      expect(calls).toBe(2)
    }))

  it.effect("nothing wanted asks the store nothing and grants nothing", () =>
    Effect.gen(function*() {
      const shared = yield* memoryStore
      let calls = 0
      const counting: RateLimiter.RateLimiterStore["Type"] = {
        ...shared,
        fixedWindow: (options) => Effect.tap(shared.fixedWindow(options), () => Effect.sync(() => calls++))
      }
      expect((yield* takeUpTo(counting, { ...policy, wanted: 0 })).granted).toBe(0)
      expect(calls).toBe(0)
    }))

  it.scopedLive("one delivery rate per tenant across processes (REDIS_URL): two processes' stores over one real Redis, each asking for 4 rows at a time, are granted 5 tokens in all", () =>
    Effect.gen(function*() {
      const redis = yield* startRedis
      const settings = { url: Option.some(Redacted.make(redis.url)), prefix: "rate-test:", commandTimeout: Duration.millis(250) }
      const storeOf = Effect.map(Layer.build(limitStoreLayer(settings)), (context) => Context.get(context, RateLimiter.RateLimiterStore))
      const stores = [yield* storeOf, yield* storeOf]
      const grants = yield* Effect.all(
        Array.from({ length: 6 }, (_, i) => takeUpTo(stores[i % 2]!, { ...policy, wanted: 4 })),
        { concurrency: "unbounded" }
      )
      expect(grants.reduce((sum, grant) => sum + grant.granted, 0)).toBe(policy.limit)
    }), { timeout: 30_000 })
})
