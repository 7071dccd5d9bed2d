import { EnvelopeInboxApi } from "@delivery/envelope-inbox"
import { taggedMetric } from "@delivery/core"
import { MetricBoundaries, MetricKey } from "effect"

const seconds = MetricBoundaries.fromIterable([0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30])

const requests = MetricKey.counter("delivery_http_requests", {
  description: "HTTP answers by method, route template and status (the edge's own refusals included)",
  incremental: true
})

const requestSeconds = MetricKey.histogram(
  "delivery_http_request_duration_seconds",
  seconds,
  "Time from the request's arrival at the edge to its answer being handed back, by method and route template"
)

const ingestSeconds = MetricKey.histogram(
  "delivery_ingest_duration_seconds",
  seconds,
  "Envelope ingest (POST /controlplane/v1/envelopes) from the request's arrival to its answer, which is written only after commit, by outcome"
)

/** The route template of the inbox's ingest endpoint, as the route labels name it. */
export const INGEST_ROUTE: string = EnvelopeInboxApi.endpoints.ingest!.path

/** The ingest outcome by status: the inbox answers 201 for an accepted envelope and 200 for a duplicate. */
const ingestOutcome = (status: number) =>
  status === 201 ? "accepted" : status === 200 ? "duplicate" : status === 429 ? "rate-limited" : status < 500 ? "refused" : "unavailable"

/**
 * One answered request. Synchronous (`unsafeUpdate`), for the edge's answer path; `method` and `route` are labels
 * already (RouteLabels), so every label value is from a closed set.
 */
export const observeRequest = (method: string, route: string, status: number, elapsedSeconds: number) => {
  taggedMetric(requests, [["method", method], ["route", route], ["status", String(status)]]).unsafeUpdate(1, [])
  taggedMetric(requestSeconds, [["method", method], ["route", route]]).unsafeUpdate(elapsedSeconds, [])
  if (method === "POST" && route === INGEST_ROUTE) {
    taggedMetric(ingestSeconds, [["outcome", ingestOutcome(status)]]).unsafeUpdate(elapsedSeconds, [])
  }
}
