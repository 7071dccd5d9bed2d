import { LoopbackReply } from "@delivery/testing"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { randomBytes } from "node:crypto"
import type { TickResult } from "../src/ReceiptWork.ts"
import { commandOf, effectRow, executor, progress, recorderFor, setup, stageFile, SuiteLayer, untilDue } from "./support/Work.ts"

// Spec 001: a tenant stack is put to sleep only when its own durable workers have no accepted work left. Receipt
// effects are accepted through the real command path (Receipts.record) and end through the worker's own tick, on a
// database of this file's own.

const outcomeOf = (tick: TickResult) => Option.getOrThrow(tick.attempt).outcome

layer(SuiteLayer, { excludeTestServices: true })("receipt effects pending work (spec 001, real PostgreSQL)", (it) => {
  it.scoped("spec 001: a stack with unfinished receipt work does not sleep: effects are pending from the command, while they wait for their turn or a retry and while running, until every one is done", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      expect(yield* ex.receipts.hasPendingWork).toBe(false)
      // A staged upload that no receipt refers to yet leaves no effect to run.
      const file = yield* stageFile(ex, tenant, randomBytes(2000))
      expect(yield* ex.receipts.hasPendingWork).toBe(false)

      const recorded = yield* ex.receipts.record(commandOf([file.fileId]), recorderFor(tenant)).pipe(Effect.orDie)
      const receiptId = recorded.response.receipt.id
      const notify = recorded.response.effects.find((e) => e.kind === "notify")!
      expect(yield* ex.receipts.hasPendingWork).toBe(true)

      // The file effects complete; the notification is answered 503 and waits for its retry.
      yield* provider.script({ key: notify.id, times: 1, reply: LoopbackReply.status(503) })
      for (const expected of ["done", "done", "done", "retry"]) {
        expect(outcomeOf(yield* ex.work.tick("w1"))).toBe(expected)
        expect(yield* ex.receipts.hasPendingWork).toBe(true)
      }
      expect(yield* progress(receiptId)).toEqual(["promote-file:done:1", "delete-staged:done:1", "audit-check:done:1", "notify:pending:1"])

      // The retry, held by the provider: the effect is `running`, still owed.
      yield* untilDue(receiptId)
      yield* provider.script({ key: notify.id, times: 1, reply: LoopbackReply.hang() })
      const tick = yield* Effect.fork(ex.work.tick("w1"))
      yield* provider.awaitRequests(2)
      expect(yield* effectRow(notify.id)).toMatchObject({ state: "running", attempt: 2 })
      expect(yield* ex.receipts.hasPendingWork).toBe(true)
      expect(yield* provider.release(LoopbackReply.status(202))).toBe(1)
      expect(outcomeOf(yield* Fiber.join(tick))).toBe("done")
      expect(yield* ex.receipts.hasPendingWork).toBe(false)
    }))
})
