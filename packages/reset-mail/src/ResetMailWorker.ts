import { Backoff, type ProviderHttp, recordOutcome, timeProviderCall, workerLayer } from "@delivery/core"
import { PasswordResets, type ResetMailContext } from "@delivery/identity"
import { fingerprint, MailMessage, Mailer } from "@delivery/mail"
import { Cause, Clock, Context, Duration, Effect, Either, Exit, Layer, Option, Schema } from "effect"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import type { WorkerSettings } from "./ResetMailConfig.ts"
import { type ClaimedRow, type FinalState, ResetMailRepo } from "./ResetMailRepo.ts"
import { ResetTemplate, ResetTemplateDefault } from "./Template.ts"

export class ResetMailSettings extends Context.Tag("@delivery/reset-mail/ResetMailSettings")<ResetMailSettings, WorkerSettings>() {}

/** What one tick did, for tests and logs. */
export interface TickResult {
  readonly quarantinedStale: number
  /** The claimed row's id and where the attempt left it; none when nothing was due. */
  readonly attempt: Option.Option<{ readonly id: string; readonly outcome: AttemptOutcome }>
}

export type AttemptOutcome = FinalState | "retry" | "lease-lost"

/** Why delivery stops for good before any provider I/O: the verification or account no longer allows it. */
const stoppedReason: Record<Exclude<ResetMailContext["_tag"], "Live" | "Unreadable">, string> = {
  Missing: "verification-missing",
  Expired: "verification-expired",
  Consumed: "verification-consumed",
  AccountDisabled: "account-disabled"
}

const decodeMessage = Schema.decodeUnknownOption(MailMessage)

/**
 * Spec 002's password-reset delivery, one attempt per tick:
 * quarantine stale claims, claim one due row (attempt + 1), check the verification live, render the payload from
 * live data, store its fingerprint before the first provider I/O (or compare it on a retry), send with the row id
 * as Idempotency-Key, and record the outcome fenced by the claimed attempt.
 */
export class ResetMailDelivery extends Effect.Service<ResetMailDelivery>()("@delivery/reset-mail/ResetMailDelivery", {
  effect: Effect.gen(function* () {
    const repo = yield* ResetMailRepo
    const resets = yield* PasswordResets
    const mailer = yield* Mailer
    const template = yield* ResetTemplate
    const settings = yield* ResetMailSettings
    const backoff = Backoff.make({ base: settings.retryBase, cap: settings.retryCap, jitter: 0.2 })

    const now = Effect.map(Clock.currentTimeMillis, (millis) => new Date(millis))

    const finish = (row: ClaimedRow, state: FinalState, reason: string | null, providerStatus: number | null = null) =>
      Effect.flatMap(now, (at) => repo.finish(row, { state, reason, providerStatus, at })).pipe(Effect.as(state))

    /** Temporary failures wait out the backoff (or a longer Retry-After within the cap), then go again. */
    const retry = (row: ClaimedRow, outcome: ProviderHttp.Temporary) =>
      Effect.gen(function* () {
        const at = yield* Clock.currentTimeMillis
        const delay = yield* Backoff.delayFor(backoff, row.attempt)
        const asked = yield* Backoff.retryAfterWithin(outcome.retryAfter, { min: delay, max: settings.retryCap })
        const wait = Option.getOrElse(asked, () => delay)
        yield* repo.retry(row, {
          nextAttemptAt: new Date(at + Duration.toMillis(wait)),
          lastError: outcome.code,
          providerStatus: outcome.status ?? null,
          at: new Date(at)
        })
        return "retry" as const
      })

    const record = (row: ClaimedRow, outcome: ProviderHttp.ProviderOutcome) => {
      switch (outcome._tag) {
        case "Delivered":
          return finish(row, "delivered", null, outcome.status)
        case "Rejected":
          return finish(row, "rejected", outcome.code, outcome.status)
        // A timeout or an interrupted call may have reached the provider: never sent again under this identity.
        case "Ambiguous":
          // Stryker disable next-line LogicalOperator: the adapter gives an ambiguous outcome (timeout, interruption) no status, so both forms store null
          return finish(row, "quarantined", outcome.code, outcome.status ?? null)
        case "Temporary":
          return retry(row, outcome)
      }
    }

    /** Temporary failures before any provider I/O put the row back at once: nothing can have been sent. */
    const releaseUnsent = (row: ClaimedRow, lastError: string, due: "now" | "backoff") =>
      Effect.gen(function* () {
        const at = yield* Clock.currentTimeMillis
        const wait = due === "now" ? 0 : Duration.toMillis(yield* Backoff.delayFor(backoff, row.attempt))
        yield* repo.retry(row, { nextAttemptAt: new Date(at + wait), lastError, providerStatus: null, at: new Date(at) })
        return "retry" as const
      })

    /**
     * Everything before provider I/O: the live checks, the payload, its fingerprint (stored on the first attempt,
     * compared on retries). Either the row's final state or the message to send.
     */
    const prepare = (row: ClaimedRow) =>
      Effect.gen(function* () {
        const context = yield* resets.mailContext(row.verification_id)
        if (context._tag === "Unreadable") return yield* finish(row, "quarantined", "verification-invalid")
        if (context._tag !== "Live") return yield* finish(row, "stopped", stoppedReason[context._tag])
        const rendered = decodeMessage(template.render({
          sender: settings.sender,
          origin: settings.origin,
          to: context.email,
          token: context.token,
          expiresAt: context.expiresAt
        }))
        // An address the mail adapter cannot carry (a quote, a comma): no provider could deliver it either.
        if (Option.isNone(rendered)) return yield* finish(row, "rejected", "mailbox-invalid")
        const message = rendered.value
        const current = fingerprint(message)
        if (row.fingerprint === null) {
          // Before any provider I/O: a crash after this line leaves a row whose retries are checked against it.
          yield* repo.setFingerprint(row, current, yield* now)
        } else if (row.fingerprint !== current) {
          // Spec 002: never send a changed payload under the old delivery identity.
          return yield* finish(row, "quarantined", "verification-invalid")
        }
        return message
      }).pipe(
        // The database failed before anything was sent: the row is retried later rather than left to be
        // quarantined as a stale claim. If even that write fails, the stale-claim rule takes the row.
        Effect.catchTags({
          IdentityStorageUnavailable: () => releaseUnsent(row, "storage-unavailable", "backoff"),
          ResetMailStorageUnavailable: () => releaseUnsent(row, "storage-unavailable", "backoff")
        })
      )

    const deliver = (row: ClaimedRow, restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>) =>
      Effect.gen(function* () {
        const prepared = yield* prepare(row)
        if (typeof prepared === "string") return prepared
        // `started` tells an interruption during the call from one that arrived earlier (during the work above,
        // which runs uninterruptibly): `restore` then fails at once and the call never begins.
        let started = false
        const sent = yield* Effect.exit(restore(Effect.suspend(() => {
          started = true
          return mailer.send(prepared, row.id).pipe(timeProviderCall("reset-mail"))
        })))
        if (Exit.isSuccess(sent)) return yield* record(row, sent.value)
        // Interrupted mid-call (shutdown): the call is aborted and may have reached the provider. The fenced
        // quarantine must be written before the pool closes; if it cannot be, the process exits non-zero.
        // Interrupted before the call: nothing reached the provider, so the outcome is not ambiguous and a
        // quarantine would only cost the user the mail; the row goes back to pending, due now (same fingerprint).
        const cleanup = started ? finish(row, "quarantined", "provider-interrupted") : releaseUnsent(row, "worker-interrupted", "now")
        const outcome = yield* cleanup.pipe(
          // Another worker already quarantined it as stale: nothing left to record.
          Effect.catchTag("LeaseLost", () => Effect.succeed("lease-lost" as const)),
          Effect.orDie
        )
        // `send` never fails: anything but an interruption is a bug in the adapter, recorded like an
        // interruption (the call may have gone out) and then raised.
        // Stryker disable next-line ConditionalExpression: failing with an interruption-only cause ends the interrupted fiber exactly as returning does
        if (!Cause.isInterruptedOnly(sent.cause)) return yield* Effect.failCause(sent.cause)
        return outcome
      })

    /**
     * One attempt, uninterruptible from the claim on except for the provider call itself: a claimed row always
     * ends the attempt with a recorded, fenced transition (or dies trying, which exits non-zero at shutdown).
     */
    const attempt = (owner: string, at: number) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function* () {
          const row = yield* repo.claimOne(new Date(at), owner).pipe(Effect.withSpan("ResetMailDelivery.claim"))
          if (row === undefined) return Option.none()
          const outcome = yield* deliver(row, restore).pipe(
            // A late owner records nothing: its fenced write touched no row.
            Effect.catchTag("LeaseLost", () => Effect.succeed("lease-lost" as const)),
            Effect.tap((outcome) => Effect.annotateCurrentSpan("delivery.outcome", outcome)),
            Effect.withSpan("ResetMailDelivery.deliver", { attributes: { "delivery.family": "reset-mail" } })
          )
          if (outcome !== "lease-lost") yield* recordOutcome("reset-mail", outcome)
          return Option.some({ row, outcome })
        })
      )

    const tick = Effect.fn("ResetMailDelivery.tick")(function* (owner: string) {
      const at = yield* Clock.currentTimeMillis
      const quarantinedStale = yield* repo.quarantineStale({
        claimedBefore: new Date(at - Duration.toMillis(settings.staleClaim)),
        at: new Date(at)
      })
      // Stryker disable next-line ConditionalExpression,EqualityOperator: only decides whether the warning is logged
      if (quarantinedStale > 0) yield* Effect.logWarning("reset mail: stale claims quarantined").pipe(Effect.annotateLogs({ count: quarantinedStale }))
      yield* recordOutcome("reset-mail", "quarantined", quarantinedStale)
      const done = yield* attempt(owner, at)
      // Stryker disable next-line ConditionalExpression,BlockStatement: only the attempt's log line
      if (Option.isSome(done)) {
        yield* Effect.logInfo("reset mail attempt").pipe(
          Effect.annotateLogs({ outbox: done.value.row.id, attempt: done.value.row.attempt, outcome: done.value.outcome })
        )
      }
      return {
        quarantinedStale,
        attempt: Option.map(done, ({ outcome, row }) => ({ id: row.id, outcome }))
      } satisfies TickResult
    })

    return { tick } as const
  }),
  // Stryker disable next-line ArrayDeclaration: the package tests provide a repository themselves; the backend provides none, so packages/backend/test/ResetMail.test.ts fails without it
  dependencies: [ResetMailRepo.Default]
}) {}

/** Shows up as lease_owner: which process holds a claim. Never part of the fence. */
// Stryker disable next-line StringLiteral,MethodExpression: lease_owner is diagnostic only, never part of the fence
export const makeOwner = () => `${hostname().slice(0, 40)}:${process.pid}:${randomBytes(4).toString("hex")}`

/** Spec 002: one attempt per tick, then the poll interval, also after a failure. */
export const deliveryLoop = Effect.gen(function* () {
  const delivery = yield* ResetMailDelivery
  const settings = yield* ResetMailSettings
  const owner = makeOwner()
  while (true) {
    const result = yield* Effect.either(delivery.tick(owner))
    // Stryker disable next-line ConditionalExpression,BlockStatement: only the failed tick's warning
    if (Either.isLeft(result)) {
      yield* Effect.logWarning("reset mail tick failed; waiting for the next one").pipe(
        Effect.annotateLogs({ error: result.left._tag })
      )
    }
    yield* Effect.sleep(settings.pollInterval)
  }
})

// Stryker disable next-line StringLiteral: /ready naming the worker is checked by packages/backend/test/ResetMail.test.ts
export const WORKER_NAME = "reset-mail"

/** The worker with its mailer, template and identity service left open (tests pass their own). */
export const resetMailWorkerLayer = workerLayer(WORKER_NAME, deliveryLoop).pipe(Layer.provide(ResetMailDelivery.Default))

/** The backend role's worker: the mail adapter over fetch with the settings validated at start-up. */
// Stryker disable next-line ArrowFunction: the backend's wiring, exercised by packages/backend/test/ResetMail.test.ts
export const resetMailWorkerLive = (settings: WorkerSettings) =>
  resetMailWorkerLayer.pipe(
    Layer.provide(Mailer.layerWith(settings.mail)),
    Layer.provide(ResetTemplateDefault),
    Layer.provide(Layer.succeed(ResetMailSettings, settings))
  )
