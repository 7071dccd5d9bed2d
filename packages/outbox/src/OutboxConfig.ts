import { Backoff, integerBetween, positiveDuration } from "@delivery/core"
import { Config, ConfigError, ConfigProvider, Context, Duration, Effect, Either, Layer } from "effect"
import { CLAIM_LIMIT, MAX_ATTEMPTS_LIMIT } from "./Domain.ts"

const duration = positiveDuration

const fraction = (name: string, fallback: number) =>
  Config.number().pipe(
    Config.validate({ message: "Expected a number between 0 and 1", validation: (n) => n >= 0 && n <= 1 }),
    Config.nested(name),
    Config.withDefault(fallback)
  )

/**
 * Spec 000: "Delivery uses the same independently configured sync policy but a distinct trusted
 * tenant-scheduler delivery key". The same variables and defaults as the inbox's sync limiter
 * (packages/envelope-inbox, `SYNC_INGEST_LIMIT` per `SYNC_INGEST_WINDOW`), applied here under the
 * key `tenant-scheduler-delivery:<tenant>`, one token per envelope claimed.
 */
export const SyncPolicyConfig = Config.all({
  limit: integerBetween("SYNC_INGEST_LIMIT", 1, 1_000_000_000, 600),
  window: duration("SYNC_INGEST_WINDOW", "1 minute")
})
export type SyncPolicy = Config.Config.Success<typeof SyncPolicyConfig>

const fields = Config.all({
  batchSize: integerBetween("OUTBOX_BATCH_SIZE", 1, CLAIM_LIMIT, CLAIM_LIMIT),
  claimers: integerBetween("OUTBOX_CLAIMERS", 1, 32, 2),
  concurrency: integerBetween("OUTBOX_CONCURRENCY", 1, 1_000, 20),
  requestTimeout: duration("OUTBOX_REQUEST_TIMEOUT", "10 seconds"),
  cycleTimeout: duration("OUTBOX_CYCLE_TIMEOUT", "1 minute"),
  lease: duration("OUTBOX_LEASE", "90 seconds"),
  pollInterval: duration("OUTBOX_POLL_INTERVAL", "1 second"),
  backoffBase: duration("OUTBOX_BACKOFF_BASE", "5 seconds"),
  backoffCap: duration("OUTBOX_BACKOFF_CAP", "1 hour"),
  backoffJitter: fraction("OUTBOX_BACKOFF_JITTER", 0.2),
  retryAfterMax: duration("OUTBOX_RETRY_AFTER_MAX", "1 hour"),
  defaultMaxAttempts: integerBetween("OUTBOX_DEFAULT_MAX_ATTEMPTS", 1, MAX_ATTEMPTS_LIMIT, 10),
  syncPolicy: SyncPolicyConfig
})

const invalid = (name: string, message: string) => Either.left(ConfigError.InvalidData([name], message))

/**
 * Cross-checks, so a configuration that could deliver a row twice or burn attempts never starts:
 * a claimed batch must finish (every request timing out, `concurrency` at a time) within the cycle
 * timeout, and the lease must outlive the cycle, or a second worker could claim a row whose first
 * owner is still sending it.
 */
export const OutboxConfig = fields.pipe(
  Config.mapOrFail((c) => {
    const rounds = Math.ceil(c.batchSize / c.concurrency)
    const needed = Duration.sum(Duration.times(c.requestTimeout, rounds), Duration.seconds(1))
    if (Duration.lessThan(c.cycleTimeout, needed)) {
      return invalid(
        "OUTBOX_CYCLE_TIMEOUT",
        `Expected at least OUTBOX_REQUEST_TIMEOUT x ceil(OUTBOX_BATCH_SIZE / OUTBOX_CONCURRENCY) + 1s = ${Duration.format(needed)}`
      )
    }
    if (!Duration.greaterThan(c.lease, c.cycleTimeout)) {
      return invalid("OUTBOX_LEASE", "Expected a lease longer than OUTBOX_CYCLE_TIMEOUT")
    }
    if (Duration.lessThan(c.backoffCap, c.backoffBase)) {
      return invalid("OUTBOX_BACKOFF_CAP", "Expected OUTBOX_BACKOFF_CAP >= OUTBOX_BACKOFF_BASE")
    }
    return Either.right({
      ...c,
      backoff: Backoff.make({ base: c.backoffBase, cap: c.backoffCap, jitter: c.backoffJitter })
    })
  })
)
export type Settings = Config.Config.Success<typeof OutboxConfig>

/**
 * The validated settings as a service: the backend provides the values it checked at start-up
 * (`AppConfig.outbox`); tests and scripts read them from a map of variables.
 */
export class OutboxSettings extends Context.Tag("@delivery/outbox/OutboxSettings")<OutboxSettings, Settings>() {
  /** From the environment (ConfigProvider), as the backend reads it. */
  static readonly fromConfig = Layer.effect(OutboxSettings, OutboxConfig)
  /** From variables given as a map (tests, the benchmark); unset ones take their defaults. */
  static readonly fromMap = (variables: Readonly<Record<string, string>>) =>
    Layer.effect(
      OutboxSettings,
      Effect.withConfigProvider(OutboxConfig, ConfigProvider.fromMap(new Map(Object.entries(variables))))
    )
}

/** Every variable the outbox reads, in the shape of the backend's configuration table. */
export const OUTBOX_CONFIG: ReadonlyArray<{
  readonly name: string
  readonly default: string
  readonly meaning: string
  readonly secret: boolean
}> = [
  { name: "OUTBOX_BATCH_SIZE", default: "100", meaning: "rows one claim may take (1-100; spec 000 caps claims at 100)", secret: false },
  { name: "OUTBOX_CLAIMERS", default: "2", meaning: "claim loops per backend process, each claiming and delivering its own batches", secret: false },
  { name: "OUTBOX_CONCURRENCY", default: "20", meaning: "deliveries in flight per claim loop", secret: false },
  { name: "OUTBOX_REQUEST_TIMEOUT", default: "10 seconds", meaning: "bound on one POST to a delivery target; a timeout is ambiguous and retried", secret: false },
  { name: "OUTBOX_CYCLE_TIMEOUT", default: "1 minute", meaning: "bound on delivering one claimed batch; unfinished deliveries are aborted and recorded (fenced) as ambiguous. Must be >= request timeout x ceil(batch / concurrency) + 1s", secret: false },
  { name: "OUTBOX_LEASE", default: "90 seconds", meaning: "lease of a claim; after it a crashed worker's rows are claimable again. Must exceed the cycle timeout", secret: false },
  { name: "OUTBOX_POLL_INTERVAL", default: "1 second", meaning: "wait after a tick that found less than a full batch, and after a failed tick", secret: false },
  { name: "OUTBOX_BACKOFF_BASE", default: "5 seconds", meaning: "delay before the first retry; doubles per attempt", secret: false },
  { name: "OUTBOX_BACKOFF_CAP", default: "1 hour", meaning: "largest retry delay", secret: false },
  { name: "OUTBOX_BACKOFF_JITTER", default: "0.2", meaning: "fraction of a retry delay that is taken off at random (0-1)", secret: false },
  { name: "OUTBOX_RETRY_AFTER_MAX", default: "1 hour", meaning: "a receiver's Retry-After is honoured, clamped to [1 second, this]", secret: false },
  { name: "OUTBOX_DEFAULT_MAX_ATTEMPTS", default: "10", meaning: "attempts of a message whose caller did not set maxAttempts (1-100)", secret: false }
  // SYNC_INGEST_LIMIT / SYNC_INGEST_WINDOW (the sync policy) are listed by the inbox; delivery applies them per
  // tenant under tenant-scheduler-delivery:<tenant>.
]
