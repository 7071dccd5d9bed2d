import { QueueViews } from "@delivery/core"
import { EnvelopeInbox } from "@delivery/envelope-inbox"
import { CloudStacks, ConnectorEventInbox, ConnectorEvents } from "@delivery/idle-wake"
import { Outbox } from "@delivery/outbox"
import { Receipts } from "@delivery/receipts"
import { ResetMailRepo, ResetRequests } from "@delivery/reset-mail"
import { TeamApplications } from "@delivery/team-applications"
import { Effect, Layer } from "effect"

/**
 * The backend role's durable queue families, in the order the console shows them, each read by the service of the
 * package that owns its tables. Whether or not this process runs a family's worker: the rows are in the database
 * either way, and every process of a deployment reports the same numbers.
 */
export const QueueViewsLive = Layer.effect(
  QueueViews,
  Effect.gen(function* () {
    return [
      (yield* Outbox).queueView,
      (yield* EnvelopeInbox).queueView,
      (yield* ResetRequests).queueView,
      (yield* Receipts).queueView,
      (yield* TeamApplications).queueView,
      (yield* ConnectorEventInbox).queueView
    ]
  })
).pipe(Layer.provide(ResetRequests.Default), Layer.provide(ResetMailRepo.Default))

/** The cloud role's durable families: its stacks and its connector event queue. */
export const CloudQueueViewsLive = Layer.effect(
  QueueViews,
  Effect.gen(function* () {
    return [(yield* CloudStacks).queueView, (yield* ConnectorEvents).queueView]
  })
)
