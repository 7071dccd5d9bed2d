import type { Email, TenantId } from "@delivery/identity"
import { PasswordResets } from "@delivery/identity"
import { type QueueView, queueSnapshotOf } from "@delivery/core"
import { Clock, Effect, Option } from "effect"
import { randomUUID } from "node:crypto"
import { ResetMailRepo, ResetMailState, type ResetMailStorageUnavailable } from "./ResetMailRepo.ts"

/**
 * A reset request (spec 002): for an enabled account, its verification and an outbox row commit in one
 * transaction; for any other address, nothing. Either way the caller learns nothing: the answer does not depend
 * on the outcome. The request never talks to the mail provider; the worker does.
 */
export class ResetRequests extends Effect.Service<ResetRequests>()("@delivery/reset-mail/ResetRequests", {
  effect: Effect.gen(function* () {
    const resets = yield* PasswordResets
    const repo = yield* ResetMailRepo

    const request = Effect.fn("ResetRequests.request")(function* (input: { readonly tenant: TenantId; readonly email: Email }) {
      return yield* repo.transaction(
        "request",
        Effect.gen(function* () {
          const verification = yield* resets.begin(input)
          if (Option.isNone(verification)) return false
          const at = new Date(yield* Clock.currentTimeMillis)
          // Ids and the tenant only: the address, token and body are read live by each delivery attempt.
          yield* repo.insert({ id: randomUUID(), verificationId: verification.value.verificationId, tenant: input.tenant, at })
          return true
        })
      )
    })

    /** Spec 001's pending work: a reset mail row not yet ended (pending, also while its retry waits, or sending). */
    const hasPendingWork: Effect.Effect<boolean, ResetMailStorageUnavailable> = repo.hasPending.pipe(
      Effect.withSpan("ResetRequests.hasPendingWork")
    )

    /**
     * Reset mail as a durable queue (core's QueueView): rows by state (pending, sending, delivered, rejected,
     * quarantined, stopped); due: a pending row whose attempt time has come (a sending row is settled by the worker's
     * stale-claim rule, never claimed again); completed: rows delivered, by their delivery time.
     */
    const queueView: QueueView = {
      family: "reset-mail",
      title: "Password-reset mail",
      snapshot: Effect.map(repo.queueView, queueSnapshotOf("reset-mail", ResetMailState.literals)).pipe(
        Effect.withSpan("ResetRequests.queueView")
      )
    }

    return { request, complete: resets.complete, hasPendingWork, queueView } as const
  })
}) {}
