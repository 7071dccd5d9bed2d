import { workerLayer } from "@delivery/core"
import { Clock, Duration, Effect, Layer } from "effect"
import { RetentionIntervalConfig } from "./InboxConfig.ts"
import { InboxRepo, RETENTION_BATCH } from "./InboxRepo.ts"

/**
 * One sweep deletes at most this many batches (1,000,000 payloads), so a tick stays bounded even after
 * a long outage; whatever is left is taken by the next sweep.
 */
export const MAX_BATCHES_PER_SWEEP = 1_000

export interface SweepResult {
  /** Rows deleted by each statement, in order: every entry is at most RETENTION_BATCH. */
  readonly batches: ReadonlyArray<number>
  readonly deleted: number
}

/**
 * Spec 000 "Retention and recovery": expired payloads are deleted in batches of at most 1,000, by a
 * statement that can delete only the payload table (it runs as `inbox_retention`). Event ids,
 * idempotency keys, sequences, cursors, floors and audit rows stay, so a payload's expiry can never
 * make its event new again.
 */
export class InboxRetention extends Effect.Service<InboxRetention>()("@delivery/envelope-inbox/InboxRetention", {
  effect: Effect.gen(function* () {
    const repo = yield* InboxRepo

    /**
     * Deletes payloads that expired before `at` (default: now, from Effect's Clock), until a batch comes back
     * short or `maxBatches` statements have run.
     */
    const sweep = Effect.fn("InboxRetention.sweep")(function* (at?: Date, maxBatches: number = MAX_BATCHES_PER_SWEEP) {
      const now = at ?? new Date(yield* Clock.currentTimeMillis)
      const batches: Array<number> = []
      while (batches.length < maxBatches) {
        const deleted = yield* repo.deleteExpiredBatch(now)
        batches.push(deleted)
        if (deleted < RETENTION_BATCH) break
      }
      return { batches, deleted: batches.reduce((a, b) => a + b, 0) } satisfies SweepResult
    })

    return { sweep } as const
  }),
  dependencies: [InboxRepo.Default]
}) {}

/** Sweep, log, wait `interval`, repeat; a failed sweep (database down) is logged and waited out like any other. */
export const retentionLoop = (interval: Duration.DurationInput) =>
  Effect.gen(function* () {
    const retention = yield* InboxRetention
    const tick = retention.sweep().pipe(
      Effect.tap(({ batches, deleted }) =>
        deleted === 0 ? Effect.void : Effect.logInfo("inbox retention: expired payloads deleted").pipe(
          Effect.annotateLogs({ deleted, statements: batches.length })
        )),
      Effect.catchTag("StorageFailure", (failure) =>
        Effect.logWarning("inbox retention sweep failed; retrying after the interval").pipe(
          Effect.annotateLogs({ operation: failure.operation, sqlstate: failure.sqlstate })
        ))
    )
    return yield* Effect.forever(Effect.zipRight(tick, Effect.sleep(interval)))
  })

/** The retention worker as the backend's worker list holds it: `workerLayer("inbox-retention", ...)`; needs `SqlClient` and `WorkerRegistry`. */
export const inboxRetentionWorker = (interval: Duration.DurationInput) =>
  workerLayer("inbox-retention", retentionLoop(interval)).pipe(Layer.provide(InboxRetention.Default))

/** The same, reading INBOX_RETENTION_INTERVAL itself (an invalid value is a defect at start-up). */
export const InboxRetentionWorker = Layer.unwrapEffect(
  Effect.map(Effect.orDie(RetentionIntervalConfig), inboxRetentionWorker)
)
