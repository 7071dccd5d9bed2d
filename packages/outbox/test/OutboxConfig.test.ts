import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { readFileSync } from "node:fs"
import { OUTBOX_CONFIG, OutboxSettings, type Settings } from "../src/index.ts"

const load = (variables: Readonly<Record<string, string>>) =>
  OutboxSettings.pipe(Effect.provide(OutboxSettings.fromMap(variables)), Effect.either)

/** The refusal's text (path and message), or null when the settings were accepted. */
const refusal = (variables: Readonly<Record<string, string>>) =>
  Effect.map(load(variables), (result) => (result._tag === "Left" ? String(result.left) : null))

const accepted = (variables: Readonly<Record<string, string>>) =>
  Effect.map(load(variables), (result) => {
    if (result._tag === "Left") throw new Error(`refused: ${String(result.left)}`)
    return result.right
  })

const millis = (d: Duration.Duration) => Duration.toMillis(d)

/** The integer variables: their bounds, their default, and where the value lands. */
const integers: ReadonlyArray<{
  readonly name: string
  readonly min: number
  readonly max: number
  readonly fallback: number
  readonly read: (s: Settings) => number
}> = [
  { name: "OUTBOX_BATCH_SIZE", min: 1, max: 100, fallback: 100, read: (s) => s.batchSize },
  { name: "OUTBOX_CLAIMERS", min: 1, max: 32, fallback: 2, read: (s) => s.claimers },
  { name: "OUTBOX_CONCURRENCY", min: 1, max: 1_000, fallback: 20, read: (s) => s.concurrency },
  { name: "OUTBOX_DEFAULT_MAX_ATTEMPTS", min: 1, max: 100, fallback: 10, read: (s) => s.defaultMaxAttempts },
  { name: "SYNC_INGEST_LIMIT", min: 1, max: 1_000_000_000, fallback: 600, read: (s) => s.syncPolicy.limit }
]

/** The duration variables: their default (in milliseconds) and where the value lands. */
const durations: ReadonlyArray<{
  readonly name: string
  readonly fallback: number
  readonly read: (s: Settings) => Duration.Duration
}> = [
  { name: "OUTBOX_REQUEST_TIMEOUT", fallback: 10_000, read: (s) => s.requestTimeout },
  { name: "OUTBOX_CYCLE_TIMEOUT", fallback: 60_000, read: (s) => s.cycleTimeout },
  { name: "OUTBOX_LEASE", fallback: 90_000, read: (s) => s.lease },
  { name: "OUTBOX_POLL_INTERVAL", fallback: 1_000, read: (s) => s.pollInterval },
  { name: "OUTBOX_BACKOFF_BASE", fallback: 5_000, read: (s) => s.backoffBase },
  { name: "OUTBOX_BACKOFF_CAP", fallback: 3_600_000, read: (s) => s.backoffCap },
  { name: "OUTBOX_RETRY_AFTER_MAX", fallback: 3_600_000, read: (s) => s.retryAfterMax },
  { name: "SYNC_INGEST_WINDOW", fallback: 60_000, read: (s) => s.syncPolicy.window }
]

// A request timeout so short that any batch size and concurrency fit in the default cycle timeout.
const roomy = { OUTBOX_REQUEST_TIMEOUT: "1 millis" }

describe("OutboxConfig: each variable's bounds, default and unit", () => {
  it.effect.each(integers)("$name is an integer between its bounds ($min-$max), refused naming it outside them, $fallback when unset", ({ fallback, max, min, name, read }) =>
    Effect.gen(function*() {
      expect(read(yield* accepted(roomy))).toBe(fallback)
      expect(read(yield* accepted({ ...roomy, [name]: String(min) }))).toBe(min)
      expect(read(yield* accepted({ ...roomy, [name]: String(max) }))).toBe(max)
      for (const value of [String(min - 1), String(max + 1), "1.5", "1e1"]) {
        const refused = yield* refusal({ ...roomy, [name]: value })
        expect(refused, `${name}=${value}`).toContain(`at ${name}:`)
        expect(refused).toContain(`between ${min} and ${max}`)
      }
    }))

  it.effect.each(durations)("$name is a positive duration with its unit, refused naming it when zero, $fallback ms when unset", ({ fallback, name, read }) =>
    Effect.gen(function*() {
      expect(millis(read(yield* accepted({})))).toBe(fallback)
      // A value equal to the default, written in another unit, is read as the same duration.
      expect(millis(read(yield* accepted({ [name]: `${fallback} millis` })))).toBe(fallback)
      for (const value of ["0 seconds", "ten seconds"]) {
        expect(yield* refusal({ [name]: value }), `${name}=${value}`).toContain(`at ${name}:`)
      }
    }))

  it.effect("OUTBOX_BACKOFF_JITTER is a fraction in [0, 1] (both ends included), 0.2 when unset, refused naming it outside", () =>
    Effect.gen(function*() {
      expect((yield* accepted({})).backoffJitter).toBe(0.2)
      expect((yield* accepted({})).backoff.jitter).toBe(0.2)
      for (const value of [0, 0.5, 1]) {
        const settings = yield* accepted({ OUTBOX_BACKOFF_JITTER: String(value) })
        expect(settings.backoffJitter).toBe(value)
        expect(settings.backoff.jitter).toBe(value)
      }
      for (const value of ["-0.01", "1.01", "2", "-1"]) {
        const refused = yield* refusal({ OUTBOX_BACKOFF_JITTER: value })
        expect(refused, `OUTBOX_BACKOFF_JITTER=${value}`).toContain("at OUTBOX_BACKOFF_JITTER:")
        expect(refused).toContain("Expected a number between 0 and 1")
      }
    }))

  it.effect("the backoff is built from OUTBOX_BACKOFF_BASE, OUTBOX_BACKOFF_CAP and OUTBOX_BACKOFF_JITTER", () =>
    Effect.gen(function*() {
      const { backoff } = yield* accepted({ OUTBOX_BACKOFF_BASE: "2 seconds", OUTBOX_BACKOFF_CAP: "3 minutes", OUTBOX_BACKOFF_JITTER: "0.5" })
      expect([millis(backoff.base), millis(backoff.cap), backoff.jitter]).toEqual([2_000, 180_000, 0.5])
    }))
})

describe("OutboxConfig: settings under which no live worker can outlast its lease", () => {
  it.effect("'OUTBOX_LEASE must exceed the cycle timeout': a lease equal to or shorter than OUTBOX_CYCLE_TIMEOUT is refused, naming OUTBOX_LEASE", () =>
    Effect.gen(function*() {
      for (const lease of ["1 minute", "59 seconds"]) {
        const refused = yield* refusal({ OUTBOX_CYCLE_TIMEOUT: "1 minute", OUTBOX_LEASE: lease })
        expect(refused).toContain("at OUTBOX_LEASE:")
        expect(refused).toContain("Expected a lease longer than OUTBOX_CYCLE_TIMEOUT")
      }
      const settings = yield* accepted({ OUTBOX_CYCLE_TIMEOUT: "1 minute", OUTBOX_LEASE: "60001 millis" })
      expect(millis(settings.lease)).toBe(60_001)
    }))

  it.effect("the cycle timeout must cover a whole batch of timed-out requests: OUTBOX_REQUEST_TIMEOUT x ceil(OUTBOX_BATCH_SIZE / OUTBOX_CONCURRENCY) + 1s", () =>
    Effect.gen(function*() {
      const base = { OUTBOX_BATCH_SIZE: "100", OUTBOX_CONCURRENCY: "20", OUTBOX_REQUEST_TIMEOUT: "10 seconds", OUTBOX_LEASE: "2 minutes" }
      const refused = yield* refusal({ ...base, OUTBOX_CYCLE_TIMEOUT: "50999 millis" })
      expect(refused).toContain("at OUTBOX_CYCLE_TIMEOUT:")
      // The refusal states the minimum it computed.
      expect(refused).toContain("= 51s")
      yield* accepted({ ...base, OUTBOX_CYCLE_TIMEOUT: "51 seconds" })
      // ceil: 101 rows at 20 a time are 6 rounds, not 5.
      expect(yield* refusal({ ...base, OUTBOX_BATCH_SIZE: "99", OUTBOX_CONCURRENCY: "19", OUTBOX_CYCLE_TIMEOUT: "1 minute" })).toContain("= 1m 1s")
    }))

  it.effect("the backoff cap may not be below its base: OUTBOX_BACKOFF_CAP < OUTBOX_BACKOFF_BASE is refused naming OUTBOX_BACKOFF_CAP, equal is accepted", () =>
    Effect.gen(function*() {
      const refused = yield* refusal({ OUTBOX_BACKOFF_BASE: "10 seconds", OUTBOX_BACKOFF_CAP: "9999 millis" })
      expect(refused).toContain("at OUTBOX_BACKOFF_CAP:")
      expect(refused).toContain("Expected OUTBOX_BACKOFF_CAP >= OUTBOX_BACKOFF_BASE")
      const settings = yield* accepted({ OUTBOX_BACKOFF_BASE: "10 seconds", OUTBOX_BACKOFF_CAP: "10 seconds" })
      expect([millis(settings.backoff.base), millis(settings.backoff.cap)]).toEqual([10_000, 10_000])
    }))
})

describe("OutboxConfig: the configuration table", () => {
  it.effect("every OUTBOX_ variable is listed with its real default, and docs/operations.md shows the same rows", () =>
    Effect.gen(function*() {
      const outbox = [...integers, ...durations].map((v) => v.name).filter((name) => name.startsWith("OUTBOX_"))
      expect(OUTBOX_CONFIG.map((row) => row.name).sort()).toEqual([...outbox, "OUTBOX_BACKOFF_JITTER"].sort())
      const defaults = yield* accepted({})
      for (const row of OUTBOX_CONFIG) {
        expect(row.secret, row.name).toBe(false)
        expect(row.meaning.length, row.name).toBeGreaterThan(10)
        // The listed default, set explicitly, gives the settings the variable takes when unset.
        const explicit = yield* accepted({ [row.name]: row.default })
        const integer = integers.find((v) => v.name === row.name)
        const duration = durations.find((v) => v.name === row.name)
        if (integer) expect(integer.read(explicit), row.name).toBe(integer.read(defaults))
        else if (duration) expect(millis(duration.read(explicit)), row.name).toBe(millis(duration.read(defaults)))
        else expect(explicit.backoffJitter, row.name).toBe(defaults.backoffJitter)
      }
      const operations = readFileSync(new URL("../../../docs/operations.md", import.meta.url), "utf8").split("\n")
      const documented = operations.filter((line) => line.startsWith("| `OUTBOX_"))
      expect(documented).toEqual(
        OUTBOX_CONFIG.map((row) => `| \`${row.name}\` | ${row.default} | ${row.meaning} | ${row.secret ? "yes" : "no"} |`)
      )
    }))
})
