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

  it("refuses a misconfigured policy with a message naming the rule it breaks", () => {
    const range = "Backoff needs 0 < base <= cap < infinity"
    expect(() => Backoff.make({ base: 0, cap: "1 second", jitter: 0 })).toThrow(new RangeError(range))
    expect(() => Backoff.make({ base: "2 seconds", cap: "1 second", jitter: 0 })).toThrow(new RangeError(range))
    expect(() => Backoff.make({ base: "1 second", cap: Duration.infinity, jitter: 0 })).toThrow(new RangeError(range))
    const fraction = "Backoff jitter must be a fraction in [0, 1]"
    for (const jitter of [-0.1, -1, 1.5, Number.NaN]) {
      expect(() => Backoff.make({ base: "1 second", cap: "2 seconds", jitter })).toThrow(new RangeError(fraction))
    }
    // The bounds themselves are valid: no jitter, full jitter, and a cap equal to the base.
    for (const jitter of [0, 1]) expect(Backoff.make({ base: "1 second", cap: "1 second", jitter }).jitter).toBe(jitter)
  })

  it("ceilingFor is the delay before jitter, min(cap, base * 2^(attempt-1)): the most delayFor can give", () => {
    expect([1, 2, 3, 6, 7, 100, 0, Number.POSITIVE_INFINITY].map((n) => millis(Backoff.ceilingFor(exact, n)))).toEqual(
      [100, 200, 400, 3200, 5000, 5000, 100, 5000]
    )
    expect(millis(Backoff.ceilingFor(jittered, 3))).toBe(4000)
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
  const at = (value: string | null | undefined) =>
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
      // RFC 9110's 50-year rule: one second more than 50 years ahead is the previous century, so the past.
      expect(yield* at("Wednesday, 21-Oct-65 07:28:00 GMT")).toEqual(Option.some(600_000))
      expect(yield* at("Thursday, 21-Oct-65 07:28:01 GMT")).toEqual(Option.some(1_000))
    }))

  it.effect("garbage, negative and fractional values are none", () =>
    Effect.gen(function*() {
      for (
        const value of [
          undefined,
          null,
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

describe("Backoff.parseHttpDate (RFC 9110 section 5.6.7)", () => {
  const NOW = Date.parse("2025-10-21T07:28:00Z")
  const parse = (value: string, now = NOW) => Option.getOrUndefined(Backoff.parseHttpDate(value, now))
  const iso = (value: string, now = NOW) => {
    const millis = parse(value, now)
    return millis === undefined ? undefined : new Date(millis).toISOString()
  }

  it("IMF-fixdate: every month name, from the 1st to the last day of each month", () => {
    for (let month = 0; month < 12; month++) {
      for (const at of [Date.UTC(2024, month, 1), Date.UTC(2024, month + 1, 0, 23, 59, 59)]) {
        // toUTCString writes IMF-fixdate ("Mon, 01 Jan 2024 00:00:00 GMT").
        const text = new Date(at).toUTCString()
        expect([text, parse(text)]).toEqual([text, at])
      }
    }
  })

  it("a date that does not exist is none: day 00 or 32, the 31st of a 30-day month, 29 Feb outside a leap year", () => {
    for (
      const value of [
        "Mon, 00 Jan 2024 00:00:00 GMT",
        "Fri, 32 Jan 2024 00:00:00 GMT",
        "Thu, 31 Apr 2025 00:00:00 GMT",
        "Tue, 31 Jun 2025 00:00:00 GMT",
        "Wed, 31 Sep 2025 00:00:00 GMT",
        "Mon, 31 Nov 2025 00:00:00 GMT",
        "Sat, 29 Feb 2025 00:00:00 GMT"
      ]
    ) {
      expect([value, parse(value)]).toEqual([value, undefined])
    }
    expect(iso("Thu, 29 Feb 2024 12:00:00 GMT")).toBe("2024-02-29T12:00:00.000Z")
    expect(iso("Wed, 31 Dec 2025 00:00:00 GMT")).toBe("2025-12-31T00:00:00.000Z")
  })

  it("23:59:59 is the last second of a day and 23:59:60 (a leap second) reads as 23:59:59; 24:00:00, minute 60 and second 61 are none", () => {
    expect(iso("Tue, 30 Jun 2015 23:59:59 GMT")).toBe("2015-06-30T23:59:59.000Z")
    expect(iso("Tue, 30 Jun 2015 23:59:60 GMT")).toBe("2015-06-30T23:59:59.000Z")
    expect(iso("Tue, 30 Jun 2015 00:00:00 GMT")).toBe("2015-06-30T00:00:00.000Z")
    for (
      const value of [
        "Tue, 30 Jun 2015 24:00:00 GMT",
        "Tue, 30 Jun 2015 07:60:00 GMT",
        "Tue, 30 Jun 2015 07:59:61 GMT",
        "Tue, 30 Jun 2015 07:99:00 GMT",
        "Tue, 30 Jun 2015 07:00:99 GMT"
      ]
    ) {
      expect([value, parse(value)]).toEqual([value, undefined])
    }
  })

  it("the years 0 to 99 of a four-digit year are those years, not 1900 to 1999", () => {
    expect(iso("Mon, 01 Jan 0001 00:00:00 GMT")).toBe("0001-01-01T00:00:00.000Z")
    expect(parse("Mon, 01 Jan 0001 00:00:00 GMT")).toBe(Date.parse("0001-01-01T00:00:00Z"))
    expect(iso("Mon Jan 01 00:00:00 0099")).toBe("0099-01-01T00:00:00.000Z")
  })

  it("asctime: a one-digit day is written after a space ('Thu Oct  1 07:28:30 2015')", () => {
    expect(iso("Thu Oct  1 07:28:30 2015")).toBe("2015-10-01T07:28:30.000Z")
    expect(iso("Wed Oct 21 07:28:30 2015")).toBe("2015-10-21T07:28:30.000Z")
    expect(parse("Thu Oct 1 07:28:30 2015")).toBeUndefined()
    expect(parse("Thu Oct x1 07:28:30 2015")).toBeUndefined()
  })

  it("leading or trailing garbage around any of the three forms is none; surrounding whitespace is not garbage", () => {
    const forms = ["Wed, 21 Oct 2015 07:28:00 GMT", "Wednesday, 21-Oct-15 07:28:00 GMT", "Wed Oct 21 07:28:00 2015"]
    for (const form of forms) {
      expect([form, iso(form)]).toEqual([form, "2015-10-21T07:28:00.000Z"])
      expect([form, iso(` \t${form}\t `)]).toEqual([form, "2015-10-21T07:28:00.000Z"])
      for (const garbled of [`x${form}`, `${form}x`, `0${form}`, `${form}0`, `${form};`, `<${form}>`]) {
        expect([garbled, parse(garbled)]).toEqual([garbled, undefined])
      }
    }
  })

  it("RFC 9110: a two-digit year more than 50 years ahead means the previous century; 50 years ahead or less is ahead", () => {
    // Now is 21 Oct 2025 07:28:00 UTC.
    expect(iso("Sunday, 06-Nov-94 08:49:37 GMT")).toBe("1994-11-06T08:49:37.000Z")
    expect(iso("Wednesday, 21-Oct-15 07:28:00 GMT")).toBe("2015-10-21T07:28:00.000Z")
    expect(iso("Tuesday, 21-Oct-25 07:28:00 GMT")).toBe("2025-10-21T07:28:00.000Z")
    expect(iso("Wednesday, 01-Jan-25 00:00:00 GMT")).toBe("2025-01-01T00:00:00.000Z")
    expect(iso("Monday, 21-Oct-30 07:28:00 GMT")).toBe("2030-10-21T07:28:00.000Z")
    expect(iso("Friday, 01-Jan-75 00:00:00 GMT")).toBe("2075-01-01T00:00:00.000Z")
    expect(iso("Monday, 21-Oct-75 07:28:00 GMT")).toBe("2075-10-21T07:28:00.000Z")
    expect(iso("Tuesday, 21-Oct-75 07:28:01 GMT")).toBe("1975-10-21T07:28:01.000Z")
    expect(iso("Wednesday, 31-Dec-75 23:59:59 GMT")).toBe("1975-12-31T23:59:59.000Z")
    expect(iso("Friday, 01-Jan-76 00:00:00 GMT")).toBe("1976-01-01T00:00:00.000Z")
    // 2100 has no 29 Feb, but it is more than 50 years ahead anyway: the date is 29 Feb 2000.
    expect(iso("Tuesday, 29-Feb-00 12:00:00 GMT")).toBe("2000-02-29T12:00:00.000Z")
  })

  it("RFC 9110's 50-year rule slides with the Clock: in 2060, '05' is 2105 (45 years ahead) and '11' is 2011", () => {
    const in2060 = Date.parse("2060-06-01T00:00:00Z")
    expect(iso("Thursday, 01-Jan-05 00:00:00 GMT", in2060)).toBe("2105-01-01T00:00:00.000Z")
    expect(iso("Saturday, 01-Jan-11 00:00:00 GMT", in2060)).toBe("2011-01-01T00:00:00.000Z")
    expect(iso("Tuesday, 01-Jun-10 00:00:00 GMT", in2060)).toBe("2110-06-01T00:00:00.000Z")
    expect(iso("Sunday, 01-Jun-10 00:00:01 GMT", in2060)).toBe("2010-06-01T00:00:01.000Z")
    expect(iso("Monday, 01-Jan-60 00:00:00 GMT", in2060)).toBe("2060-01-01T00:00:00.000Z")
  })
})
