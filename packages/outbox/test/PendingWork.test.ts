import { expect, layer } from "@effect/vitest"
import { ProviderHttp } from "@delivery/core"
import { LoopbackProvider } from "@delivery/testing"
import { Duration, Effect } from "effect"
import { Outbox, type SendOutcome, senderOf } from "../src/index.ts"
import { deliveryWith, request, resetOutbox, rowOf, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

// Spec 001: a tenant stack is put to sleep only when its own durable workers have no accepted work left. Messages
// are accepted through Outbox.enqueue and end through the worker's own tick, on a database of this file's own.

layer(SuiteLayer, { excludeTestServices: true })("Outbox pending work (spec 001, real PostgreSQL)", (it) => {
  it.effect("spec 001: a stack with unfinished outbox work does not sleep: a message is pending from its enqueue, also while its retry waits, until it is delivered or dead-lettered", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const outbox = yield* Outbox
      const receiver = yield* LoopbackProvider
      expect(yield* outbox.hasPendingWork).toBe(false)
      // A delivery target is configuration, not work.
      yield* setupTenant("acme", "web", receiver.urlFor("/hooks/acme"))
      expect(yield* outbox.hasPendingWork).toBe(false)

      const retried = (yield* outbox.enqueue(request("acme", "web"))).message
      const rejected = (yield* outbox.enqueue(request("acme", "web"))).message
      expect(yield* outbox.hasPendingWork).toBe(true)

      // First attempt: one message is refused (dead letter at once), the other answered 503 (waits for its retry).
      let answer = (id: string): SendOutcome =>
        id === rejected.id
          ? new ProviderHttp.Rejected({ code: "provider-4xx", status: 410 })
          : new ProviderHttp.Temporary({ code: "provider-5xx", status: 503 })
      const delivery = yield* deliveryWith(senderOf((d) => Effect.succeed(answer(d.id))), { OUTBOX_BACKOFF_BASE: "100 millis" })
      const attemptedAt = Date.now()
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 2, retried: 1, dead: 1 })
      expect(yield* rowOf(rejected.id)).toMatchObject({ state: "dead", dead_reason: "rejected" })
      const waiting = yield* rowOf(retried.id)
      expect(waiting).toMatchObject({ state: "pending", last_error: "provider-5xx" })
      // The retry waits one backoff (100 ms, no jitter here) from the attempt. Under load that time may already have
      // passed when the row is read, so the check is against the attempt's start, not the clock now.
      expect(waiting.due_at!.getTime()).toBeGreaterThanOrEqual(attemptedAt + 100)
      expect(yield* outbox.hasPendingWork).toBe(true)

      // The retry, once due, is delivered: nothing is left to do.
      answer = () => new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 })
      yield* Effect.sleep(Duration.millis(Math.max(0, waiting.due_at!.getTime() - Date.now()) + 25))
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 1, delivered: 1 })
      expect(yield* rowOf(retried.id)).toMatchObject({ state: "delivered" })
      expect(yield* outbox.hasPendingWork).toBe(false)
    }))

  it.effect("spec 001: a message being delivered (its lease held) is unfinished work", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const outbox = yield* Outbox
      const receiver = yield* LoopbackProvider
      yield* setupTenant("acme", "web", receiver.urlFor("/hooks/acme"))
      const { message } = yield* outbox.enqueue(request("acme", "web"))
      // The outcome is seen from inside the attempt, while the row is `delivering`.
      let during: boolean | undefined
      const delivery = yield* deliveryWith(senderOf(() =>
        Effect.map(outbox.hasPendingWork.pipe(Effect.orDie), (pending) => {
          during = pending
          return new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 })
        })
      ))
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 1, delivered: 1 })
      expect(during).toBe(true)
      expect(yield* rowOf(message.id)).toMatchObject({ state: "delivered" })
      expect(yield* outbox.hasPendingWork).toBe(false)
    }))
})
