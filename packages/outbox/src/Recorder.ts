import { Duration, Effect, Fiber } from "effect"
import { type Decision, decideAtOnce, record, type Recorded, retryAt, type RetryLater } from "./Delivery.ts"
import type { ClaimedRow, DeliveryRepo } from "./DeliveryRepo.ts"
import type { Settings } from "./OutboxConfig.ts"
import type { SendOutcome } from "./Sender.ts"

/**
 * How often a batch still being delivered records what has finished. A process killed outright
 * (SIGKILL) re-sends, after its lease expires, only the deliveries in flight and those that
 * completed since the last recording write: at most this interval plus that write's own time.
 */
export const RECORD_EVERY = Duration.millis(100)

/**
 * The outcomes of one claimed batch, written while the batch runs: every RECORD_EVERY the outcomes
 * that arrived since the last write go out as one fenced, batched `record` (nothing is written
 * when nothing arrived, so a batch that finishes within the interval costs one write, as before).
 * `add` is synchronous so that an outcome, once the send returned, can never be dropped by an
 * interruption between the send and its bookkeeping.
 */
export const makeRecorder = (
  repo: DeliveryRepo,
  settings: Pick<Settings, "backoff" | "retryAfterMax">
) =>
  Effect.gen(function*() {
    // An outcome is decided when written (a retry's backoff starts from the Clock then). Plain
    // values until then: a batch of 100 stays one cheap write.
    let pending: Array<{ readonly row: ClaimedRow; readonly decision?: Decision; readonly outcome?: SendOutcome }> = []
    const settled = new Set<string>()
    const totals = { delivered: 0, retried: 0, dead: 0, lost: 0 }

    // Never runs twice at once: the periodic loop writes one after another, and `finish` writes only
    // once that loop has stopped.
    const write = Effect.suspend(() => {
      // Stryker disable next-line ConditionalExpression: an empty batch writes nothing either way (record issues no statement for a kind without rows)
      if (pending.length === 0) return Effect.void
      const batch = pending
      pending = []
      // Decided in a plain loop: only retries take a step of the runtime (for their due time). A generator that
      // yielded once per row was compiled again and again by JavaScriptCore (21 times in two timed runs of the bench).
      // Stryker disable next-line ArrayDeclaration: a stray non-tuple entry matches no outcome kind in record, so it is never written
      const decided: Array<readonly [ClaimedRow, Decision]> = []
      const retries: Array<readonly [ClaimedRow, RetryLater]> = []
      for (const { decision, outcome, row } of batch) {
        const now = decision ?? decideAtOnce(outcome!, row)
        if (now._tag === "RetryLater") retries.push([row, now])
        else decided.push([row, now])
      }
      const all = retries.length === 0 ? Effect.succeed(decided) : Effect.map(
        Effect.forEach(retries, ([row, later]) => Effect.map(retryAt(later, row, settings), (d) => [row, d] as const)),
        (timed) => [...decided, ...timed]
      )
      return Effect.flatMap(all, (entries) => Effect.map(record(repo, entries), count)).pipe(
        // Not written: kept for the next write. A write that did land but failed to answer is refused
        // by the fence the second time (counted as lost), never applied twice.
        Effect.tapError(() => Effect.sync(() => (pending = [...batch, ...pending])))
      )
    })

    const settle = (row: ClaimedRow, outcome: SendOutcome) => {
      settled.add(row.id)
      pending.push({ row, outcome })
    }

    const count = (recorded: Recorded) => {
      totals.delivered += recorded.delivered
      totals.retried += recorded.retried
      totals.dead += recorded.dead
      totals.lost += recorded.lost
    }

    // Only the wait is interruptible: stopping the loop lets a write in progress finish, so `finish`
    // never races a write whose outcome it cannot know.
    const loop = Effect.interruptible(Effect.sleep(RECORD_EVERY)).pipe(
      Effect.zipRight(Effect.uninterruptible(Effect.catchAll(write, (error) =>
        Effect.logWarning("outbox outcomes not recorded yet; retrying with the next write").pipe(
          Effect.annotateLogs({ error: error._tag })
        )))),
      Effect.forever
    )
    const fiber = yield* Effect.fork(loop)

    return {
      /** The outcome of a send; synchronous, so no interruption can come between a send and this. */
      add: settle,
      /** A decision made without a send (a row claimed past its attempt ceiling). */
      addDecision: (row: ClaimedRow, decision: Decision) => {
        settled.add(row.id)
        pending.push({ row, decision })
      },
      /** `outcome` for each of `rows` that has none yet. */
      addUnsettled: (rows: ReadonlyArray<ClaimedRow>, outcome: SendOutcome) => {
        for (const row of rows) if (!settled.has(row.id)) settle(row, outcome)
      },
      /** Stops the periodic writes (a write in progress finishes) and records whatever is left. */
      finish: Effect.zipRight(Fiber.interrupt(fiber), Effect.map(write, () => ({ ...totals } satisfies Recorded)))
    } as const
  })
