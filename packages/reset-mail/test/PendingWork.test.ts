import { Identity } from "@delivery/identity"
import { LoopbackReply } from "@delivery/testing"
import { expect, layer } from "@effect/vitest"
import { Duration, Effect, Fiber, Option } from "effect"
import { ResetRequests } from "../src/ResetRequests.ts"
import { requestReset, rowOf, setup, SuiteLayer, workerWith } from "./support.ts"

// Spec 001: a tenant stack is put to sleep only when its own durable workers have no accepted work left. Reset mail
// is accepted through the real request path (ResetRequests.request) and ends through the worker's own tick, on a
// database of this file's own.

const outcomeOf = (tick: { readonly attempt: Option.Option<{ readonly outcome: string }> }) => Option.getOrThrow(tick.attempt).outcome

layer(SuiteLayer, { excludeTestServices: true })("reset mail pending work (spec 001, real PostgreSQL)", (it) => {
  it.effect("spec 001: a stack with unfinished reset mail work does not sleep: a row is pending from the request, while its retry waits and while it is sending, until it ends", () =>
    Effect.gen(function* () {
      const { fx, provider } = yield* setup
      const requests = yield* ResetRequests
      expect(yield* requests.hasPendingWork).toBe(false)
      const { delivery } = yield* workerWith({ env: { MAIL_PROVIDER_TIMEOUT: "10 seconds" } })

      const row = yield* requestReset(fx)
      expect(yield* requests.hasPendingWork).toBe(true)

      // A 503: the row waits for its retry, still owed.
      yield* provider.script({ key: row.id, times: 1, reply: LoopbackReply.status(503) })
      expect(outcomeOf(yield* delivery.tick("w1"))).toBe("retry")
      const waiting = yield* rowOf(row.id)
      expect(waiting).toMatchObject({ state: "pending", last_error: "provider-5xx" })
      expect(yield* requests.hasPendingWork).toBe(true)

      // The retry, held by the provider: the row is `sending`, still owed.
      yield* Effect.sleep(Duration.millis(Math.max(0, waiting.next_attempt_at.getTime() - Date.now()) + 25))
      yield* provider.script({ key: row.id, times: 1, reply: LoopbackReply.hang() })
      const tick = yield* Effect.fork(delivery.tick("w1"))
      yield* provider.awaitRequests(2)
      expect(yield* rowOf(row.id)).toMatchObject({ state: "sending", attempt: 2 })
      expect(yield* requests.hasPendingWork).toBe(true)
      expect(yield* provider.release(LoopbackReply.status(202))).toBe(1)
      expect(outcomeOf(yield* Fiber.join(tick))).toBe("delivered")
      expect(yield* requests.hasPendingWork).toBe(false)

      // An ended row that never reached the provider (the account disabled) is no work either.
      const other = yield* requestReset(fx)
      expect(yield* requests.hasPendingWork).toBe(true)
      yield* (yield* Identity).setAccountEnabled(fx.tenant, fx.account, false)
      expect(outcomeOf(yield* delivery.tick("w1"))).toBe("stopped")
      expect(yield* rowOf(other.id)).toMatchObject({ state: "stopped", reason: "account-disabled" })
      expect(yield* requests.hasPendingWork).toBe(false)
    }))
})
