import { HttpApi, HttpApiBuilder, OpenApi } from "@effect/platform"
import { WorkerRegistry } from "@delivery/core"
import { OperatorAuthenticationLive } from "@delivery/identity"
import {
  type CloudSettings,
  cloudLayer,
  IdleWakeCloudApi,
  IdleWakeCloudEventsApi,
  IdleWakeCloudEventsHttpLive,
  IdleWakeCloudHttpLive,
  serveProxy
} from "@delivery/idle-wake"
import { BunContext, BunHttpServer } from "@effect/platform-bun"
import { Effect, Layer, Logger } from "effect"
import { AppConfig, type AppConfigShape, describeConfig } from "./Config.ts"
import { DatabaseLive, StartupChecksLive } from "./Database.ts"
import { LimitStoreStartupLive } from "./LimitStoreStartup.ts"
import { HealthApi } from "./HealthApi.ts"
import { HealthHttpLive } from "./HealthHttp.ts"
import { CloudConsoleLive, DocsLive } from "./Http.ts"
import { serveDraining } from "./HttpServer.ts"
import { CloudQueueViewsLive } from "./QueueViewsLive.ts"
import { MetricsHttpLive } from "./MetricsHttp.ts"
import { routeLabels } from "./RouteLabels.ts"
import { telemetryLayer } from "./Telemetry.ts"
import { Readiness } from "./Readiness.ts"
import { withEdgeErrors } from "./EdgeErrors.ts"
import { requestInvalid, withoutDecodeError } from "./RequestInvalid.ts"

/**
 * What a ROLE=cloud process serves on PORT: health, readiness, its documents, the cloud operator routes and the
 * operator console (its stacks and broker events). The tenant API is not here: tenants are the stacks behind the
 * wake proxy, which listens on its own port.
 */
export class CloudApi extends withEdgeErrors(HttpApi.make("delivery").add(HealthApi).add(IdleWakeCloudApi).add(IdleWakeCloudEventsApi))
  .annotate(OpenApi.Title, "Delivery backend, cloud role")
  .annotate(OpenApi.Transform, withoutDecodeError)
{}

const CloudApiLive = HttpApiBuilder.api(CloudApi).pipe(
  Layer.provide(HealthHttpLive),
  Layer.provide(IdleWakeCloudHttpLive),
  Layer.provide(IdleWakeCloudEventsHttpLive),
  Layer.provide(OperatorAuthenticationLive)
)

/** Both listeners open last and close first: the proxy drains its held requests, then the operator API drains. */
const CloudHttpLive = Layer.scopedDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const app = yield* HttpApiBuilder.httpApp
    const { url } = yield* serveDraining(app, {
      hostname: config.host,
      port: config.port,
      maxRequestBodySize: config.maxRequestBodyBytes,
      drainMs: config.shutdownDrainMs,
      routes: routeLabels(CloudApi)
    })
    const proxy = yield* serveProxy({ drainMs: config.shutdownDrainMs })
    yield* Effect.logInfo(`listening on ${url} (role cloud); wake proxy listening on ${proxy.url}`)
  })
).pipe(
  Layer.provide([HttpApiBuilder.Router.Live, HttpApiBuilder.Middleware.layer]),
  Layer.provide(DocsLive),
  Layer.provide(MetricsHttpLive),
  Layer.provide(CloudConsoleLive),
  Layer.provide(HttpApiBuilder.middleware(CloudApi, requestInvalid(CloudApi))),
  Layer.provide(CloudApiLive),
  Layer.provide(BunHttpServer.layerContext)
)

/** config → database → migrations + health check → cloud services (the routing table is read) → HTTP and proxy. */
export const makeCloudApp = (config: AppConfigShape, cloud: CloudSettings) =>
  CloudHttpLive.pipe(
    Layer.provideMerge(CloudQueueViewsLive),
    Layer.provideMerge(cloudLayer(cloud)),
    Layer.provideMerge(Readiness.Default.pipe(Layer.provideMerge(WorkerRegistry.Default))),
    Layer.provide(StartupChecksLive),
    Layer.provide(LimitStoreStartupLive),
    Layer.provide(DatabaseLive),
    Layer.provide(Layer.effectDiscard(
      Effect.logInfo("starting delivery backend, role cloud").pipe(Effect.annotateLogs(describeConfig(config)))
    )),
    Layer.provide(BunContext.layer),
    Layer.provide(Layer.succeed(AppConfig, config)),
    Layer.provide(telemetryLayer(config.observability, "cloud")),
    Layer.provide(Logger.minimumLogLevel(config.logLevel))
  )
