import { FileSystem, HttpApiBuilder, Path } from "@effect/platform"
import { EnvelopeInboxLive, inboxRetentionWorker } from "@delivery/envelope-inbox"
import { Identity, PasswordResets } from "@delivery/identity"
import { ResetMailRepo, ResetRequests, resetMailWorkerLive } from "@delivery/reset-mail"
import { Receipts, receiptsLayer, receiptWorkerLayer, ReceiptWork, ReceiptWorkSettings } from "@delivery/receipts"
import { Outbox, OutboxSettings, outboxWorkerLive } from "@delivery/outbox"
import {
  DeliverySettings,
  EffectQueueStore,
  NotificationQueue,
  TeamApplications,
  teamApplicationsLayer,
  TeamApplicationsRepo,
  teamApplicationWorkers
} from "@delivery/team-applications"
import { KeySource, Signer, signerPurgeWorker } from "@delivery/signer"
import { idleWakeLayer, makeTenantGate, PendingWork } from "@delivery/idle-wake"
import { BunContext, BunHttpServer } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Logger, Option } from "effect"
import { makeCloudApp } from "./CloudRuntime.ts"
import { AppConfig, describeConfig, loadConfig } from "./Config.ts"
import { DatabaseLive, StartupChecksLive } from "./Database.ts"
import { ApiLive, ConsoleLive, DocsLive, EdgeMiddlewareLive } from "./Http.ts"
import { serveDraining } from "./HttpServer.ts"
import { MetricsHttpLive } from "./MetricsHttp.ts"
import { routeLabels } from "./RouteLabels.ts"
import { Api } from "./Api.ts"
import { telemetryLayer } from "./Telemetry.ts"
import { Readiness } from "./Readiness.ts"
import { WorkerRegistry } from "@delivery/core"
import { LimitStoreStartupLive } from "./LimitStoreStartup.ts"
import { announceListening } from "./Supervisor.ts"
import { QueueViewsLive } from "./QueueViewsLive.ts"
import { Workers, WorkersLive } from "./Workers.ts"

/** What a worker layer may use; everything else it needs, it provides itself. */
export type WorkerContext =
  | AppConfig
  | SqlClient.SqlClient
  | PgClient.PgClient
  | WorkerRegistry
  | FileSystem.FileSystem
  | Path.Path
  | Signer
  | PasswordResets
  | ReceiptWork
  | ReceiptWorkSettings
  | NotificationQueue
  | EffectQueueStore.EffectQueue
  | DeliverySettings
  | TeamApplicationsRepo

/** The delivery workers of the `backend` role. Each reads its settings from the AppConfig validated at start-up. */
export const BackendWorkers: ReadonlyArray<Layer.Layer<never, never, WorkerContext>> = [
  Layer.unwrapEffect(Effect.map(AppConfig, (config) => signerPurgeWorker(config.signer.purgeInterval))),
  Layer.unwrapEffect(Effect.map(AppConfig, (config) => inboxRetentionWorker(config.inbox.retentionInterval))),
  Layer.unwrapEffect(Effect.map(AppConfig, (config) => outboxWorkerLive(config.outbox))),
  // PASSWORD_RESET_DELIVERY=disabled: no worker; the rows wait, durable, for a process that runs enabled.
  Layer.unwrapEffect(Effect.map(AppConfig, (config) =>
    config.passwordReset.mode === "enabled"
      ? resetMailWorkerLive(config.passwordReset.settings)
      : Layer.effectDiscard(Effect.logInfo("password-reset delivery disabled: reset mail waits in the outbox")))),
  // RECEIPT_DELIVERY=disabled: no worker; the effects wait, durable (requests still make their bounded attempt
  // when receipt provider configuration is present).
  Layer.unwrapEffect(Effect.map(AppConfig, (config) =>
    config.receipts.mode === "enabled"
      ? receiptWorkerLayer
      : Layer.effectDiscard(Effect.logInfo("receipt delivery disabled: receipt effects wait in their queue")))),
  // TEAM_APPLICATION_DELIVERY=disabled (or unset): no worker; the queue items wait, durable, in effect_queue.
  Layer.unwrapEffect(Effect.map(AppConfig, (config) =>
    config.teamApplications.mode === "enabled"
      ? teamApplicationWorkers(config.teamApplications)
      : Layer.effectDiscard(Effect.logInfo("team-application delivery disabled: notifications wait in effect_queue"))))
]

/** Shared services, built after the start-up checks and before any worker. */
const ServicesLive = Layer.mergeAll(
  Readiness.Default,
  Identity.Default,
  PasswordResets.Default,
  // SIGNER_KEYS or SIGNER_KEYS_FILE; none set: verify only (no private keys in this process).
  Signer.Default.pipe(Layer.provide(KeySource.layerFromConfig))
).pipe(Layer.provideMerge(WorkerRegistry.Default))

/** Receipts and their effects executor, for the request path and the worker alike (one file store, one mailer). */
const ReceiptsServicesLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) => receiptsLayer(config.receipts)))

/** Team applications and their notification queue (submissions offer, the worker takes: one store). */
const TeamApplicationsServicesLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) => teamApplicationsLayer(config.teamApplications)))

/** The envelope inbox verifies with the shared Signer, so it is built on top of the shared services. */
const InboxServicesLive = EnvelopeInboxLive.pipe(Layer.provideMerge(ServicesLive))

/** The outbox signs with the shared Signer; its settings are the ones validated at start-up. */
const OutboxServicesLive = Outbox.Default.pipe(
  Layer.provide(Layer.effect(OutboxSettings, Effect.map(AppConfig, (config) => config.outbox)))
)

/**
 * Spec 001's tenant side: drain reads, the idle hold, the local-work probe and the API activity hold. The pending
 * durable work of every family is part of what a drain read reports.
 */
const PendingWorkLive = Layer.effect(
  PendingWork,
  Effect.gen(function* () {
    const outbox = yield* Outbox
    const resets = yield* ResetRequests
    const receipts = yield* Receipts
    const applications = yield* TeamApplications
    // Whether or not this process runs the family's worker: the work waits in the stack's database either way.
    return [
      { family: "outbox", pending: outbox.hasPendingWork },
      { family: "reset-mail", pending: resets.hasPendingWork },
      { family: "receipts", pending: receipts.hasPendingWork },
      { family: "team-applications", pending: applications.hasPendingWork }
    ]
  })
).pipe(Layer.provide(ResetRequests.Default), Layer.provide(ResetMailRepo.Default))

const IdleWakeServicesLive = Layer.unwrapEffect(Effect.map(AppConfig, (config) => idleWakeLayer(config.idleWake))).pipe(
  Layer.provide(PendingWorkLive)
)

/** The listener opens only after the workers are running; as the last resource it is also released first. */
const HttpLive = Layer.scopedDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    yield* Workers
    // Idle wake's gate around the whole app: the idle hold's refusals, requests in flight, API activity.
    const gate = yield* makeTenantGate
    const app = gate(yield* HttpApiBuilder.httpApp)
    const { url } = yield* serveDraining(app, {
      hostname: config.host,
      port: config.port,
      maxRequestBodySize: config.maxRequestBodyBytes,
      drainMs: config.shutdownDrainMs,
      routes: routeLabels(Api),
      reusePort: config.workers > 1
    })
    yield* Effect.logInfo(`listening on ${url} (role ${config.role})`)
    yield* announceListening
  })
).pipe(
  Layer.provide([HttpApiBuilder.Router.Live, HttpApiBuilder.Middleware.layer]),
  Layer.provide(DocsLive),
  Layer.provide(MetricsHttpLive),
  Layer.provide(ConsoleLive),
  Layer.provide(EdgeMiddlewareLive),
  Layer.provide(ApiLive),
  Layer.provide(BunHttpServer.layerContext)
)

/**
 * config → database → migrations + health check → services → workers → HTTP. Layers are released in reverse:
 * HTTP drains first, then workers are interrupted and joined, then the pool is disposed.
 */
export const makeApp = (options: { readonly workers: ReadonlyArray<Layer.Layer<never, never, WorkerContext>> }) =>
  Layer.unwrapEffect(
    Effect.map(loadConfig, (config): Layer.Layer<never, unknown> =>
      Option.isSome(config.cloud) ? Layer.discard(makeCloudApp(config, config.cloud.value)) : Layer.discard(HttpLive.pipe(
        Layer.provide(WorkersLive(options.workers)),
        // What the console and /metrics read of each queue family, from the family services built below.
        Layer.provideMerge(QueueViewsLive),
        Layer.provideMerge(IdleWakeServicesLive),
        Layer.provide(OutboxServicesLive),
        Layer.provideMerge(ReceiptsServicesLive),
        Layer.provideMerge(TeamApplicationsServicesLive),
        Layer.provide(InboxServicesLive),
        Layer.provide(StartupChecksLive),
        Layer.provide(LimitStoreStartupLive),
        Layer.provide(DatabaseLive),
        Layer.provide(Layer.effectDiscard(
          Effect.logInfo(`starting delivery backend, role ${config.role}`).pipe(
            Effect.annotateLogs(describeConfig(config)),
            Effect.zipRight(
              config.receipts.defaulted
                ? Effect.logWarning(
                  "RECEIPT_DELIVERY is unset: with the embedded development database it is taken as `disabled` (receipt effects wait). Real deployments must set it."
                )
                : Effect.void
            ),
            Effect.zipRight(
              config.teamApplications.defaulted
                ? Effect.logWarning(
                  "TEAM_APPLICATION_DELIVERY is unset: taken as `disabled` (team-application notifications wait in effect_queue). Set it to enabled or disabled."
                )
                : Effect.void
            ),
            Effect.zipRight(
              config.passwordReset.defaulted
                ? Effect.logWarning(
                  "PASSWORD_RESET_DELIVERY is unset: with the embedded development database it is taken as `disabled` (no reset mail is sent). Real deployments must set it; without DATABASE_URL's embedded default a missing value stops start-up."
                )
                : Effect.void
            )
          )
        )),
        Layer.provide(BunContext.layer),
        Layer.provide(Layer.succeed(AppConfig, config)),
        Layer.provide(telemetryLayer(config.observability, config.role)),
        Layer.provide(Logger.minimumLogLevel(config.logLevel))
      )))
  )
