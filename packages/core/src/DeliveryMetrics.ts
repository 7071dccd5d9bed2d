import { Effect, Metric, MetricBoundaries, MetricKey } from "effect"
import { taggedMetric } from "./TaggedMetric.ts"

// The measurements every delivery family makes, as Effect metrics. The backend exports them (GET /metrics); a
// package only records. Every label value is one of the closed sets below: never a tenant, an id, an address or a
// token, so a scrape's size does not grow with the data.

/** The durable queue families whose workers record outcomes, under the names of their queue views. */
export type DeliveryFamily = "outbox" | "reset-mail" | "receipt-effects" | "team-applications" | "cloud-connector-events"

/** The outcome a family's worker recorded for one attempt (each family uses its own subset). */
export type DeliveryOutcome =
  | "delivered"
  | "done"
  | "retry"
  | "rejected"
  | "dead"
  | "quarantined"
  | "stopped"
  | "exhausted"
  | "envelope-invalid"

/** Why a rate limit or an admission bound refused work. */
export type LimiterReason =
  | "identity-peer"
  | "identity-signin"
  | "password-reset-source"
  | "password-reset-address"
  | "sync-ingest"
  | "outbox-delivery-rate"
  | "wake-source-request-budget"
  | "wake-source-wake-budget"
  | "wake-stack-wake-budget"
  | "wake-budget"
  | "wake-waiting-full"
  | "wake-stack-waiting-full"
  | "wake-source-waiting-full"
  | "wake-preparations-full"

const outcomes = MetricKey.counter("delivery_outcomes", {
  description: "Attempt outcomes recorded by each family's worker (fenced writes that landed), by family and outcome",
  incremental: true
})

const providerCallSeconds = MetricKey.histogram(
  "delivery_provider_call_duration_seconds",
  MetricBoundaries.fromIterable([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]),
  "Duration of one provider call (HTTP to a receiver, a mail provider or a tenant stack), by family"
)

const limiterRefusals = MetricKey.counter("delivery_limiter_refusals", {
  description: "Work refused or deferred by a rate limit or an admission bound, by reason",
  incremental: true
})

/** Counts `count` attempts of `family` that ended in `outcome`; call it after the outcome's write committed. */
export const recordOutcome = (family: DeliveryFamily, outcome: DeliveryOutcome, count = 1): Effect.Effect<void> =>
  count <= 0 ? Effect.void : Metric.incrementBy(taggedMetric(outcomes, [["family", family], ["outcome", outcome]]), count)

/**
 * Records one provider call's duration (the Clock's nanoseconds from its start to its outcome) in `family`'s
 * histogram, in place: for a caller that times its calls without a fiber.
 */
export const providerCallTimer = (family: DeliveryFamily) => {
  const histogram = taggedMetric(providerCallSeconds, [["family", family]])
  return (nanos: bigint): void => histogram.unsafeUpdate(Number(nanos) / 1e9, [])
}

/**
 * Times a provider call that returned an outcome; an interrupted call (shutdown) has no duration to report. Two
 * steps per call, the histogram updated in place, where `Metric.trackDurationWith` takes four (a tap, an update
 * effect reading the fiber's metric labels, which nothing here sets) and two Duration conversions.
 */
export const timeProviderCall = (family: DeliveryFamily) => {
  const record = providerCallTimer(family)
  return <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.clockWith((clock) => {
      const started = clock.unsafeCurrentTimeNanos()
      return Effect.map(self, (value) => {
        record(clock.unsafeCurrentTimeNanos() - started)
        return value
      })
    })
}

export const recordLimiterRefusal = (reason: LimiterReason): Effect.Effect<void> =>
  Metric.increment(taggedMetric(limiterRefusals, [["reason", reason]]))
