import { EnvelopeInboxApi } from "@delivery/envelope-inbox"
import { Metric, MetricBoundaries, MetricLabel } from "effect"

const seconds = MetricBoundaries.fromIterable([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30])

const requests = Metric.counter("delivery_http_requests", {
  description: "HTTP answers by method, route template and status (the edge's own refusals included)",
  incremental: true
})

const requestSeconds = Metric.histogram(
  "delivery_http_request_duration_seconds",
  seconds,
  "Time from the request's arrival at the edge to its answer being handed back, by method and route template"
)

const ingestSeconds = Metric.histogram(
  "delivery_ingest_duration_seconds",
  seconds,
  "Envelope ingest (POST /controlplane/v1/envelopes) from the request's arrival to its answer, which is written only after commit, by outcome"
)

/** The route template of the inbox's ingest endpoint, as the route labels name it. */
export const INGEST_ROUTE: string = EnvelopeInboxApi.endpoints.ingest!.path

/** The ingest outcome by status: the inbox answers 201 for an accepted envelope and 200 for a duplicate. */
const ingestOutcome = (status: number) =>
  status === 201 ? "accepted" : status === 200 ? "duplicate" : status === 429 ? "rate-limited" : status < 500 ? "refused" : "unavailable"

// Label sets are made once per value and reused: Effect caches a tagged metric's registry entry by the identity of
// its label array, so a new array per request would build and hash a new metric key on every answer.
const labelSets = new Map<string, ReadonlyArray<MetricLabel.MetricLabel>>()
const labels = (key: string, make: () => ReadonlyArray<MetricLabel.MetricLabel>) => {
  let set = labelSets.get(key)
  if (set === undefined) {
    set = make()
    labelSets.set(key, set)
  }
  return set
}

/**
 * One answered request. Synchronous (`unsafeUpdate`), for the edge's answer path; `method` and `route` are labels
 * already (RouteLabels), so every label value is from a closed set (and `labelSets` stays bounded).
 */
export const observeRequest = (method: string, route: string, status: number, elapsedSeconds: number) => {
  const counted = labels(`${method} ${route} ${status}`, () => [
    MetricLabel.make("method", method),
    MetricLabel.make("route", route),
    MetricLabel.make("status", String(status))
  ])
  requests.unsafeUpdate(1, counted)
  requestSeconds.unsafeUpdate(elapsedSeconds, labels(`${method} ${route}`, () => counted.slice(0, 2)))
  if (method === "POST" && route === INGEST_ROUTE) {
    const outcome = ingestOutcome(status)
    ingestSeconds.unsafeUpdate(elapsedSeconds, labels(`ingest ${outcome}`, () => [MetricLabel.make("outcome", outcome)]))
  }
}
