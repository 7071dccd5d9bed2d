import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Option, Random, Ref, Schedule, TestClock } from "effect"
import { Backoff } from "../src/index.ts"

const exact = Backoff.make({ base: "100 millis", cap: "5 seconds", jitter: 0 })
const jittered = Backoff.make({ base: "1 second", cap: "1 minute", jitter: 0.3 })

const millis = (d: Duration.Duration) => Duration.toMillis(d)

describe("Backoff", () => {
  it.effect("grows exponentially from base and stops at the cap", () =>
    Effect.gen(function*() {
      const delays = yield* Effect.forEach([1, 2, 3, 4, 5, 6, 7, 8, 100], (n) => Backoff.delayFor(exact, n))
      expect(delays.map(millis)).toEqual([100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000])
    }))

  it.effect("stays at the cap for huge or odd attempt numbers", () =>
    Effect.gen(function*() {
      for (const attempt of [1024, 1025, 5000, Number.MAX_SAFE_INTEGER, Number.POSITIVE_INFINITY]) {
        expect(millis(yield* Backoff.delayFor(exact, attempt))).toBe(5000)
        expect(millis(yield* Backoff.delayFor(jittered, attempt))).toBeLessThanOrEqual(60_000)
      }
      // Attempts below 1 are treated as the first retry.
      expect(millis(yield* Backoff.delayFor(exact, 0))).toBe(100)
      expect(millis(yield* Backoff.delayFor(exact, -3))).toBe(100)
      expect(millis(yield* Backoff.delayFor(exact, Number.NaN))).toBe(5000)
    }))

  it.effect("jitter stays within [d*(1-jitter), d] over many seeded samples", () =>
    Effect.gen(function*() {
      for (const seed of [1, 42, "outbox", 9_999]) {
        const samples = yield* Effect.forEach(
          Array.from({ length: 500 }, (_, i) => (i % 8) + 1),
          (attempt) => Effect.map(Backoff.delayFor(jittered, attempt), (d) => ({ attempt, ms: millis(d) }))
        ).pipe(Effect.withRandom(Random.make(seed)))
        for (const { attempt, ms } of samples) {
          const ceiling = Math.min(60_000, 1000 * 2 ** (attempt - 1))
          expect(ms).toBeGreaterThanOrEqual(ceiling * 0.7)
          expect(ms).toBeLessThanOrEqual(ceiling)
        }
        // Jitter actually spreads the delays instead of always picking one end.
        const firsts = new Set(samples.filter((s) => s.attempt === 1).map((s) => s.ms))
        expect(firsts.size).toBeGreaterThan(20)
      }
    }))

  it.effect("full jitter never goes negative and never exceeds the cap", () =>
    Effect.gen(function*() {
      const full = Backoff.make({ base: "10 millis", cap: "1 second", jitter: 1 })
      const samples = yield* Effect.forEach(Array.from({ length: 1000 }, (_, i) => i + 1), (n) =>
        Backoff.delayFor(full, n)).pipe(Effect.withRandom(Random.make(7)))
      for (const d of samples) {
        expect(millis(d)).toBeGreaterThanOrEqual(0)
        expect(millis(d)).toBeLessThanOrEqual(1000)
      }
    }))

  it.effect("the same seed gives the same delays", () =>
    Effect.gen(function*() {
      // Random.make is stateful, so each run gets a fresh generator from the same seed.
      const run = (seed: number) =>
        Effect.forEach([1, 2, 3, 4], (n) => Backoff.delayFor(jittered, n)).pipe(
          Effect.map((ds) => ds.map(millis)),
          Effect.withRandom(Random.make(seed))
        )
      const first = yield* run(123)
      expect(yield* run(123)).toEqual(first)
      expect(yield* run(124)).not.toEqual(first)
    }))

  it("refuses a misconfigured policy", () => {
    expect(() => Backoff.make({ base: 0, cap: "1 second", jitter: 0 })).toThrow(RangeError)
    expect(() => Backoff.make({ base: "2 seconds", cap: "1 second", jitter: 0 })).toThrow(RangeError)
    expect(() => Backoff.make({ base: "1 second", cap: Duration.infinity, jitter: 0 })).toThrow(RangeError)
    expect(() => Backoff.make({ base: "1 second", cap: "2 seconds", jitter: 1.5 })).toThrow(RangeError)
    expect(() => Backoff.make({ base: "1 second", cap: "2 seconds", jitter: Number.NaN })).toThrow(RangeError)
  })

  it.effect("nextAttemptAt adds the delay to the Clock's now (TestClock)", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.UTC(2025, 0, 1, 12, 0, 0))
      expect((yield* Backoff.nextAttemptAt(exact, 1)).toISOString()).toBe("2025-01-01T12:00:00.100Z")
      expect((yield* Backoff.nextAttemptAt(exact, 4)).toISOString()).toBe("2025-01-01T12:00:00.800Z")
      yield* TestClock.adjust("1 hour")
      expect((yield* Backoff.nextAttemptAt(exact, 50)).toISOString()).toBe("2025-01-01T13:00:05.000Z")
      const at = yield* Backoff.nextAttemptAt(jittered, 3).pipe(Effect.withRandom(Random.make(5)))
      const delta = at.getTime() - Date.UTC(2025, 0, 1, 13, 0, 0)
      expect(delta).toBeGreaterThanOrEqual(2800)
      expect(delta).toBeLessThanOrEqual(4000)
    }))

  it.effect("the Schedule waits the backoff delays between in-process retries", () =>
    Effect.gen(function*() {
      const calls = yield* Ref.make<Array<number>>([])
      const failing = Effect.flatMap(Effect.clockWith((c) => c.currentTimeMillis), (t) =>
        Ref.update(calls, (xs) => [...xs, t])).pipe(Effect.zipRight(Effect.fail("temporary")))
      const fiber = yield* Effect.fork(
        Effect.retry(failing, Backoff.schedule(exact).pipe(Schedule.intersect(Schedule.recurs(4))))
      )
      yield* TestClock.adjust("10 seconds")
      const exit = yield* Fiber.await(fiber)
      expect(exit._tag).toBe("Failure")
      expect(yield* Ref.get(calls)).toEqual([0, 100, 300, 700, 1500])
    }))
})

describe("Backoff.retryAfterWithin", () => {
  const bounds = { min: "1 second", max: "10 minutes" } as const
  const at = (value: string | undefined) =>
    Backoff.retryAfterWithin(value, bounds).pipe(Effect.map(Option.map(millis)))

  it.effect("reads delta-seconds and clamps them to [min, max]", () =>
    Effect.gen(function*() {
      expect(yield* at("120")).toEqual(Option.some(120_000))
      expect(yield* at(" 5 ")).toEqual(Option.some(5_000))
      expect(yield* at("0")).toEqual(Option.some(1_000))
      expect(yield* at("86400")).toEqual(Option.some(600_000))
      expect(yield* at("9".repeat(400))).toEqual(Option.some(600_000))
    }))

  it.effect("reads HTTP-dates relative to the Clock", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.UTC(2015, 9, 21, 7, 28, 0))
      expect(yield* at("Wed, 21 Oct 2015 07:30:00 GMT")).toEqual(Option.some(120_000))
      expect(yield* at("Wednesday, 21-Oct-15 07:29:00 GMT")).toEqual(Option.some(60_000))
      expect(yield* at("Wed Oct 21 07:28:30 2015")).toEqual(Option.some(30_000))
      // A date in the past means "now", which the lower bound then holds back.
      expect(yield* at("Tue, 20 Oct 2015 07:30:00 GMT")).toEqual(Option.some(1_000))
      expect(yield* at("Sun, 21 Oct 2035 07:30:00 GMT")).toEqual(Option.some(600_000))
    }))

  it.effect("garbage, negative and fractional values are none", () =>
    Effect.gen(function*() {
      for (
        const value of [
          undefined,
          "",
          "   ",
          "soon",
          "-5",
          "1.5",
          "1e3",
          "0x10",
          "12 s",
          "Wed, 31 Feb 2015 07:30:00 GMT",
          "Wed, 21 Foo 2015 07:30:00 GMT",
          "Wed, 21 Oct 2015 25:30:00 GMT",
          "2015-10-21T07:30:00Z",
          "Wed, 21 Oct 2015 07:30:00 PST"
        ]
      ) {
        expect(yield* at(value)).toEqual(Option.none())
      }
    }))
})
