import { plainSpans, type ProviderHttp } from "@delivery/core"
import type { TenantId } from "@delivery/signer"
import { FetchHttpClient } from "@effect/platform"
import { Clock, Context, Effect, Exit, Tracer } from "effect"
import type { ClaimedRow } from "./DeliveryRepo.ts"
import type { Delivery, Send, SendOutcome, StartSend } from "./Sender.ts"

/**
 * The context a delivery runs in: the parent span and the fetch settings the provider adapter honours. The
 * sender took every service it uses when it was built (its type requires none); the rest of the worker's
 * context (every service of the backend) only made each child fiber of a delivery costlier to join, since
 * their contexts are compared entry by entry (about 60 µs of CPU per delivery while the adapter's timeout
 * still forked one).
 */
const deliveryContext = Context.pick(Tracer.ParentSpan, FetchHttpClient.Fetch, FetchHttpClient.RequestInit)

// Stryker disable next-line ObjectLiteral,BooleanLiteral: the stack trace is CPU only; the attribute is checked by the backend's telemetry test
const DELIVER_SPAN = "OutboxDelivery.deliver"
const deliverSpan = { attributes: { "delivery.family": "outbox" }, captureStackTrace: false } as const
const deliverAttributes = Object.entries(deliverSpan.attributes)

/**
 * Sends a claimed batch in `concurrency` lanes, each sending one row after another: no fiber per row, and
 * interrupting the lanes aborts exactly the requests in flight. `settle` gets each outcome as it arrives,
 * synchronously after its send returned, so no interruption can come between a send and its bookkeeping.
 *
 * Each attempt's span (`OutboxDelivery.deliver`) is made here, handed to the sender as the provider call's parent
 * rather than made the current span, and ended here: `Effect.useSpan` per attempt (a context, fiber-ref copies, an
 * exit handler) cost more than the span. A lane interrupted mid-send (shutdown, cycle timeout) ends its open span
 * with the interruption.
 *
 * A sender that offers `start` (the HTTP sender with keys in this process, the no-op sender) has the whole batch run
 * from this one fiber (`fromOneFiber`); any other has each lane a fiber of its own that waits for each `send`.
 */
export const deliverInLanes = (
  send: Send,
  rows: ReadonlyArray<ClaimedRow>,
  concurrency: number,
  settle: (row: ClaimedRow, outcome: SendOutcome) => void
): Effect.Effect<void> =>
  (send.start === undefined
    ? inLaneFibers(send, rows, concurrency, settle)
    : fromOneFiber(send, send.start, rows, concurrency, settle)).pipe(
      Effect.mapInputContext((context: Context.Context<never>) => deliveryContext(context))
    )

const deliveryOf = (row: ClaimedRow, span: Tracer.Span): Delivery => ({
  id: row.id,
  // Checked against the id pattern when the envelope was enqueued.
  tenant: row.tenant as TenantId,
  project: row.project,
  endpoint: row.endpoint,
  body: row.envelope,
  attempt: row.attempt,
  span
})

/** Each lane a fiber, each attempt a `send` the lane waits for. */
const inLaneFibers = (
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
        const span = yield* Effect.makeSpan(DELIVER_SPAN, deliverSpan)
        open = span
        const outcome = yield* send(deliveryOf(row, span))
        open = undefined
        end(span, Exit.succeed(outcome))
        settle(row, outcome)
      }
    }).pipe(Effect.onInterrupt(() => Effect.sync(() => open !== undefined && end(open, Exit.interrupt(fiber.id())))))
  })
  const lanes = Array.from({ length: Math.min(concurrency, rows.length) }, () => lane)
  // Stryker disable next-line BooleanLiteral: the lanes return nothing anyone reads, so collecting their results changes nothing
  return Effect.all(lanes, { concurrency: "unbounded", discard: true })
}

/**
 * The same lanes without a fiber each: the sender's `start` runs up to `concurrency` attempts at a time and this
 * fiber is resumed once, when the batch is done. Resuming a lane's fiber after each attempt cost more CPU than the
 * rest of the attempt outside `fetch` and the signature. The spans, the order of the rows, `settle` per outcome and
 * interruption are the lanes' own: interrupting this aborts exactly the attempts in flight and ends their spans with
 * the interruption, and an aborted attempt is never settled. A defect thrown by `start` stops the batch like a
 * lane's defect: the attempts in flight are aborted and this dies.
 */
const fromOneFiber = (
  send: Send,
  start: StartSend,
  rows: ReadonlyArray<ClaimedRow>,
  concurrency: number,
  settle: (row: ClaimedRow, outcome: SendOutcome) => void
): Effect.Effect<void> =>
  Effect.withFiberRuntime<void>((fiber) => {
    // The spans are made straight from the tracer only where that is the span Effect would make.
    const spans = plainSpans(fiber)
    if (spans === undefined) return inLaneFibers(send, rows, concurrency, settle)
    const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
    return Effect.async<void>((resume) => {
      let next = 0
      let stopped = false
      /** The attempts in flight (at most `concurrency`): each one's span and how to abort it. */
      const inFlight = new Map<Tracer.Span, ProviderHttp.Abort>()
      const abortInFlight = () => {
        stopped = true
        for (const [span, abort] of inFlight) {
          abort(fiber.id())
          span.end(clock.unsafeCurrentTimeNanos(), Exit.interrupt(fiber.id()))
        }
        inFlight.clear()
      }
      const fail = (defect: unknown) => {
        abortInFlight()
        resume(Effect.die(defect))
      }
      const notYetStarted: ProviderHttp.Abort = () => {}
      // Starts rows while fewer than `concurrency` are in flight; an attempt answered before `start` returned is
      // settled within this loop, a later answer starts the next row itself.
      const launch = (): void => {
        try {
          while (!stopped && inFlight.size < concurrency && next < rows.length) {
            const row = rows[next++]!
            const span = spans(DELIVER_SPAN)
            for (const [key, value] of deliverAttributes) span.attribute(key, value)
            inFlight.set(span, notYetStarted)
            let returned = false
            const abort = start(deliveryOf(row, span), (outcome) => {
              inFlight.delete(span)
              span.end(clock.unsafeCurrentTimeNanos(), Exit.succeed(outcome))
              if (!returned) return settle(row, outcome)
              try {
                settle(row, outcome)
              } catch (defect) {
                return fail(defect)
              }
              launch()
            })
            returned = true
            if (inFlight.has(span)) inFlight.set(span, abort)
          }
          if (!stopped && inFlight.size === 0 && next >= rows.length) {
            stopped = true
            resume(Effect.void)
          }
        } catch (defect) {
          fail(defect)
        }
      }
      launch()
      return Effect.sync(abortInFlight)
    })
  })
