import { expect, layer } from "@effect/vitest"
import { LoopbackProvider } from "@delivery/testing"
import { Deferred, Effect } from "effect"
import { type Decision, record } from "../src/Delivery.ts"
import { type ClaimedRow, DeliveryRepo } from "../src/DeliveryRepo.ts"
import { Outbox } from "../src/index.ts"
import { request, resetOutbox, rowOf, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

/** Three rows of tenant acme, claimed as a worker's claim would. */
const claimedThree = Effect.gen(function*() {
  yield* resetOutbox
  const receiver = yield* LoopbackProvider
  yield* setupTenant("acme", "web", receiver.urlFor("/hooks/acme"))
  const outbox = yield* Outbox
  for (let i = 0; i < 3; i++) yield* outbox.enqueue(request("acme", "web"))
  const repo = yield* DeliveryRepo.pipe(Effect.provide(DeliveryRepo.Default))
  const now = new Date()
  const rows = yield* repo.claim({ tenant: "acme", limit: 3, now, leaseUntil: new Date(now.getTime() + 60_000), owner: "w1" })
  expect(rows.length).toBe(3)
  return { repo, rows }
})

const deliveredDecision: Decision = { _tag: "Delivered" }
const retryDecision: Decision = { _tag: "Retry", code: "provider-5xx", dueAt: new Date(Date.now() + 60_000) }
const deadDecision: Decision = { _tag: "Dead", reason: "rejected", code: "provider-4xx" }

type Statement = "markDelivered" | "markRetry" | "markDead"

/** The real repository, with a hook run as each fenced transition starts. */
const observed = (repo: DeliveryRepo, onStart: (statement: Statement) => Effect.Effect<void>) =>
  ({
    ...repo,
    markDelivered: (r: Parameters<DeliveryRepo["markDelivered"]>[0]) => Effect.zipRight(onStart("markDelivered"), repo.markDelivered(r)),
    markRetry: (r: Parameters<DeliveryRepo["markRetry"]>[0]) => Effect.zipRight(onStart("markRetry"), repo.markRetry(r)),
    markDead: (r: Parameters<DeliveryRepo["markDead"]>[0]) => Effect.zipRight(onStart("markDead"), repo.markDead(r))
  }) as DeliveryRepo

layer(SuiteLayer, { excludeTestServices: true })("Outbox fenced batched transitions (spec 000, real PostgreSQL)", (it) => {
  it.effect("a write issues one fenced statement per outcome kind it holds and none for a kind without rows", () =>
    Effect.gen(function*() {
      const { repo, rows } = yield* claimedThree
      const statements: Array<Statement> = []
      const counted = observed(repo, (statement) => Effect.sync(() => void statements.push(statement)))
      const writes: Array<readonly [ClaimedRow, Decision]> = [
        [rows[0]!, deliveredDecision], [rows[1]!, retryDecision], [rows[2]!, deadDecision]
      ]
      const seen: Array<ReadonlyArray<Statement>> = []
      for (const entry of writes) {
        statements.length = 0
        expect(yield* record(counted, [entry])).toEqual({
          delivered: entry[1]._tag === "Delivered" ? 1 : 0,
          retried: entry[1]._tag === "Retry" ? 1 : 0,
          dead: entry[1]._tag === "Dead" ? 1 : 0,
          lost: 0
        })
        seen.push([...statements])
      }
      expect(seen).toEqual([["markDelivered"], ["markRetry"], ["markDead"]])
      expect(yield* rowOf(rows[0]!.id)).toMatchObject({ state: "delivered" })
      expect(yield* rowOf(rows[1]!.id)).toMatchObject({ state: "pending", last_error: "provider-5xx" })
      expect(yield* rowOf(rows[2]!.id)).toMatchObject({ state: "dead", dead_reason: "rejected", last_error: "provider-4xx" })
    }))

  it.effect("the statements of one write run at once: a delivered statement still waiting does not hold back the retry and dead-letter statements", () =>
    Effect.gen(function*() {
      const { repo, rows } = yield* claimedThree
      const retryStarted = yield* Deferred.make<void>()
      const deadStarted = yield* Deferred.make<void>()
      const gated = observed(repo, (statement) =>
        statement === "markDelivered"
          ? Effect.zipRight(Deferred.await(retryStarted), Deferred.await(deadStarted))
          : Deferred.succeed(statement === "markRetry" ? retryStarted : deadStarted, undefined))
      const recorded = yield* record(gated, [[rows[0]!, deliveredDecision], [rows[1]!, retryDecision], [rows[2]!, deadDecision]]).pipe(
        Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => "the delivered statement held back the others" })
      )
      expect(recorded).toEqual({ delivered: 1, retried: 1, dead: 1, lost: 0 })
    }))
})
