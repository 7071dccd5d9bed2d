import { Backoff, fencedBatch, ProviderHttp, recordOutcome } from "@delivery/core"
import { Clock, Duration, Effect, Option } from "effect"
import type { DeadReason, DeliveryErrorCode } from "./Domain.ts"
import type { Settings } from "./OutboxConfig.ts"
import type { ClaimedRow, DeliveryRepo } from "./DeliveryRepo.ts"
import type { SendOutcome } from "./Sender.ts"

/** What one attempt leads to; every kind is recorded by a fenced, batched transition. */
export type Decision =
  | { readonly _tag: "Delivered" }
  | { readonly _tag: "Retry"; readonly code: DeliveryErrorCode; readonly dueAt: Date }
  | { readonly _tag: "Dead"; readonly reason: DeadReason; readonly code: DeliveryErrorCode }

export const interrupted = new ProviderHttp.Ambiguous({ code: "provider-interrupted" })

const RETRY_AFTER_MIN = Duration.seconds(1)

/** A retry whose due time is still to be read from the Clock (and Random, for the backoff's jitter). */
export interface RetryLater {
  readonly _tag: "RetryLater"
  readonly code: DeliveryErrorCode
  readonly retryAfter: string | undefined
}

/**
 * DESIGN's four outcomes mapped to the outbox rule: delivered → delivered; rejected (4xx, redirect)
 * → dead letter at once, except 429, which asks us to slow down; temporary and ambiguous (and our
 * own "not sent") → retry, until the attempt ceiling, then dead letter. Synchronous: only a retry
 * needs the time (`retryAt`), so a batch of deliveries is decided without a step of the runtime per row.
 */
export const decideAtOnce = (
  outcome: SendOutcome,
  row: Pick<ClaimedRow, "attempt" | "attempt_ceiling">
): Exclude<Decision, { readonly _tag: "Retry" }> | RetryLater => {
  const retry = (code: DeliveryErrorCode, retryAfter: string | undefined) =>
    row.attempt >= row.attempt_ceiling
      ? ({ _tag: "Dead", reason: "attempts-exhausted", code } as const)
      : ({ _tag: "RetryLater", code, retryAfter } as const)
  switch (outcome._tag) {
    case "Delivered":
      return { _tag: "Delivered" }
    case "Rejected":
      return outcome.status === 429
        ? retry("provider-429", outcome.retryAfter)
        : { _tag: "Dead", reason: "rejected", code: outcome.code }
    case "Temporary":
    case "Ambiguous":
      return retry(outcome.code, outcome.retryAfter)
    case "NotSent":
      return retry(outcome.code, undefined)
  }
}

/**
 * When a retry is due: the receiver's Retry-After within [1 s, OUTBOX_RETRY_AFTER_MAX], or else capped exponential
 * backoff with jitter, from the Clock's now.
 */
export const retryAt = (
  later: RetryLater,
  row: Pick<ClaimedRow, "attempt">,
  settings: Pick<Settings, "backoff" | "retryAfterMax">
): Effect.Effect<Decision> =>
  Effect.gen(function*() {
    const asked = yield* Backoff.retryAfterWithin(later.retryAfter, { min: RETRY_AFTER_MIN, max: settings.retryAfterMax })
    const dueAt = yield* Option.match(asked, {
      onNone: () => Backoff.nextAttemptAt(settings.backoff, row.attempt),
      onSome: (delay) => Effect.map(Clock.currentTimeMillis, (now) => new Date(now + Duration.toMillis(delay)))
    })
    return { _tag: "Retry", code: later.code, dueAt } satisfies Decision
  })

/** `decideAtOnce` with a retry's due time filled in. */
export const decide = (
  outcome: SendOutcome,
  row: Pick<ClaimedRow, "attempt" | "attempt_ceiling">,
  settings: Pick<Settings, "backoff" | "retryAfterMax">
): Effect.Effect<Decision> => {
  const decision = decideAtOnce(outcome, row)
  return decision._tag === "RetryLater" ? retryAt(decision, row, settings) : Effect.succeed(decision)
}

// Stryker disable next-line StringLiteral: names the table only in the LeaseLost warning's annotations; record returns counts
const resource = "outbox_messages"

export interface Recorded {
  readonly delivered: number
  readonly retried: number
  readonly dead: number
  readonly lost: number
}

/**
 * Records a batch of decisions: at most one UPDATE ... FROM unnest(...) per outcome kind, each row
 * fenced by its claimed attempt. A row that moved on (a newer lease) is not touched and is logged
 * as LeaseLost by `fencedBatch`; the late owner records nothing for it.
 */
export const record = (
  repo: DeliveryRepo,
  decided: ReadonlyArray<readonly [ClaimedRow, Decision]>
) =>
  Effect.gen(function*() {
    const now = new Date(yield* Clock.currentTimeMillis)
    const of = <T extends Decision["_tag"]>(tag: T) =>
      decided.filter((entry): entry is readonly [ClaimedRow, Extract<Decision, { _tag: T }>] => entry[1]._tag === tag)
    const claims = (rows: ReadonlyArray<readonly [ClaimedRow, Decision]>) =>
      rows.map(([row]) => ({ id: row.id, attempt: row.attempt }))
    const delivered = of("Delivered")
    const retried = of("Retry")
    const dead = of("Dead")

    const results = yield* Effect.all([
      delivered.length === 0 ? Effect.succeed({ moved: [], lost: [] }) : fencedBatch(
        repo.markDelivered({ ids: delivered.map(([r]) => r.id), attempts: delivered.map(([r]) => r.attempt), now }),
        resource,
        claims(delivered)
      ),
      retried.length === 0 ? Effect.succeed({ moved: [], lost: [] }) : fencedBatch(
        repo.markRetry({
          ids: retried.map(([r]) => r.id),
          attempts: retried.map(([r]) => r.attempt),
          dueAts: retried.map(([, d]) => d.dueAt),
          codes: retried.map(([, d]) => d.code)
        }),
        resource,
        claims(retried)
      ),
      dead.length === 0 ? Effect.succeed({ moved: [], lost: [] }) : fencedBatch(
        repo.markDead({
          ids: dead.map(([r]) => r.id),
          attempts: dead.map(([r]) => r.attempt),
          reasons: dead.map(([, d]) => d.reason),
          codes: dead.map(([, d]) => d.code),
          now
        }),
        resource,
        claims(dead)
      )
    ], { concurrency: "unbounded" })
    const [d, r, x] = results
    // Only what the fence let through: a late owner's outcomes were not recorded, so they are not counted.
    yield* recordOutcome("outbox", "delivered", d.moved.length)
    yield* recordOutcome("outbox", "retry", r.moved.length)
    yield* recordOutcome("outbox", "dead", x.moved.length)
    return {
      delivered: d.moved.length,
      retried: r.moved.length,
      dead: x.moved.length,
      lost: d.lost.length + r.lost.length + x.lost.length
    } satisfies Recorded
  })
