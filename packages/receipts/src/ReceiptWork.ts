import { Backoff, isConnectionLoss, recordOutcome, timeProviderCall, workerLayer } from "@delivery/core"
import { Mailer } from "@delivery/mail"
import { Cause, Clock, Context, Data, Duration, Effect, Either, Exit, Option } from "effect"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import type { ReceiptsStorageUnavailable } from "./Domain.ts"
import { FileStore } from "./FileStore.ts"
import { freezeNotification, renderNotification, thawNotification } from "./Notification.ts"
import type { ReceiptProvider, WorkerTiming } from "./ReceiptsConfig.ts"
import { type ClaimedEffect, ReceiptsRepo } from "./ReceiptsRepo.ts"

/** What the effects executor runs with: its timing, and the provider when this process has one. */
export class ReceiptWorkSettings extends Context.Tag("@delivery/receipts/ReceiptWorkSettings")<ReceiptWorkSettings, {
  readonly timing: WorkerTiming
  readonly provider: Option.Option<ReceiptProvider>
}>() {}

/**
 * A stored notification envelope that does not decode or match its fingerprint: the durable work itself is
 * broken, so the root worker stops (spec 002) rather than send something else under the effect's identity.
 */
export class InvalidDurableEnvelope extends Data.TaggedError("InvalidDurableEnvelope")<{ readonly effect: string }> {}

export type EffectOutcome = "done" | "retry" | "lease-lost"

export interface TickResult {
  readonly recovered: number
  readonly attempt: Option.Option<{ readonly id: string; readonly kind: ClaimedEffect["kind"]; readonly outcome: EffectOutcome; readonly error?: string }>
}

/** Why an effect failed this attempt: a stable code kept in `last_error`. Failed work stays retryable. */
class EffectFailed extends Data.TaggedError("EffectFailed")<{ readonly code: string }> {}

/**
 * Spec 002's receipt effects: one claimed effect per tick, interpreted by its kind (file promotion, staged-copy
 * deletion, digest audit check, notification), recorded fenced by the claim. Effect failures (storage, provider
 * rejection, timeout, transport) stay retryable with backoff; database errors and invalid durable envelopes fail
 * the tick, which stops the root worker.
 */
export class ReceiptWork extends Effect.Service<ReceiptWork>()("@delivery/receipts/ReceiptWork", {
  effect: Effect.gen(function* () {
    const repo = yield* ReceiptsRepo
    const files = yield* Effect.serviceOption(FileStore)
    const { provider, timing } = yield* ReceiptWorkSettings
    const mailer = yield* Effect.serviceOption(Mailer)
    const backoff = Backoff.make({ base: timing.retryBase, cap: timing.retryCap, jitter: 0.2 })
    const now = Effect.map(Clock.currentTimeMillis, (millis) => new Date(millis))

    const store = Option.match(files, {
      onNone: () => Effect.fail(new EffectFailed({ code: "storage-unconfigured" })),
      onSome: Effect.succeed
    })
    const storageStep = <A>(effect: Effect.Effect<A, { readonly code: string }>) =>
      Effect.mapError(effect, (error) => new EffectFailed({ code: `storage-${error.code}` }))

    const notify = (claim: ClaimedEffect) =>
      Effect.gen(function* () {
        if (Option.isNone(provider) || Option.isNone(mailer)) return yield* new EffectFailed({ code: "provider-unconfigured" })
        let message
        // Stryker disable next-line ConditionalExpression,LogicalOperator: the table's CHECK keeps both null or neither
        if (claim.envelope === null || claim.envelope_sha256 === null) {
          // First attempt: render from the receipt as it is now and freeze it before any network I/O.
          const data = yield* repo.notifyData(claim.receipt_id)
          // Stryker disable next-line ConditionalExpression,StringLiteral: an effect's receipt is a foreign key, so it exists
          if (Option.isNone(data)) return yield* Effect.dieMessage(`receipt ${claim.receipt_id} of effect ${claim.id} is missing`)
          message = renderNotification(provider.value.sender, data.value)
          const frozen = freezeNotification(message)
          yield* repo.freeze(claim, frozen.envelope, frozen.sha256, yield* now)
        } else {
          // Retries send the frozen envelope, whatever the provider configuration or the payer's contact says now.
          const thawed = thawNotification(claim.envelope, claim.envelope_sha256)
          if (Either.isLeft(thawed)) return yield* new InvalidDurableEnvelope({ effect: claim.id })
          message = thawed.right
        }
        const outcome = yield* mailer.value.send(message, claim.id).pipe(timeProviderCall("receipt-effects"))
        // Unlike reset mail, every failure is retryable here: the envelope and key never change (spec 002).
        if (outcome._tag !== "Delivered") return yield* new EffectFailed({ code: outcome.code })
      })

    const interpret = (claim: ClaimedEffect) => {
      switch (claim.kind) {
        case "promote-file":
          return Effect.flatMap(store, (s) => storageStep(s.promote(claim.file_id!, claim.file_sha256!)))
        case "delete-staged":
          return Effect.flatMap(store, (s) => storageStep(s.deleteStaged(claim.file_id!, claim.file_sha256!)))
        case "audit-check":
          return Effect.gen(function* () {
            const s = yield* store
            for (const file of yield* repo.filesOf(claim.receipt_id)) yield* storageStep(s.auditCheck(file.sha256))
          })
        case "notify":
          return notify(claim)
      }
    }

    const retryLater = (claim: ClaimedEffect, code: string) =>
      Effect.gen(function* () {
        const at = yield* Clock.currentTimeMillis
        const delay = yield* Backoff.delayFor(backoff, claim.attempt)
        yield* repo.retry(claim, { nextAttemptAt: new Date(at + Duration.toMillis(delay)), lastError: code, at: new Date(at) })
        return "retry" as const
      })

    /** One claimed effect, uninterruptible except for the interpreter itself; always ends in a fenced record. */
    const attempt = (owner: string, receipt: string | null) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function* () {
          const claim = yield* repo.claimOne({ now: yield* now, owner, receipt }).pipe(Effect.withSpan("ReceiptWork.claim"))
          if (claim === undefined) return Option.none()
          const ran = yield* Effect.exit(restore(interpret(claim)).pipe(
            // Stryker disable next-line ObjectLiteral,StringLiteral: a trace attribute, read by no rule
            Effect.withSpan("ReceiptWork.interpret", { attributes: { "delivery.family": "receipt-effects" } })
          ))
          let outcome: EffectOutcome
          let error: string | undefined
          if (Exit.isSuccess(ran)) {
            outcome = yield* Effect.as(repo.complete(claim, yield* now), "done" as const)
          } else {
            const failure = Cause.failureOption(ran.cause)
            if (Option.isSome(failure) && failure.value._tag === "EffectFailed") {
              error = failure.value.code
              outcome = yield* retryLater(claim, error)
            } else if (Option.isSome(failure) && failure.value._tag === "LeaseLost") {
              outcome = "lease-lost"
            } else if (Cause.isInterruptedOnly(ran.cause)) {
              // Shutdown mid-effect: the work may be half done (a copy, a sent mail); it goes back to the retry
              // path, due now, under the same identity. If the write fails, the process exits non-zero.
              const recorded = yield* Effect.flatMap(now, (at) => repo.retry(claim, { nextAttemptAt: at, lastError: "interrupted", at })).pipe(
                Effect.as(true),
                // Stryker disable next-line ArrowFunction: undefined is as false as false here
                Effect.catchTag("LeaseLost", () => Effect.succeed(false)),
                Effect.orDie
              )
              if (recorded) yield* recordOutcome("receipt-effects", "retry")
              return yield* Effect.interrupt
            } else {
              // A database error or a broken durable envelope: the root worker stops; the claim is left to the
              // stale-claim rule of the next process.
              return yield* Effect.failCause(ran.cause as Cause.Cause<never>)
            }
          }
          if (outcome !== "lease-lost") yield* recordOutcome("receipt-effects", outcome)
          return Option.some({ id: claim.id, kind: claim.kind, outcome, ...(error === undefined ? {} : { error }) })
        }).pipe(Effect.catchTag("LeaseLost", () => Effect.succeed(Option.none())))
      )

    const tick = Effect.fn("ReceiptWork.tick")(function* (owner: string) {
      const at = yield* Clock.currentTimeMillis
      const recovered = yield* repo.recoverStale({
        claimedBefore: new Date(at - Duration.toMillis(timing.staleClaim)),
        at: new Date(at)
      })
      // Stryker disable next-line ConditionalExpression,EqualityOperator: whether a warning is logged; the recovery itself is tested
      if (recovered > 0) yield* Effect.logWarning("receipt effects: stale claims back on the retry path").pipe(Effect.annotateLogs({ count: recovered }))
      const done = yield* attempt(owner, null)
      return { recovered, attempt: done } satisfies TickResult
    })

    /**
     * The request's bounded post-commit path: this receipt's eligible effects in order, one attempt each, until
     * one fails or none is left, within RECEIPT_INLINE_TIMEOUT. Whatever is left is the worker's.
     */
    const runInline = (receiptId: string) =>
      Effect.gen(function* () {
        // Stryker disable next-line StringLiteral: the owner names the claimant for operators; the fence is the attempt counter
        const owner = `inline:${makeOwner()}`
        while (true) {
          const done = yield* attempt(owner, receiptId)
          // Stryker disable next-line ConditionalExpression: after a retry the effect is not due yet (the backoff is never 0), so the next claim finds nothing anyway
          if (Option.isNone(done) || done.value.outcome !== "done") return
        }
      }).pipe(
        Effect.timeout(timing.inlineTimeout),
        Effect.catchAll((error) =>
          Effect.logWarning("receipt: post-commit attempt ended early; the worker continues").pipe(
            Effect.annotateLogs({ receipt: receiptId, error: (error as { _tag?: string })._tag ?? "unknown" })
          ))
      )

    return { tick, runInline } as const
  }),
  dependencies: [ReceiptsRepo.Default]
}) {}

// Stryker disable next-line StringLiteral,MethodExpression: the owner names the claimant for operators; the fence is the attempt counter
export const makeOwner = () => `${hostname().slice(0, 40)}:${process.pid}:${randomBytes(4).toString("hex")}`

/**
 * Spec 002: one attempt per tick, then the poll interval, also after a failed effect. A failed tick ends the loop
 * ("Database errors and invalid durable envelopes stop the root worker"), except a database that cannot be reached
 * at all (an outage: `isConnectionLoss`): that tick is logged and the loop waits it out, so the process keeps
 * serving (its requests answer 503) and resumes on its own; a claim cut off mid-attempt comes back by the
 * stale-claim rule.
 */
export const receiptLoop = Effect.gen(function* () {
  const work = yield* ReceiptWork
  const { timing } = yield* ReceiptWorkSettings
  const owner = makeOwner()
  while (true) {
    yield* work.tick(owner).pipe(
      Effect.catchIf(
        (error): error is ReceiptsStorageUnavailable => error._tag === "ReceiptsStorageUnavailable" && isConnectionLoss(error.sqlstate),
        (error) =>
          Effect.logWarning("receipt effects: database unreachable; waiting for it").pipe(
            Effect.annotateLogs({ operation: error.operation, sqlstate: error.sqlstate })
          )
      )
    )
    yield* Effect.sleep(timing.pollInterval)
  }
})

export const WORKER_NAME = "receipt-effects"

/** The worker; a failure (database, invalid durable envelope) stops the whole process, non-zero, after cleanup. */
export const receiptWorkerLayer = workerLayer(WORKER_NAME, receiptLoop, { stopProcessOnFailure: true })
