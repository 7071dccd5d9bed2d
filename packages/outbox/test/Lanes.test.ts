import { ProviderHttp } from "@delivery/core"
import { recordingTracer } from "@delivery/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Option, type Tracer } from "effect"
import type { ClaimedRow } from "../src/DeliveryRepo.ts"
import { deliverInLanes } from "../src/Lanes.ts"
import { NotSent, type Send, type SendOutcome, type StartSend } from "../src/Sender.ts"

// The lanes of a batch run from one fiber when the sender offers `start` (docs/controlplane-outbound.md, "One fiber
// per batch"). The rules are the lanes' own: at most `concurrency` attempts at a time, each row's outcome settled
// once, an attempt's span nested in the tick's and ended with its outcome, interruption aborting exactly the
// attempts in flight (never settled, spans ended with the interruption), a defect stopping the batch.

const rowsOf = (count: number): Array<ClaimedRow> =>
  Array.from({ length: count }, (_, i) => ({
    id: `row-${i}`,
    tenant: "acme",
    project: "web",
    attempt: 1,
    attempt_ceiling: 10,
    envelope: "{}",
    endpoint: "http://127.0.0.1:9/hooks"
  }))

const delivered = new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 })

/** The Effect form is never used when `start` is offered; calling it fails the test. */
const withStart = (start: StartSend): Send =>
  Object.assign(() => Effect.dieMessage("the lanes used send instead of start"), { start })

/** A start whose attempts answer when the test says so; it counts what is in flight and what was aborted. */
const controlledStart = () => {
  const waiting: Array<{ readonly id: string; readonly answer: (outcome: SendOutcome) => void }> = []
  const aborted: Array<string> = []
  let inFlight = 0
  let mostInFlight = 0
  const start: StartSend = (delivery, done) => {
    inFlight++
    mostInFlight = Math.max(mostInFlight, inFlight)
    let over = false
    waiting.push({
      id: delivery.id,
      answer: (outcome) => {
        if (over) return
        over = true
        inFlight--
        done(outcome)
      }
    })
    return () => {
      if (over) return
      over = true
      inFlight--
      aborted.push(delivery.id)
    }
  }
  return { aborted, mostInFlight: () => mostInFlight, start, waiting }
}

const ended = (span: Tracer.Span) => (span.status._tag === "Ended" ? span.status.exit : undefined)

describe("deliverInLanes from one fiber (a sender's start)", () => {
  it.live("at most `concurrency` attempts at a time, rows started in order, each settled once with its outcome, the batch done only once the last attempt answered; each attempt's span nests in the current span and ends with its outcome", () =>
    Effect.gen(function*() {
      const { spans, tracer } = yield* recordingTracer
      const control = controlledStart()
      const settled: Array<[string, string]> = []
      const fiber = yield* Effect.fork(
        deliverInLanes(withStart(control.start), rowsOf(7), 3, (row, outcome) => settled.push([row.id, outcome._tag])).pipe(
          Effect.withSpan("OutboxDelivery.tick"),
          Effect.withTracer(tracer)
        )
      )
      yield* Effect.sleep("10 millis")
      expect(control.waiting.map((w) => w.id)).toEqual(["row-0", "row-1", "row-2"])
      // Answered out of order: each answer starts the next row.
      control.waiting[1]!.answer(delivered)
      control.waiting[0]!.answer(new ProviderHttp.Temporary({ code: "provider-5xx", status: 503 }))
      expect(control.waiting.map((w) => w.id)).toEqual(["row-0", "row-1", "row-2", "row-3", "row-4"])
      for (let i = 2; i < 6; i++) control.waiting[i]!.answer(delivered)
      // Every row has started; the batch still waits for the last answer.
      yield* Effect.sleep("10 millis")
      expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
      control.waiting[6]!.answer(delivered)
      yield* Fiber.join(fiber)
      expect(control.mostInFlight()).toBe(3)
      expect(settled).toEqual([
        ["row-1", "Delivered"],
        ["row-0", "Temporary"],
        ["row-2", "Delivered"],
        ["row-3", "Delivered"],
        ["row-4", "Delivered"],
        ["row-5", "Delivered"],
        ["row-6", "Delivered"]
      ])
      const delivers = spans.filter((span) => span.name === "OutboxDelivery.deliver")
      expect(delivers.length).toBe(7)
      for (const span of delivers) {
        expect(span.attributes.get("delivery.family")).toBe("outbox")
        expect(span.parent._tag === "Some" && (span.parent.value as Tracer.Span).name).toBe("OutboxDelivery.tick")
        const exit = ended(span)
        expect(exit !== undefined && Exit.isSuccess(exit)).toBe(true)
      }
    }))

  it.effect("attempts answered before start returns (not sent) are settled in the loop: 20,000 rows, no stack growth, one resumption", () =>
    Effect.gen(function*() {
      const notSent = new NotSent({ code: "target-missing" })
      let started = 0
      const settled: Array<string> = []
      yield* deliverInLanes(
        withStart((_, done) => {
          started++
          done(notSent)
          return () => {}
        }),
        rowsOf(20_000),
        10,
        (row) => settled.push(row.id)
      )
      expect(started).toBe(20_000)
      expect(settled.length).toBe(20_000)
      expect(new Set(settled).size).toBe(20_000)
      expect(settled[0]).toBe("row-0")
      expect(settled[19_999]).toBe("row-19999")
    }))

  it.live("interruption aborts exactly the attempts in flight, settles none of them, starts no further row and ends their spans with the interruption", () =>
    Effect.gen(function*() {
      const { spans, tracer } = yield* recordingTracer
      const control = controlledStart()
      const settled: Array<string> = []
      const fiber = yield* Effect.fork(
        deliverInLanes(withStart(control.start), rowsOf(10), 4, (row) => settled.push(row.id)).pipe(Effect.withTracer(tracer))
      )
      yield* Effect.sleep("10 millis")
      control.waiting[0]!.answer(delivered)
      yield* Fiber.interrupt(fiber)
      // Late answers of aborted attempts change nothing.
      for (const w of control.waiting) w.answer(delivered)
      expect(settled).toEqual(["row-0"])
      expect(control.aborted.sort()).toEqual(["row-1", "row-2", "row-3", "row-4"])
      expect(control.waiting.map((w) => w.id)).toEqual(["row-0", "row-1", "row-2", "row-3", "row-4"])
      const delivers = spans.filter((span) => span.name === "OutboxDelivery.deliver")
      expect(delivers.map((span) => {
        const exit = ended(span)
        return exit === undefined ? "open" : Exit.isInterrupted(exit) ? "interrupted" : "ended"
      })).toEqual(["ended", "interrupted", "interrupted", "interrupted", "interrupted"])
    }))

  it.effect("where a span straight from the tracer would not be Effect's (span annotations), each lane is a fiber waiting for send; with tracing turned off the batch still runs from one fiber", () =>
    Effect.gen(function*() {
      const used: Array<string> = []
      const send: Send = Object.assign(
        () => Effect.sync(() => used.push("send")).pipe(Effect.as(delivered)),
        { start: ((_, done) => (used.push("start"), done(delivered), () => {})) satisfies StartSend }
      )
      const settled: Array<string> = []
      const batch = deliverInLanes(send, rowsOf(3), 2, (row) => settled.push(row.id))
      yield* batch
      expect(used).toEqual(["start", "start", "start"])
      used.length = 0
      yield* batch.pipe(Effect.annotateSpans("tenant", "acme"))
      expect(used).toEqual(["send", "send", "send"])
      used.length = 0
      yield* batch.pipe(Effect.withTracerEnabled(false))
      expect(used).toEqual(["start", "start", "start"])
      expect(settled.length).toBe(9)
    }))

  it.live("a defect thrown by start stops the batch: the attempts in flight are aborted and the batch dies", () =>
    Effect.gen(function*() {
      const control = controlledStart()
      const start: StartSend = (delivery, done) => {
        if (delivery.id === "row-2") throw new Error("ProviderHttp.send: invalid header")
        return control.start(delivery, done)
      }
      const settled: Array<string> = []
      const exit = yield* Effect.exit(deliverInLanes(withStart(start), rowsOf(5), 3, (row) => settled.push(row.id)))
      expect(Exit.isFailure(exit) && !Exit.isInterrupted(exit)).toBe(true)
      expect(String(Exit.isFailure(exit) && exit.cause)).toContain("invalid header")
      expect(control.aborted.sort()).toEqual(["row-0", "row-1"])
      expect(settled).toEqual([])
    }))
})
