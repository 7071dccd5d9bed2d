import { integerBetween, positiveDuration } from "@delivery/core"
import { Config, Duration } from "effect"

/** The configured sync limiter of spec 000 ("Deployments construct the inbound service with the configured sync limiter"). */
export const SyncLimitConfig = Config.all({
  // The outbox reads the same variable with the same bounds (its delivery policy is this sync policy).
  limit: integerBetween("SYNC_INGEST_LIMIT", 1, 1_000_000_000, 600),
  window: positiveDuration("SYNC_INGEST_WINDOW", Duration.minutes(1))
})

/** Spec 000: "Inbox payloads expire after 90 days by default". */
export const PayloadRetentionConfig = positiveDuration("INBOX_PAYLOAD_RETENTION", Duration.days(90))

/** The route's own body limit, enforced before the body becomes JSON (Bun ignores withMaxBodySize). */
export const MaxEnvelopeBytesConfig = integerBetween("INBOX_MAX_ENVELOPE_BYTES", 1024, 16 * 1024 * 1024, 64 * 1024)

/**
 * Ingest statements one process runs at once; envelopes that arrive while they run are committed together by the
 * next one (group commit, docs/controlplane-inbound.md).
 */
export const IngestConcurrencyConfig = integerBetween("INBOX_INGEST_CONCURRENCY", 1, 100, 1)

/** How long the retention worker waits between sweeps (also after a failed one). */
export const RetentionIntervalConfig = positiveDuration("INBOX_RETENTION_INTERVAL", Duration.hours(1))

/** All of the package's settings at once, for the backend's up-front validation of its environment. */
export const InboxConfig = Config.all({
  sync: SyncLimitConfig,
  payloadRetention: PayloadRetentionConfig,
  maxEnvelopeBytes: MaxEnvelopeBytesConfig,
  ingestConcurrency: IngestConcurrencyConfig,
  retentionInterval: RetentionIntervalConfig
})

/** Every variable this package reads, in the shape of the backend's configuration table. */
export const INBOX_CONFIG: ReadonlyArray<{
  readonly name: string
  readonly default: string
  readonly meaning: string
  readonly secret: boolean
}> = [
  {
    name: "SYNC_INGEST_LIMIT",
    default: "600",
    meaning: "envelopes one verified tenant/account/device may submit per SYNC_INGEST_WINDOW (purpose sync-ingest, 1-1000000000); more get 429 with Retry-After",
    secret: false
  },
  { name: "SYNC_INGEST_WINDOW", default: "1 minute", meaning: "the fixed window of SYNC_INGEST_LIMIT", secret: false },
  {
    name: "INBOX_MAX_ENVELOPE_BYTES",
    default: "65536",
    meaning: "largest envelope body POST /controlplane/v1/envelopes reads (1024 to 16 MiB); larger bodies get 413 before authentication",
    secret: false
  },
  {
    name: "INBOX_INGEST_CONCURRENCY",
    default: "1",
    meaning: "ingest statements one backend process runs at once (1-100); envelopes arriving meanwhile are committed together by the next statement, at most 32 (and 4 MiB of envelopes) per statement",
    secret: false
  },
  {
    name: "INBOX_PAYLOAD_RETENTION",
    default: "90 days",
    meaning: "how long an accepted envelope's payload is kept (at most SIGNER_REPLAY_WINDOW); identities, cursors, floors and audit rows are permanent",
    secret: false
  },
  {
    name: "INBOX_RETENTION_INTERVAL",
    default: "1 hour",
    meaning: "pause between retention sweeps (each deletes expired payloads in batches of at most 1,000)",
    secret: false
  }
]
