import { Clock, Duration, Effect, Option, Random, Schedule } from "effect"

/**
 * Capped exponential backoff with bounded jitter: the one retry-delay rule of
 * every durable worker. Time and randomness come from Effect's `Clock` and
 * `Random`, so tests drive them with `TestClock` and a seeded `Random`.
 */
export interface Backoff {
  readonly base: Duration.Duration
  readonly cap: Duration.Duration
  /** Fraction (0..1) of the exponential delay that may be taken off at random. */
  readonly jitter: number
}

export const make = (options: {
  readonly base: Duration.DurationInput
  readonly cap: Duration.DurationInput
  readonly jitter: number
}): Backoff => {
  const base = Duration.decode(options.base)
  const cap = Duration.decode(options.cap)
  // A misconfigured policy is a programming error found at start-up, not an outcome.
  if (!Duration.isFinite(cap) || Duration.toMillis(base) <= 0 || Duration.lessThan(cap, base)) {
    throw new RangeError("Backoff needs 0 < base <= cap < infinity")
  }
  if (!(options.jitter >= 0 && options.jitter <= 1)) {
    throw new RangeError("Backoff jitter must be a fraction in [0, 1]")
  }
  return { base, cap, jitter: options.jitter }
}

// Attempts past 2^1023 overflow to Infinity, which min() turns into the cap,
// so very large attempt counters stay well-defined.
const ceilingMillis = (backoff: Backoff, attempt: number): number => {
  const exponent = Number.isFinite(attempt) ? Math.min(Math.max(Math.floor(attempt), 1) - 1, 1023) : 1023
  return Math.min(Duration.toMillis(backoff.cap), Duration.toMillis(backoff.base) * 2 ** exponent)
}

/** The delay before retry number `attempt` without jitter: min(cap, base * 2^(attempt-1)). */
export const ceilingFor = (backoff: Backoff, attempt: number): Duration.Duration =>
  Duration.millis(ceilingMillis(backoff, attempt))

/**
 * The delay before retry number `attempt` (1 = first retry), uniformly within
 * [d * (1 - jitter), d] where d = min(cap, base * 2^(attempt-1)); jitter only
 * ever shortens the delay, so it never exceeds the cap and never goes negative.
 */
export const delayFor = (backoff: Backoff, attempt: number): Effect.Effect<Duration.Duration> =>
  Effect.map(Random.next, (r) => {
    const ceiling = ceilingMillis(backoff, attempt)
    const floor = ceiling * (1 - backoff.jitter)
    const millis = Math.min(ceiling, Math.max(floor, Math.round(ceiling - ceiling * backoff.jitter * r)))
    return Duration.millis(millis)
  })

/** When retry number `attempt` becomes due, measured from the Clock's now. */
export const nextAttemptAt = (backoff: Backoff, attempt: number): Effect.Effect<Date> =>
  Effect.zipWith(
    Clock.currentTimeMillis,
    delayFor(backoff, attempt),
    (now, delay) => new Date(now + Duration.toMillis(delay))
  )

/**
 * The same policy as an in-process retry `Schedule`; its output is the number
 * of the retry about to run. Bound it yourself, e.g. with `Schedule.recurs`.
 */
export const schedule = (backoff: Backoff): Schedule.Schedule<number> =>
  Schedule.forever.pipe(
    Schedule.map((n) => n + 1),
    Schedule.addDelayEffect((attempt) => delayFor(backoff, attempt))
  )

const DELTA_SECONDS = /^\d+$/
const MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
// RFC 9110 section 5.6.7: recipients accept IMF-fixdate and the two obsolete forms.
const IMF_FIXDATE = /^(?:mon|tue|wed|thu|fri|sat|sun), (\d{2}) ([a-z]{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) gmt$/
const RFC850_DATE =
  /^(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday), (\d{2})-([a-z]{3})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) gmt$/
const ASCTIME_DATE = /^(?:mon|tue|wed|thu|fri|sat|sun) ([a-z]{3}) ( \d|\d{2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/

/** The instant the fields name; a day or an hour out of range rolls over (31 Feb into March, 24:00 into the next day). */
const instant = (year: number, month: number, day: number, hour: number, minute: number, second: number): number => {
  const date = new Date(0)
  // Unlike Date.UTC, setUTCFullYear keeps the years 0 to 99 as they are (Date.UTC reads 0015 as 1915).
  date.setUTCFullYear(year, month, day)
  // 23:59:60 is a leap second, read as 23:59:59.
  return date.setUTCHours(hour, minute, Math.min(second, 59))
}

const utc = (
  year: number,
  monthName: string,
  day: number,
  hour: number,
  minute: number,
  second: number
): Option.Option<number> => {
  const month = MONTHS.indexOf(monthName)
  if (month < 0 || minute > 59 || second > 60) return Option.none()
  const millis = instant(year, month, day, hour, minute, second)
  // A day or an hour out of range (00 or 32 Oct, 31 Feb, 24:00) rolled into another day: such a date is garbage.
  return new Date(millis).getUTCDate() === day ? Option.some(millis) : Option.none()
}

/** Parses an HTTP-date (RFC 9110) into epoch milliseconds; anything else is none. */
export const parseHttpDate = (value: string, nowMillis: number): Option.Option<number> => {
  const text = value.trim().toLowerCase()
  const imf = IMF_FIXDATE.exec(text)
  if (imf) return utc(Number(imf[3]), imf[2]!, Number(imf[1]), Number(imf[4]), Number(imf[5]), Number(imf[6]))
  const rfc850 = RFC850_DATE.exec(text)
  if (rfc850) {
    const day = Number(rfc850[1])
    const hour = Number(rfc850[4])
    const minute = Number(rfc850[5])
    const second = Number(rfc850[6])
    // RFC 9110: a two-digit year that appears to be more than 50 years in the future is the most recent year
    // in the past with the same last two digits. So it is the first such year from this one on, or the one a
    // century earlier when that date lies more than 50 years after now.
    const nowYear = new Date(nowMillis).getUTCFullYear()
    const ahead = nowYear + ((Number(rfc850[3]) - (nowYear % 100) + 100) % 100)
    const fiftyYearsOn = new Date(nowMillis).setUTCFullYear(nowYear + 50)
    const tooFar = instant(ahead, MONTHS.indexOf(rfc850[2]!), day, hour, minute, second) > fiftyYearsOn
    return utc(tooFar ? ahead - 100 : ahead, rfc850[2]!, day, hour, minute, second)
  }
  const asctime = ASCTIME_DATE.exec(text)
  // Number() skips the space before a one-digit day.
  if (asctime) {
    return utc(Number(asctime[6]), asctime[1]!, Number(asctime[2]), Number(asctime[3]), Number(asctime[4]), Number(asctime[5]))
  }
  return Option.none()
}

/**
 * Reads a `Retry-After` value (delta-seconds or HTTP-date, the latter relative
 * to the Clock) and clamps it to [min, max]. A provider cannot push a retry
 * past `max` or pull it before `min`; unparsable values are none, so the
 * caller falls back to its own backoff.
 */
export const retryAfterWithin = (
  value: string | null | undefined,
  bounds: { readonly min: Duration.DurationInput; readonly max: Duration.DurationInput }
): Effect.Effect<Option.Option<Duration.Duration>> =>
  Effect.map(Clock.currentTimeMillis, (now) => {
    if (value === undefined || value === null) return Option.none()
    const text = value.trim()
    const millis: Option.Option<number> = DELTA_SECONDS.test(text)
      ? Option.some(Number(text) * 1000)
      : Option.map(parseHttpDate(text, now), (at) => at - now)
    return Option.map(millis, (ms) => {
      const min = Duration.toMillis(Duration.decode(bounds.min))
      const max = Duration.toMillis(Duration.decode(bounds.max))
      return Duration.millis(Math.min(max, Math.max(min, ms)))
    })
  })
