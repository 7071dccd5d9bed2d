import type { VerifiedIdentity } from "@delivery/identity"
import { Clock, Duration, Effect } from "effect"
import type { CorrelationId } from "./Domain.ts"
import { auditContextOf, type CountedRefusalRow, InboxRepo, type StorageFailure } from "./InboxRepo.ts"
import { syncKey } from "./SyncLimiter.ts"

/** How often windows that are over are written. A row lands at most this long after its window closed. */
export const REFUSAL_FLUSH_INTERVAL = Duration.seconds(1)

/** Rows per INSERT: 11 parameters each, far below PostgreSQL's 65,535. */
const ROWS_PER_STATEMENT = 1_000

/**
 * Windows kept while the database cannot take them. Past this, the oldest are dropped (and logged): an
 * outage must not turn a flood of refusals into unbounded memory. One entry is one identity and window.
 */
export const MAX_PENDING_WINDOWS = 100_000

/** The stable code of every log line about audit rows of refusals that could not be written. */
export const FLUSH_FAILED = "inbox-audit-flush-failed"

interface Window {
  readonly row: Omit<CountedRefusalRow, "refusalCount">
  /** When the limiter admits this identity again (ms); refusals before then belong to this window. */
  end: number
  count: number
}

/**
 * Spec 000 wants an audit record of every authenticated refusal, and the sync limiter before any database
 * work. Both hold: a sync-rate-limited request only counts itself here, in memory; one row per verified
 * identity and limiter window, carrying the count (`refusal_count`), is written off the request path once
 * the window is over, and at shutdown by this service's scope finalizer. `inbox_audit` is append-only, so
 * a window's row is written once, complete. A crash loses the counts not yet written (docs/controlplane-inbound.md).
 */
export class RefusalAudit extends Effect.Service<RefusalAudit>()("@delivery/envelope-inbox/RefusalAudit", {
  scoped: Effect.gen(function* () {
    const repo = yield* InboxRepo
    // The current window of each identity (by its limiter key), and windows over but not yet written.
    const open = new Map<string, Window>()
    let closed: Array<Window> = []

    /** The request path's whole cost: a counter in memory. `retryAfter` (ms) is the limiter's. */
    const record = (identity: VerifiedIdentity, correlationId: CorrelationId, retryAfter: number) =>
      Effect.clockWith((clock) =>
        Effect.sync(() => {
          const now = clock.unsafeCurrentTimeMillis()
          const key = syncKey(identity)
          const current = open.get(key)
          if (current !== undefined && now < current.end) {
            current.count++
            current.end = Math.max(current.end, now + retryAfter)
            return
          }
          if (current !== undefined) closed.push(current)
          open.set(key, {
            // The window's first refused request names the row: its 429 and this row can be tied together.
            row: { ...auditContextOf(identity, correlationId), recordedAt: new Date(now), outcome: "refused", reason: "sync-rate-limited" },
            end: now + retryAfter,
            count: 1
          })
        })
      )

    // Synchronous, so two flushes never take the same window.
    const takeDue = (now: number, everything: boolean): Array<Window> => {
      const due = closed
      closed = []
      for (const [key, window] of open) {
        if (everything || window.end <= now) {
          due.push(window)
          open.delete(key)
        }
      }
      return due
    }

    const putBack = (windows: ReadonlyArray<Window>) =>
      Effect.suspend(() => {
        closed = [...windows, ...closed]
        const dropped = closed.length - MAX_PENDING_WINDOWS
        if (dropped <= 0) return Effect.void
        const refusals = closed.slice(0, dropped).reduce((sum, window) => sum + window.count, 0)
        closed = closed.slice(dropped)
        return Effect.logError("audit rows of rate-limited refusals dropped: too many windows waiting for the database").pipe(
          Effect.annotateLogs({ code: FLUSH_FAILED, windows: dropped, refusals })
        )
      })

    /**
     * Writes the windows that are over (all of them when `everything`), returning how many rows it wrote.
     * A failure puts them back for the next flush. Uninterruptible: a shutdown waits for a flush in
     * progress instead of losing what it had taken.
     */
    const flush = (everything: boolean): Effect.Effect<number, StorageFailure> =>
      Effect.uninterruptible(Effect.gen(function* () {
        const due = takeDue(yield* Clock.currentTimeMillis, everything)
        for (let start = 0; start < due.length; start += ROWS_PER_STATEMENT) {
          const batch = due.slice(start, start + ROWS_PER_STATEMENT)
          yield* repo.insertCountedRefusals(batch.map((window) => ({ ...window.row, refusalCount: window.count }))).pipe(
            Effect.tapError(() => putBack(due.slice(start)))
          )
        }
        return due.length
      }))

    const logFailure = (message: string) => (failure: StorageFailure) =>
      Effect.logWarning(message).pipe(
        Effect.annotateLogs({ code: FLUSH_FAILED, operation: failure.operation, sqlstate: failure.sqlstate })
      )

    // Added before the loop is forked, so it runs after the loop is interrupted: the last flush takes everything.
    yield* Effect.addFinalizer(() =>
      flush(true).pipe(
        Effect.catchTag("StorageFailure", logFailure("audit rows of rate-limited refusals not written at shutdown: their counts are lost"))
      )
    )
    yield* Effect.forkScoped(Effect.forever(
      Effect.sleep(REFUSAL_FLUSH_INTERVAL).pipe(
        Effect.zipRight(flush(false)),
        Effect.catchTag("StorageFailure", logFailure("audit rows of rate-limited refusals not written; retrying on the next tick"))
      )
    ))

    return {
      record,
      /** Writes the windows that are over now (what every tick does). */
      flushDue: flush(false)
    } as const
  }),
  dependencies: [InboxRepo.Default]
}) {}
