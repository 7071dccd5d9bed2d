import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { CorrelationId, type QueueView, QueueViews, requestCorrelationId, WorkerRegistry } from "@delivery/core"
import { Duration, Effect, Either, Metric, Option, Predicate, Redacted, Schema } from "effect"
import { createHash, timingSafeEqual } from "node:crypto"
import { AppConfig } from "./Config.ts"
import { DatabasePool } from "./Database.ts"
import { MetricsScrape } from "./Telemetry.ts"

/** GET /metrics when METRICS_TOKEN is set and the request does not carry it. */
export class MetricsUnauthenticated extends Schema.TaggedError<MetricsUnauthenticated>()("Unauthenticated", {
  reason: Schema.Literal("metrics-token-missing", "metrics-token-invalid"),
  correlationId: CorrelationId
}) {}

const encodeRefusal = Schema.encodeSync(MetricsUnauthenticated)

const queueDepth = Metric.gauge("delivery_queue_depth", {
  description: "Items of a durable queue family in each state, read from PostgreSQL at scrape time (the same in every process)"
})
const oldestDueAge = Metric.gauge("delivery_queue_oldest_due_age_seconds", {
  description: "Seconds since the oldest item that is due now became due (0 when nothing is due), by family"
})
const viewUp = Metric.gauge("delivery_queue_view_up", {
  description: "1 when the family's queue reading succeeded at this scrape, 0 when it failed or timed out (its depth and age are then the last reading)"
})
const workerRunning = Metric.gauge("delivery_worker_running", {
  description: "1 while this process's worker runs, 0 when it is starting, stopping, stopped or failed, by worker"
})
const poolConnections = Metric.gauge("delivery_db_pool_connections", {
  description: "This process's PostgreSQL pool connections by state: in-use or idle"
})
const poolWaiting = Metric.gauge("delivery_db_pool_waiting", {
  description: "Queries of this process waiting for a pool connection"
})
const poolMax = Metric.gauge("delivery_db_pool_max_connections", {
  description: "The pool's bound (DATABASE_POOL_MAX; 1 with the embedded database)"
})

/** A family's reading is a few aggregate queries; one that takes longer than this is reported down, not waited for. */
const SNAPSHOT_TIMEOUT = Duration.seconds(5)

const tagOf = (error: unknown) =>
  Predicate.hasProperty(error, "_tag") && typeof error._tag === "string" ? error._tag : "unknown"

/** One family's gauges; a failure marks only that family down. */
const readQueue = (view: QueueView) =>
  view.snapshot.pipe(
    Effect.timeoutFail({ duration: SNAPSHOT_TIMEOUT, onTimeout: () => ({ _tag: "Timeout" }) }),
    Effect.either,
    Effect.flatMap((reading) => {
      const family = (gauge: Metric.Metric.Gauge<number>) => Metric.tagged(gauge, "family", view.family)
      if (Either.isLeft(reading)) {
        return Metric.set(family(viewUp), 0).pipe(
          Effect.zipRight(Effect.logWarning("metrics: a queue family could not be read").pipe(
            Effect.annotateLogs({ family: view.family, error: tagOf(reading.left) })
          ))
        )
      }
      const snapshot = reading.right
      return Effect.all([
        ...snapshot.states.map(({ count, state }) => Metric.set(Metric.tagged(family(queueDepth), "state", state), count)),
        Metric.set(family(oldestDueAge), snapshot.oldestDueAgeSeconds ?? 0),
        Metric.set(family(viewUp), 1)
      ], { discard: true })
    })
  )

const bearer = /^bearer ([\x21-\x7e]+)$/i

/**
 * GET /metrics: Prometheus text of every metric of the process. The gauges that describe state rather than events
 * (queue depth and age, workers, the pool) are set right before serializing. Added to the router beside the API
 * (not an HttpApi endpoint: its answer is Prometheus text, not JSON, and it is not part of docs/api.md).
 */
export const MetricsHttpLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const scrape = yield* MetricsScrape
    const views = Option.getOrElse(yield* Effect.serviceOption(QueueViews), (): ReadonlyArray<QueueView> => [])
    const workers = yield* Effect.serviceOption(WorkerRegistry)
    const pool = yield* Effect.serviceOption(DatabasePool)
    // Only the digest is kept: comparing two 32-byte digests takes the same time whatever the token's length.
    const expected = Option.map(config.observability.metricsToken, (token) => createHash("sha256").update(Redacted.value(token)).digest())

    const refuse = (reason: MetricsUnauthenticated["reason"], challenge: string) =>
      Effect.map(requestCorrelationId, (correlationId) =>
        HttpServerResponse.unsafeJson(encodeRefusal(new MetricsUnauthenticated({ reason, correlationId })), {
          status: 401,
          headers: { "www-authenticate": challenge }
        }))

    const authorize = Effect.gen(function* () {
      if (Option.isNone(expected)) return Option.none()
      const header = (yield* HttpServerRequest.HttpServerRequest).headers.authorization
      if (header === undefined || header.trim() === "") return Option.some(yield* refuse("metrics-token-missing", "Bearer"))
      const presented = bearer.exec(header.trim())?.[1]
      const matches = presented !== undefined &&
        timingSafeEqual(createHash("sha256").update(presented).digest(), expected.value)
      return matches ? Option.none() : Option.some(yield* refuse("metrics-token-invalid", "Bearer error=\"invalid_token\""))
    })

    const readWorkers = Option.match(workers, {
      onNone: () => Effect.void,
      onSome: (registry) =>
        Effect.flatMap(registry.snapshot, (states) =>
          Effect.forEach(states, ({ name, status }) => Metric.set(Metric.tagged(workerRunning, "worker", name), status === "running" ? 1 : 0), {
            discard: true
          }))
    })

    const readPool = Option.match(pool, {
      onNone: () => Effect.void,
      onSome: ({ usage }) =>
        Effect.suspend(() => {
          const now = usage()
          return Effect.all([
            Metric.set(Metric.tagged(poolConnections, "state", "in-use"), now.total - now.idle),
            Metric.set(Metric.tagged(poolConnections, "state", "idle"), now.idle),
            Metric.set(poolWaiting, now.waiting),
            Metric.set(poolMax, now.max)
          ], { discard: true })
        })
    })

    yield* router.get(
      "/metrics",
      Effect.gen(function* () {
        const refused = yield* authorize
        if (Option.isSome(refused)) return refused.value
        yield* Effect.all([Effect.forEach(views, readQueue, { concurrency: "unbounded", discard: true }), readWorkers, readPool], {
          concurrency: "unbounded",
          discard: true
        })
        return HttpServerResponse.text(yield* scrape.serialize, { contentType: "text/plain; version=0.0.4; charset=utf-8" })
      })
    )
  })
)
