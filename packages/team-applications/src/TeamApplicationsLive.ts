import { PersistedQueue } from "@effect/experimental"
import { Backoff } from "@delivery/core"
import { Mailer } from "@delivery/mail"
import { Duration, Layer, Option } from "effect"
import { cleanupWorkerLayer, deliveryWorkerLayer, DeliverySettings, notificationHooks } from "./Delivery.ts"
import { QUEUE_NAME } from "./Domain.ts"
import * as EffectQueueStore from "./EffectQueueStore.ts"
import { makeNotificationQueue, NotificationQueue, TeamApplications, TeamApplicationsSender } from "./TeamApplications.ts"
import type { TeamApplicationsSettings } from "./TeamApplicationsConfig.ts"
import { TeamApplicationsRepo } from "./TeamApplicationsRepo.ts"

/** The project's queue store for the notifications, with the outbox hooks, under the configured timing. */
export const notificationStoreLayer = (timing: TeamApplicationsSettings["timing"]) =>
  EffectQueueStore.layer({
    leaseDuration: Duration.millis(timing.staleMs),
    pollInterval: timing.pollInterval,
    backoff: Backoff.make({ base: timing.retryBase, cap: timing.retryCap, jitter: 0.2 }),
    hooks: { [QUEUE_NAME]: notificationHooks }
  })

/**
 * Team applications for one process's settings, in every role: submissions offer their queue items through the
 * same store the worker takes them from. The store starts no poller until something takes.
 */
export const teamApplicationsLayer = (settings: TeamApplicationsSettings) => {
  const store = notificationStoreLayer(settings.timing)
  const queue = Layer.effect(NotificationQueue, makeNotificationQueue).pipe(Layer.provide(PersistedQueue.layer))
  const shared = Layer.mergeAll(
    queue,
    Layer.succeed(TeamApplicationsSender, settings.sender),
    Layer.succeed(DeliverySettings, settings.timing),
    TeamApplicationsRepo.Default
  ).pipe(Layer.provideMerge(store))
  return TeamApplications.Default.pipe(Layer.provideMerge(shared))
}

/** The workers of an `enabled` process: delivery (with the mail provider) and the hourly queue clean-up. */
export const teamApplicationWorkers = (settings: TeamApplicationsSettings) =>
  Option.match(settings.provider, {
    onNone: () => Layer.empty,
    onSome: (provider) => Layer.merge(deliveryWorkerLayer.pipe(Layer.provide(Mailer.layerWith(provider))), cleanupWorkerLayer)
  })
