import type { ConflictReason } from "./Domain.ts"

/**
 * Step 5 of spec 000 as a pure decision, taken while the stream row is locked.
 *
 * The replay floor F closes sequences 1..F: an operator raises it (never lowers it) to write off
 * sequences a producer will never send, or that may no longer be replayed. A closed sequence is only
 * ever acknowledged as a duplicate of an identity retained before. The contiguous cursor C is the
 * highest sequence such that every sequence 1..C is retained or closed; it never moves backwards.
 */
export interface LockedStream {
  readonly streamId: number
  readonly cursor: number
  readonly replayFloor: number
  /** The highest retained sequence (0 when none): above the cursor it means there are gaps. */
  readonly highSequence: number
}

export interface RetainedIdentity {
  readonly sequence: number
  readonly eventId: string
  readonly idempotencyKey: string
  readonly eventIdentity: string
}

export interface Incoming {
  readonly sequence: number
  readonly eventId: string
  readonly idempotencyKey: string
  readonly eventIdentity: string
}

export type Decision =
  | { readonly _tag: "Duplicate"; readonly sequence: number }
  | { readonly _tag: "Refuse"; readonly reason: ConflictReason }
  | {
    readonly _tag: "Accept"
    /** Arrived ahead of a gap, or filled one after later sequences were retained (audited as `reordered`). */
    readonly reordered: boolean
    /** The cursor moves: to this sequence, or (`throughRun`) through the retained run above it. */
    readonly advance: "none" | "to-sequence" | "through-run"
  }

/**
 * `existing` holds the retained identities of this stream that share the incoming event id, idempotency
 * key or sequence (at most three rows). The order of checks is spec 000's: retained event and
 * idempotency identities, then the replay floor, then the producer sequence.
 */
export const decide = (stream: LockedStream, existing: ReadonlyArray<RetainedIdentity>, incoming: Incoming): Decision => {
  const byEventId = existing.find((row) => row.eventId === incoming.eventId)
  if (byEventId !== undefined) {
    // Same event id and same signed bytes: the same event again. Anything else reuses the id.
    return byEventId.eventIdentity === incoming.eventIdentity
      ? { _tag: "Duplicate", sequence: byEventId.sequence }
      : { _tag: "Refuse", reason: "event-id-conflict" }
  }
  if (existing.some((row) => row.idempotencyKey === incoming.idempotencyKey)) {
    return { _tag: "Refuse", reason: "idempotency-key-conflict" }
  }
  if (incoming.sequence <= stream.replayFloor) return { _tag: "Refuse", reason: "sequence-below-replay-floor" }
  if (existing.some((row) => row.sequence === incoming.sequence)) return { _tag: "Refuse", reason: "sequence-conflict" }
  // A retained sequence at or below the cursor would have matched above, so this one is above it.
  const next = incoming.sequence === stream.cursor + 1
  const laterRetained = stream.highSequence > incoming.sequence
  return {
    _tag: "Accept",
    reordered: !next || laterRetained,
    advance: !next ? "none" : laterRetained ? "through-run" : "to-sequence"
  }
}

/** Models the cursor rule for tests: the highest C such that 1..C are all retained or closed. */
export const contiguousCursor = (retained: ReadonlySet<number>, replayFloor: number): number => {
  let cursor = replayFloor
  while (retained.has(cursor + 1)) cursor++
  return cursor
}
