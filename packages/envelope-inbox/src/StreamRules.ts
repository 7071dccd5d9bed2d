/**
 * Step 5 of spec 000, the stream rules. They are enforced inside the `inbox_ingest` function
 * (migrations/0005_inbox_ingest_function.sql), under the stream lock and in the same statement that
 * commits, so that checking and writing take one round trip; this module keeps the vocabulary and the
 * model tests compare against.
 *
 * The replay floor F closes sequences 1..F: an operator raises it (never lowers it) to write off
 * sequences a producer will never send, or that may no longer be replayed. A closed sequence is only
 * ever acknowledged as a duplicate of an identity retained before. The contiguous cursor C is the
 * highest sequence such that every sequence 1..C is retained or closed; it never moves backwards.
 * The checks run in spec 000's order: retained event id (same bytes: duplicate; other bytes:
 * `event-id-conflict`), idempotency key (`idempotency-key-conflict`), replay floor
 * (`sequence-below-replay-floor`), producer sequence (`sequence-conflict`); anything else is accepted,
 * audited as `reordered` when it arrived ahead of a gap or filled one below later retained sequences.
 */
export interface LockedStream {
  readonly streamId: number
  readonly cursor: number
  readonly replayFloor: number
  /** The highest retained sequence (0 when none): above the cursor it means there are gaps. */
  readonly highSequence: number
}

/** Models the cursor rule for tests: the highest C such that 1..C are all retained or closed. */
export const contiguousCursor = (retained: ReadonlySet<number>, replayFloor: number): number => {
  let cursor = replayFloor
  while (retained.has(cursor + 1)) cursor++
  return cursor
}
