import type { Email, TenantId } from "@delivery/identity"
import { PasswordResets } from "@delivery/identity"
import { type QueueView, queueSnapshotOf } from "@delivery/core"
import { Clock, Effect, Option } from "effect"
import { randomUUID } from "node:crypto"
import {
  decodeCursor,
  encodeCursor,
  RESET_MAIL_PAGE_LIMIT,
  ResetMailItem,
  ResetMailPage,
  UUID
} from "./ResetMailItems.ts"
import { type ItemRow, ResetMailRepo, ResetMailState, type ResetMailStorageUnavailable } from "./ResetMailRepo.ts"

const toItem = (row: ItemRow) =>
  new ResetMailItem({
    id: row.id,
    tenant: row.tenant_id,
    state: row.state,
    attempt: row.attempt,
    reason: row.reason,
    lastError: row.last_error,
    providerStatus: row.provider_status,
    nextAttemptAt: row.next_attempt_at,
    claimedAt: row.claimed_at,
    createdAt: row.created_at,
    updatedAt: row.updated_at
  })

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
     * One page of a tenant's reset mail, optionally in one state, oldest first (the console's list). Sizes are
     * clamped to 1..100.
     */
    const mails = Effect.fn("ResetRequests.mails")(function* (tenant: string, options: {
      readonly state?: typeof ResetMailState.Type | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
    } = {}) {
      const size = Math.min(Math.max(Math.floor(options.limit ?? RESET_MAIL_PAGE_LIMIT), 1), RESET_MAIL_PAGE_LIMIT)
      const after = options.cursor === undefined ? null : yield* decodeCursor(options.cursor)
      const rows = yield* repo.listTenant({ tenant, state: options.state ?? null, after, limit: size + 1 })
      const page = rows.slice(0, size)
      const last = page[page.length - 1]
      return new ResetMailPage({
        items: page.map(toItem),
        nextCursor: rows.length > size && last !== undefined ? encodeCursor(last.position, last.id) : null
      })
    })

    /** One row of a tenant's reset mail; none for an id that is not a row of this tenant. */
    const mail = Effect.fn("ResetRequests.mail")(function* (tenant: string, id: string) {
      if (!UUID.test(id)) return Option.none<ResetMailItem>()
      return Option.map(yield* repo.findItem(tenant, id), toItem)
    })

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

    return { request, complete: resets.complete, hasPendingWork, queueView, mails, mail } as const
  })
}) {}
