import { makeCorrelationId, workerLayer } from "@delivery/core"
import { Duration, Effect } from "effect"
import type { StackId } from "../Domain.ts"
import { CloudStacksRepo } from "./CloudStacksRepo.ts"
import { SleepOperation } from "./SleepOperation.ts"

// The cloud's quiet cycles: every interval, each stack that has been awake for at least that long is offered one
// sleep cycle. Whether it sleeps is the tenant's to say (its blockers: API activity within ten minutes, requests in
// flight, pending work, ingress without a proof); the sleep operation lock makes concurrent offers from several
// cloud processes harmless (one claims, the others find the stack not awake).

/** Stacks offered a cycle per round, and cycles at once. */
const ROUND_LIMIT = 1000
const CONCURRENCY = 2

export const sleepSchedulerWorker = (every: Duration.Duration) =>
  workerLayer(
    "sleep-scheduler",
    Effect.gen(function* () {
      const repo = yield* CloudStacksRepo
      const sleeper = yield* SleepOperation
      const round = Effect.gen(function* () {
        const quietSince = Date.now() - Duration.toMillis(every)
        const stacks = yield* repo.list(ROUND_LIMIT)
        const candidates = stacks.filter((row) => row.state === "awake" && !row.recovery_hold && row.state_changed_at.getTime() <= quietSince)
        yield* Effect.forEach(candidates, (row) => {
          const correlationId = makeCorrelationId()
          return sleeper.sleep(row.id as StackId, correlationId).pipe(
            Effect.tap((outcome) =>
              Effect.logInfo("scheduled sleep cycle").pipe(
                Effect.annotateLogs({ stack: row.id, outcome: outcome.outcome, ...("code" in outcome ? { code: outcome.code } : {}), correlationId })
              )),
            Effect.catchAll((error) => Effect.logWarning("scheduled sleep cycle failed", { stack: row.id, reason: error._tag }))
          )
        }, { concurrency: CONCURRENCY, discard: true })
      }).pipe(Effect.catchAll((error) => Effect.logWarning("sleep round failed", { reason: error._tag })))
      yield* Effect.forever(Effect.zipRight(Effect.sleep(every), round))
    })
  )
