import { type QueueView, queueSnapshotOf } from "@delivery/core"
import { Effect } from "effect"
import { StackState } from "./CloudDomain.ts"
import { CloudStacksRepo } from "./CloudStacksRepo.ts"
import { ConnectorEventsRepo } from "./ConnectorEventsRepo.ts"

// The cloud role's durable families as core's QueueView, each on its repository alone: the services expose them, and
// a test reads them without starting the role's workers.

/**
 * The stacks: counted by state (awake, draining, stopping, stop-uncertain, asleep, waking, suspended, archived). Due:
 * a stack left mid-operation, the sleep cycle's or the wake's lease ended (aged from its end), or an uncertain stop
 * waiting for recovery (aged from when it became one); an asleep stack waits for a request, not for a worker.
 * Completed: wakes that brought a stack up (its `awake` audit rows), by their time; an operator's resume or a recovery
 * that finds the compute running is not a wake.
 */
export const stacksQueueView = Effect.map(CloudStacksRepo, (repo): QueueView => ({
  family: "cloud-stacks",
  title: "Stacks",
  snapshot: Effect.map(repo.queueView, queueSnapshotOf("cloud-stacks", StackState.literals)).pipe(
    Effect.withSpan("CloudStacks.queueView")
  )
}))

/**
 * The connector event queue: events by state (pending, also while a delivery holds its lease; delivered; dead). Due: a
 * pending event the claim would take now, its retry delay over and no live lease, aged from the later of the two;
 * completed: events delivered (the tenant's receipt), by their settlement time.
 */
export const connectorEventsQueueView = Effect.map(ConnectorEventsRepo, (repo): QueueView => ({
  family: "cloud-connector-events",
  title: "Connector events",
  snapshot: Effect.map(repo.queueView, queueSnapshotOf("cloud-connector-events", ["pending", "delivered", "dead"])).pipe(
    Effect.withSpan("ConnectorEvents.queueView")
  )
}))
