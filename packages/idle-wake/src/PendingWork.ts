import { Context, type Effect } from "effect"

/**
 * Durable work that this stack's own workers still have to do (outbox deliveries, reset mail, receipt effects,
 * team-application notifications): a stack that sleeps with it would leave accepted work waiting for a wake that
 * may never come. The backend supplies one probe per family, read inside the drain's read-only snapshot; any
 * failure of a probe fails the read (storage unavailable), never a report without it.
 */
export interface PendingWorkProbe {
  readonly family: string
  readonly pending: Effect.Effect<boolean, unknown>
}

export class PendingWork extends Context.Tag("@delivery/idle-wake/PendingWork")<PendingWork, ReadonlyArray<PendingWorkProbe>>() {}
