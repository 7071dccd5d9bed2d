import { PersistedQueue } from "@effect/experimental"
import { Canonical, encodeKeyset, isKeysetTime, queueSnapshotOf, type QueueView, readKeyset } from "@delivery/core"
import { freezeMessage, type Mailbox } from "@delivery/mail"
import { Clock, Context, Effect, Either, Option, Schema } from "effect"
import { randomUUID } from "node:crypto"
import {
  ApplicationAuditEntry,
  type ApplicationState,
  type ApplicationSubmitted,
  CommandConflict,
  DeliveryState,
  NOTIFICATION_PAGE_LIMIT,
  NotificationCursorInvalid,
  NotificationItem,
  NotificationPage,
  QUEUE_NAME,
  SubmitApplication,
  TeamApplicationsStorageUnavailable
} from "./Domain.ts"
import { renderNotifications } from "./Notifications.ts"
import { type ItemRow, TeamApplicationsRepo } from "./TeamApplicationsRepo.ts"

/** What a queue item holds: the effect's name only (its envelope stays in the outbox). */
export const QueueItem = Schema.Struct({ effect: Schema.UUID })
export type QueueItem = typeof QueueItem.Type

/** The notification queue on the `PersistedQueue` interface (backed by the project's store, EffectQueueStore.ts). */
export class NotificationQueue extends Context.Tag("@delivery/team-applications/NotificationQueue")<
  NotificationQueue,
  PersistedQueue.PersistedQueue<QueueItem>
>() {}

export const makeNotificationQueue = PersistedQueue.make({ name: QUEUE_NAME, schema: QueueItem })

/** The sender the envelopes are rendered with; none: submissions are refused. */
export class TeamApplicationsSender extends Context.Tag("@delivery/team-applications/TeamApplicationsSender")<
  TeamApplicationsSender,
  Option.Option<Mailbox>
>() {}

export interface Submitter {
  readonly tenant: string
  readonly account: string
  /** Names the credential kind and id, never the credential: `api-key:<lookup id>`. */
  readonly actor: string
  readonly correlationId: string
}

const encodeCommand = Schema.encodeSync(SubmitApplication)

/** The request's identity for replays: SHA-256 of its canonical JSON (defaults applied, so omitting `message` = ""). */
export const requestSha256 = (command: SubmitApplication) =>
  Canonical.sha256Hex(Either.getOrThrow(Canonical.canonicalString(encodeCommand(command))))

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

// Cursor: base64url of "<created_at to the microsecond, UTC>|<effect id>", the last notification of a page, as the
// database wrote the time: a millisecond form would skip or repeat rows whose times differ below the millisecond.
const encodeCursor = (row: ItemRow) => encodeKeyset(row.position, row.effect_id)

const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)\|([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/

const decodeCursor = (cursor: string) => {
  const match = readKeyset(cursor, CURSOR)
  return match === null || !isKeysetTime(match[1]!)
    ? Effect.fail(new NotificationCursorInvalid({ reason: "cursor-invalid" }))
    : Effect.succeed({ at: match[1]!, id: match[2]! })
}

const toItem = (row: ItemRow) =>
  new NotificationItem({
    effectId: row.effect_id,
    applicationId: row.application_id,
    tenant: row.tenant_id,
    audience: row.audience,
    state: row.state,
    attempts: row.attempts,
    nextAttemptAt: row.next_attempt_at,
    leaseExpiresAt: row.lease_expires_at,
    failures: row.failures,
    lastError: row.last_error,
    outcomeAt: row.outcome_at,
    createdAt: row.created_at
  })

/**
 * Team-application submissions (spec 002): the application, its command receipt, the audit row, both notification
 * envelopes and one queue item per notification commit in one transaction. The same command id with the same
 * content answers the recorded response and writes nothing; with other content it is refused (`command-id-reused`).
 */
export class TeamApplications extends Effect.Service<TeamApplications>()("@delivery/team-applications/TeamApplications", {
  effect: Effect.gen(function* () {
    const repo = yield* TeamApplicationsRepo
    const queue = yield* NotificationQueue
    const sender = yield* TeamApplicationsSender

    const submit = Effect.fn("TeamApplications.submit")(function* (command: SubmitApplication, by: Submitter) {
      const sha = requestSha256(command)
      return yield* repo.transaction(
        "submit",
        Effect.gen(function* () {
          yield* repo.lockCommand(by.tenant, command.commandId)
          const previous = yield* repo.findCommand(by.tenant, command.commandId)
          if (Option.isSome(previous)) {
            if (previous.value.request_sha256 !== sha) {
              return yield* new CommandConflict({ reason: "command-id-reused", correlationId: by.correlationId })
            }
            return { replayed: true, response: previous.value.response as ApplicationSubmitted }
          }
          // A replay above still answers without a sender; a new submission needs one to render its envelopes.
          if (Option.isNone(sender)) return yield* Effect.fail({ _tag: "SenderUnconfigured" } as const)
          const at = new Date(yield* Clock.currentTimeMillis)
          const id = randomUUID()
          yield* repo.insertApplication({
            id,
            tenant: by.tenant,
            commandId: command.commandId,
            teamSlug: command.team.slug,
            teamName: command.team.name,
            teamEmail: command.team.email,
            applicantName: command.applicant.name,
            applicantEmail: command.applicant.email,
            message: command.message,
            submittedBy: by.account,
            at
          })
          const envelopes = renderNotifications(sender.value, command).map(({ audience, message }) => ({
            effectId: randomUUID(),
            audience,
            ...freezeMessage(message)
          }))
          yield* repo.insertEnvelopes({ applicationId: id, tenant: by.tenant, at, envelopes })
          // Inside the transaction: the items commit (or not) with everything else.
          for (const envelope of envelopes) {
            yield* queue.offer({ effect: envelope.effectId }, { id: envelope.effectId }).pipe(
              Effect.mapError(() => new TeamApplicationsStorageUnavailable({ operation: "offer" }))
            )
          }
          const response: ApplicationSubmitted = {
            application: { id, tenant: by.tenant, commandId: command.commandId, team: command.team.slug, createdAt: at.toISOString() },
            notifications: envelopes.map(({ audience, effectId }) => ({ effectId, audience }))
          }
          yield* repo.insertCommand({ tenant: by.tenant, commandId: command.commandId, requestSha256: sha, applicationId: id, response, at })
          yield* repo.insertAudit({ tenant: by.tenant, applicationId: id, actor: by.actor, correlationId: by.correlationId, at })
          return { replayed: false, response }
        })
      )
    })

    /** An application's notifications and their delivery states (never an address or an envelope). */
    const state = Effect.fn("TeamApplications.state")(function* (tenant: string, id: string) {
      const head = yield* repo.head(tenant, id)
      if (Option.isNone(head)) return Option.none<ApplicationState>()
      const rows = yield* repo.states(id)
      return Option.some<ApplicationState>({
        id: head.value.id,
        tenant: head.value.tenant_id,
        team: head.value.team_slug,
        createdAt: head.value.created_at,
        notifications: rows.map((row) => ({
          effectId: row.effect_id,
          audience: row.audience,
          state: row.state,
          attempts: row.attempts,
          nextAttemptAt: row.next_attempt_at,
          leaseExpiresAt: row.lease_expires_at,
          failures: row.failures,
          lastError: row.last_error,
          outcomeAt: row.outcome_at
        }))
      })
    })

    /**
     * One page of a tenant's notifications, optionally in one delivery state, oldest first (the console's list). Sizes
     * are clamped to 1..100.
     */
    const notifications = Effect.fn("TeamApplications.notifications")(function* (tenant: string, options: {
      readonly state?: DeliveryState | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
    } = {}) {
      const size = Math.min(Math.max(Math.floor(options.limit ?? NOTIFICATION_PAGE_LIMIT), 1), NOTIFICATION_PAGE_LIMIT)
      const after = options.cursor === undefined ? null : yield* decodeCursor(options.cursor)
      const rows = yield* repo.listTenant({ tenant, state: options.state ?? null, after, limit: size + 1 })
      const page = rows.slice(0, size)
      const last = page[page.length - 1]
      return new NotificationPage({
        items: page.map(toItem),
        // Stryker disable next-line ConditionalExpression: a page holds at least one row whenever more rows follow, so `last` is then defined
        nextCursor: rows.length > size && last !== undefined ? encodeCursor(last) : null
      })
    })

    /** One notification of a tenant by its effect id; none for an id that is not one of this tenant's. */
    const notification = Effect.fn("TeamApplications.notification")(function* (tenant: string, effectId: string) {
      if (!UUID.test(effectId)) return Option.none<NotificationItem>()
      return Option.map(yield* repo.findItem(tenant, effectId), toItem)
    })

    /** An application's business audit rows (who submitted it, under which request), newest first, at most 100. */
    const applicationAudit = Effect.fn("TeamApplications.applicationAudit")(function* (tenant: string, applicationId: string) {
      if (!UUID.test(applicationId)) return []
      const rows = yield* repo.auditOf({ tenant, applicationId, limit: NOTIFICATION_PAGE_LIMIT })
      return rows.map((row) => new ApplicationAuditEntry({ action: row.action, actor: row.actor, correlationId: row.correlation_id, at: row.at }))
    })

    /** Spec 001's pending work: a notification whose queue item is neither completed nor exhausted (due, also while its retry waits, or leased). */
    const hasPendingWork: Effect.Effect<boolean, TeamApplicationsStorageUnavailable> = repo.hasPending.pipe(
      Effect.withSpan("TeamApplications.hasPendingWork")
    )

    /**
     * The notifications as a durable queue (core's QueueView), by the states an operator already reads for one
     * application (team_application_delivery_state): pending, processing (an attempt holds the lease), failed (a retry
     * waits), then the outcomes delivered, rejected, exhausted, envelope-invalid, and missing (an outbox row without
     * its queue item). The queue's own `completed` would lump rejections in with deliveries; the outcome tells them
     * apart. Due: a queue item the store's claim would take now (its retry delay over, no live lease), aged from the
     * later of the two; completed: notifications delivered, by their outcome time.
     */
    const queueView: QueueView = {
      family: "team-applications",
      title: "Team-application notifications",
      snapshot: Effect.map(repo.queueView, queueSnapshotOf("team-applications", DeliveryState.literals)).pipe(
        Effect.withSpan("TeamApplications.queueView")
      )
    }

    return { submit, state, notifications, notification, applicationAudit, summary: repo.summary, hasPendingWork, queueView } as const
  }),
  dependencies: [TeamApplicationsRepo.Default]
}) {}
