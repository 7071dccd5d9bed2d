import type { TenantId } from "@delivery/signer"
import { FetchHttpClient } from "@effect/platform"
import { Clock, Context, Effect, Exit, Tracer } from "effect"
import type { ClaimedRow } from "./DeliveryRepo.ts"
import type { Send, SendOutcome } from "./Sender.ts"

/**
 * The context a delivery runs in: the parent span and the fetch settings the provider adapter honours. The
 * sender took every service it uses when it was built (its type requires none); the rest of the worker's
 * context (every service of the backend) only made each child fiber of a delivery costlier to join, since
 * their contexts are compared entry by entry (about 60 µs of CPU per delivery while the adapter's timeout
 * still forked one).
 */
const deliveryContext = Context.pick(Tracer.ParentSpan, FetchHttpClient.Fetch, FetchHttpClient.RequestInit)

// Stryker disable next-line ObjectLiteral,BooleanLiteral: the stack trace is CPU only; the attribute is checked by the backend's telemetry test
const deliverSpan = { attributes: { "delivery.family": "outbox" }, captureStackTrace: false } as const

/**
 * Sends a claimed batch in `concurrency` lanes, each sending one row after another: no fiber per row, and
 * interrupting the lanes aborts exactly the requests in flight. `settle` gets each outcome as it arrives,
 * synchronously after its send returned, so no interruption can come between a send and its bookkeeping.
 *
 * Each attempt's span (`OutboxDelivery.deliver`) is made here, handed to the sender as the provider call's parent
 * rather than made the current span, and ended here: `Effect.useSpan` per attempt (a context, fiber-ref copies, an
 * exit handler) cost more than the span. A lane interrupted mid-send (shutdown, cycle timeout) ends its open span
 * with the interruption.
 */
export const deliverInLanes = (
  send: Send,
  rows: ReadonlyArray<ClaimedRow>,
  concurrency: number,
  settle: (row: ClaimedRow, outcome: SendOutcome) => void
): Effect.Effect<void> => {
  let next = 0
  const lane = Effect.withFiberRuntime<void>((fiber) => {
    const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
    let open: Tracer.Span | undefined
    const end = (span: Tracer.Span, exit: Exit.Exit<unknown>) => span.end(clock.unsafeCurrentTimeNanos(), exit)
    return Effect.gen(function*() {
      while (next < rows.length) {
        const row = rows[next++]!
        const span = yield* Effect.makeSpan("OutboxDelivery.deliver", deliverSpan)
        open = span
        const outcome = yield* send({
          id: row.id,
          // Checked against the id pattern when the envelope was enqueued.
          tenant: row.tenant as TenantId,
          project: row.project,
          endpoint: row.endpoint,
          body: row.envelope,
          attempt: row.attempt,
          span
        })
        open = undefined
        end(span, Exit.succeed(outcome))
        settle(row, outcome)
      }
    }).pipe(Effect.onInterrupt(() => Effect.sync(() => open !== undefined && end(open, Exit.interrupt(fiber.id())))))
  })
  const lanes = Array.from({ length: Math.min(concurrency, rows.length) }, () => lane)
  // Stryker disable next-line BooleanLiteral: the lanes return nothing anyone reads, so collecting their results changes nothing
  return Effect.all(lanes, { concurrency: "unbounded", discard: true }).pipe(
    Effect.mapInputContext((context: Context.Context<never>) => deliveryContext(context))
  )
}
