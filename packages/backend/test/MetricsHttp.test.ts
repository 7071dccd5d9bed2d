import { HttpApiBuilder, HttpApp, HttpRouter } from "@effect/platform"
import { type QueueView, QueueViews } from "@delivery/core"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import { AppConfig, type AppConfigShape } from "../src/Config.ts"
import { MetricsHttpLive } from "../src/MetricsHttp.ts"
import { telemetryLayer } from "../src/Telemetry.ts"
import { readScrape } from "./support/Scrape.ts"

// The scrape reads every queue family of the role at request time; one family that cannot be read is reported down
// and does not take the others, or the scrape, with it.

const healthy: QueueView = {
  family: "healthy-family",
  title: "Healthy",
  snapshot: Effect.succeed({
    family: "healthy-family",
    states: [{ state: "pending", count: 3 }, { state: "done", count: 7 }],
    oldestDueAgeSeconds: 42,
    completedLastHour: []
  })
}
const broken: QueueView = {
  family: "broken-family",
  title: "Broken",
  snapshot: Effect.fail({ _tag: "StorageUnavailable" })
}

const observability = { metricsToken: Option.none(), logFormat: "pretty", tracesUrl: Option.none(), serviceName: "delivery-backend" } as const

const TestLayer = MetricsHttpLive.pipe(
  Layer.provideMerge(HttpApiBuilder.Router.Live),
  Layer.provide(telemetryLayer(observability, "backend")),
  Layer.provide(Layer.succeed(QueueViews, [broken, healthy])),
  Layer.provide(Layer.succeed(AppConfig, { observability } as unknown as AppConfigShape))
)

layer(TestLayer)("GET /metrics with a family that cannot be read", (it) => {
  it.effect("the failing family is up 0 and the others are read: the scrape answers 200 with their depth and oldest due age", () =>
    Effect.gen(function* () {
      const app = yield* Effect.flatMap(HttpApiBuilder.Router.router, HttpRouter.toHttpApp)
      // The router's type carries the platform's default services; the /metrics route uses none of them.
      const handler = HttpApp.toWebHandler(app as HttpApp.Default<unknown, never>)
      const response = yield* Effect.promise(() => handler(new Request("http://localhost/metrics")))
      expect(response.status).toBe(200)
      const scrape = readScrape(yield* Effect.promise(() => response.text()))
      expect(scrape.value("delivery_queue_view_up", { family: "broken-family" })).toBe(0)
      expect(scrape.value("delivery_queue_view_up", { family: "healthy-family" })).toBe(1)
      expect(scrape.value("delivery_queue_depth", { family: "healthy-family", state: "pending" })).toBe(3)
      expect(scrape.value("delivery_queue_depth", { family: "healthy-family", state: "done" })).toBe(7)
      expect(scrape.value("delivery_queue_oldest_due_age_seconds", { family: "healthy-family" })).toBe(42)
      expect(scrape.value("delivery_queue_depth", { family: "broken-family", state: "pending" })).toBeUndefined()
    }))
})
