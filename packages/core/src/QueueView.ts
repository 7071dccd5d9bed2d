import { Context, type Effect } from "effect"

/** How many items of a queue family are in one state now. */
export interface StateCount {
  readonly state: string
  readonly count: number
}

/**
 * What an operator (the console's overview) and a monitoring system (`/metrics`) see of one durable queue family,
 * read from PostgreSQL, so every process of a deployment reports the same numbers.
 */
export interface QueueSnapshot {
  readonly family: string
  /** Every state the family's table allows, in its lifecycle order, zero counts included. */
  readonly states: ReadonlyArray<StateCount>
  /**
   * Seconds since the oldest item that is due now (unfinished and its next attempt at or before now, or its
   * lease expired) became due; `null` when nothing is due. A growing value means the workers are not keeping up
   * or not running.
   */
  readonly oldestDueAgeSeconds: number | null
  /** Items that reached their successful end (delivered, done, accepted) in each of the last twelve five-minute windows, oldest first. */
  readonly completedLastHour: ReadonlyArray<number>
}

/** One family's reading: a bounded number of aggregate queries, no payloads, no addresses. */
export interface QueueView {
  readonly family: string
  /** The label an operator reads, e.g. "Outbox". */
  readonly title: string
  readonly snapshot: Effect.Effect<QueueSnapshot, unknown>
}

/** The queue families of this process's role, in the order the console shows them. */
export class QueueViews extends Context.Tag("@delivery/core/QueueViews")<QueueViews, ReadonlyArray<QueueView>>() {}

/** Twelve five-minute windows: the length of `completedLastHour`. */
export const COMPLETED_WINDOWS = 12
export const COMPLETED_WINDOW_SECONDS = 300
