import { Backoff, type DeliveryOutcome, recordOutcome as countOutcome, timeProviderCall, workerLayer } from "@delivery/core"
import { Mailer, thawMessage } from "@delivery/mail"
import { Cause, Context, Data, Duration, Effect, Either, Exit, Option, Schema } from "effect"
import { EffectQueue, endedElementInvalid, type QueueHooks } from "./EffectQueueStore.ts"
import { QUEUE_NAME } from "./Domain.ts"
import { NotificationQueue, type QueueItem } from "./TeamApplications.ts"
import { CLEANUP_INTERVAL, type DeliveryTiming, QUEUE_RETENTION } from "./TeamApplicationsConfig.ts"
import { Outcome, recordFailure, recordOutcome, TeamApplicationsRepo } from "./TeamApplicationsRepo.ts"

/** The worker's timing (TEAM_APPLICATION_DELIVERY_*). */
export class DeliverySettings extends Context.Tag("@delivery/team-applications/DeliverySettings")<DeliverySettings, DeliveryTiming>() {}

/**
 * A failed attempt the queue retries after its delay: a provider timeout (ambiguous), a 5xx or a transport error,
 * with the provider's Retry-After when it gave one, or the outbox unreadable.
 */
// Stryker disable next-line StringLiteral: the tag is never read (`instanceof` decides, the queue keeps `reason`)
export class DeliveryFailed extends Data.TaggedError("DeliveryFailed")<{
  readonly reason: string
  readonly retryAfter?: Duration.Duration
}> {}

/** What an attempt settled: the outcome the completion hook records in the outbox, with the provider's code. */
export const AttemptResult = Schema.Struct({ outcome: Outcome, code: Schema.NullOr(Schema.String) })
export type AttemptResult = typeof AttemptResult.Type

const decodeResult = Schema.decodeUnknown(AttemptResult)

/**
 * The outbox's side of every queue outcome, in the store's fenced transaction: the outcome of a settled attempt,
 * the policy state (failures, last error) of a failed one, `exhausted` when no attempt is left.
 */
export const notificationHooks: QueueHooks = {
  completed: (attempt, value) =>
    Effect.flatMap(Effect.orDie(decodeResult(value)), (result) => Effect.asVoid(recordOutcome(attempt.id, attempt.attempt, result.outcome, result.code))),
  failed: (attempt, failure) => Effect.asVoid(recordFailure(attempt.id, attempt.attempt, failure.reason, failure.exhausted))
}

/**
 * One attempt at one notification: decode the stored envelope and send it under the effect id as the provider's
 * idempotency key, so a retry sends the same request. 2xx delivered and 4xx rejected settle it; a timeout, a 5xx or
 * a transport error fails the attempt, retried by the queue with backoff. An envelope that does not decode or
 * match its fingerprint is never sent: it settles `envelope-invalid`.
 */
export const makeDeliver = Effect.gen(function* () {
  const repo = yield* TeamApplicationsRepo
  const mailer = yield* Mailer
  const timing = yield* DeliverySettings
  const retryBounds = { min: Duration.zero, max: timing.retryCap }

  return (item: QueueItem, meta: { readonly id: string; readonly attempts: number }) =>
    Effect.gen(function* () {
      const row = yield* repo.envelopeOf(item.effect).pipe(
        Effect.catchTag("TeamApplicationsStorageUnavailable", () => new DeliveryFailed({ reason: "storage-unavailable" }))
      )
      if (Option.isNone(row)) {
        yield* Effect.logError("team application: a queue item without its outbox row").pipe(Effect.annotateLogs({ item: meta.id }))
        return { outcome: "envelope-invalid", code: "envelope-missing" } satisfies AttemptResult
      }
      // Settled already (an outcome recorded, then the item left incomplete by an older version): never resend.
      if (row.value.outcome !== null) return { outcome: row.value.outcome, code: null } satisfies AttemptResult
      const message = thawMessage(row.value.envelope, row.value.envelope_sha256)
      if (Either.isLeft(message)) {
        yield* Effect.logError("team application: stored envelope invalid, not sent").pipe(Effect.annotateLogs({ effect: item.effect }))
        return { outcome: "envelope-invalid", code: "envelope-invalid" } satisfies AttemptResult
      }
      const sent = yield* mailer.send(message.right, item.effect).pipe(timeProviderCall("team-applications"))
      switch (sent._tag) {
        case "Delivered":
          return { outcome: "delivered", code: null } satisfies AttemptResult
        case "Rejected":
          return { outcome: "rejected", code: sent.code } satisfies AttemptResult
        case "Ambiguous":
        case "Temporary": {
          const retryAfter = yield* Backoff.retryAfterWithin(sent.retryAfter, retryBounds)
          return yield* new DeliveryFailed({ reason: sent.code, ...(Option.isSome(retryAfter) ? { retryAfter: retryAfter.value } : {}) })
        }
      }
    }).pipe(
      Effect.annotateLogs({ effect: item.effect, attempt: meta.attempts + 1 }),
      Effect.withSpan("TeamApplicationDelivery.deliver", { attributes: { "delivery.family": "team-applications" } })
    )
})

/**
 * What the queue recorded for a finished `take`: the settled outcome, or a failed attempt retried later, or, on the
 * last allowed attempt, exhausted (the store's rule: the attempt number reached maxAttempts), or exhausted for an
 * item whose stored element could not be read, not JSON or refused by the queue's schema (the store ended it so; the
 * handler's own failures are `DeliveryFailed`, never a `ParseError`). Other failures (the store itself) recorded nothing.
 */
const recordedOutcome = (exit: Exit.Exit<AttemptResult, unknown>, attempt: number, maxAttempts: number): DeliveryOutcome | undefined => {
  if (Exit.isSuccess(exit)) return exit.value.outcome
  const failure = Cause.failureOption(exit.cause)
  if (Option.isNone(failure)) return undefined
  if (failure.value instanceof DeliveryFailed) return attempt >= maxAttempts ? "exhausted" : "retry"
  return endedElementInvalid(failure.value) ? "exhausted" : undefined
}

/** Spec 002: one attempt per tick, then the poll interval. An attempt's outcome is recorded by the queue itself. */
export const deliveryLoop = Effect.gen(function* () {
  const queue = yield* NotificationQueue
  const timing = yield* DeliverySettings
  const deliver = yield* makeDeliver
  while (true) {
    let attempt = 0
    const exit = yield* Effect.exit(queue.take((item, meta) => {
      attempt = meta.attempts + 1
      return deliver(item, meta)
    }, { maxAttempts: timing.maxAttempts }))
    // `take` returns once its outcome committed.
    const outcome = recordedOutcome(exit, attempt, timing.maxAttempts)
    if (outcome !== undefined) yield* countOutcome("team-applications", outcome)
    if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)) {
      // A provider's refusal is routine: its code, not a stack. Anything else is logged whole.
      const failure = Cause.failureOption(exit.cause)
      yield* Option.isSome(failure) && failure.value instanceof DeliveryFailed
        ? Effect.logWarning("team application: notification attempt failed; the queue retries it").pipe(
          Effect.annotateLogs({ reason: failure.value.reason })
        )
        : Effect.logWarning("team application: notification attempt failed; the queue retries it", exit.cause)
    }
    yield* Effect.sleep(timing.pollInterval)
  }
})

/** Spec 002: once an hour, queue items that ended more than 30 days ago go; the outbox keeps every outcome. */
export const cleanupLoop = Effect.gen(function* () {
  const queue = yield* EffectQueue
  while (true) {
    const removed = yield* queue.removeEnded(QUEUE_NAME, QUEUE_RETENTION).pipe(
      Effect.catchAllCause((cause) => Effect.as(Effect.logWarning("team application: queue clean-up failed; next run in an hour", cause), 0))
    )
    if (removed > 0) yield* Effect.logInfo("team application: ended queue items removed").pipe(Effect.annotateLogs({ removed }))
    yield* Effect.sleep(CLEANUP_INTERVAL)
  }
})

export const WORKER_NAME = "team-application-notifications"
export const CLEANUP_WORKER_NAME = "team-application-queue-cleanup"

export const deliveryWorkerLayer = workerLayer(WORKER_NAME, deliveryLoop)
export const cleanupWorkerLayer = workerLayer(CLEANUP_WORKER_NAME, cleanupLoop)
