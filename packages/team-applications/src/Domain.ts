import { Schema } from "effect"

// Wire shapes of team applications. Everything is bounded: names 200 characters, the message 2,000.

export const TEAM_APPLICATIONS_PERMISSION = "team-applications:write"

/** The queue of the notifications in effect_queue (migrations 0018, 0019 name it too). */
export const QUEUE_NAME = "team-application-notifications"

const correlationId = Schema.String.annotations({ description: "the request's x-correlation-id" })

export const CommandId = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9._:-]{1,128}$/, { message: () => "commandId: 1-128 of A-Z a-z 0-9 . _ : -" })
)

export const ApplicationId = Schema.String.pipe(
  Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, { message: () => "an application id as returned by the submission" })
)

const Name = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(200), Schema.pattern(/^[^\r\n]*$/, { message: () => "one line" }))
const Email = Schema.String.pipe(Schema.maxLength(254), Schema.pattern(/^[^\s@<>",;]+@[^\s@<>",;]+$/, { message: () => "an e-mail address" }))

export const SubmitApplication = Schema.Struct({
  /** The client's id for this command: the same id and content replays, the same id and other content is refused. */
  commandId: CommandId,
  team: Schema.Struct({
    slug: Schema.String.pipe(Schema.pattern(/^[a-z0-9][a-z0-9-]{0,63}$/, { message: () => "a team slug: a-z 0-9 -, up to 64" })),
    name: Name,
    /** Where the team's notification goes. */
    email: Email
  }),
  applicant: Schema.Struct({ name: Name, email: Email }),
  message: Schema.optionalWith(Schema.String.pipe(Schema.maxLength(2000)), { default: () => "" })
}).annotations({ identifier: "SubmitTeamApplication", parseOptions: { onExcessProperty: "error" } })
export type SubmitApplication = typeof SubmitApplication.Type

export const Audience = Schema.Literal("applicant", "team")
export type Audience = typeof Audience.Type

export const ApplicationSubmitted = Schema.Struct({
  application: Schema.Struct({
    id: Schema.String,
    tenant: Schema.String,
    commandId: Schema.String,
    team: Schema.String,
    createdAt: Schema.String
  }),
  /** Both notifications: their effect ids are the provider idempotency keys. */
  notifications: Schema.Array(Schema.Struct({ effectId: Schema.String, audience: Audience }))
}).annotations({ identifier: "TeamApplicationSubmitted" })
export type ApplicationSubmitted = typeof ApplicationSubmitted.Type

/** Pending, processing while an attempt holds the lease, failed while a retry waits, or the outcome. */
export const DeliveryState = Schema.Literal(
  "pending",
  "processing",
  "failed",
  "delivered",
  "rejected",
  "exhausted",
  "envelope-invalid",
  "missing"
)
export type DeliveryState = typeof DeliveryState.Type

export const NotificationState = Schema.Struct({
  effectId: Schema.String,
  audience: Audience,
  state: DeliveryState,
  attempts: Schema.Number,
  /** failed: when the next attempt is due. */
  nextAttemptAt: Schema.NullOr(Schema.Date),
  /** processing: when the lease ends unless it is refreshed. */
  leaseExpiresAt: Schema.NullOr(Schema.Date),
  failures: Schema.Number,
  lastError: Schema.NullOr(Schema.String),
  outcomeAt: Schema.NullOr(Schema.Date)
}).annotations({ identifier: "TeamApplicationNotificationState" })

export const ApplicationState = Schema.Struct({
  id: Schema.String,
  tenant: Schema.String,
  team: Schema.String,
  createdAt: Schema.Date,
  notifications: Schema.Array(NotificationState)
}).annotations({ identifier: "TeamApplicationState" })
export type ApplicationState = typeof ApplicationState.Type

export const DeliverySummary = Schema.Struct({
  /** Notifications by delivery state, over every tenant. */
  states: Schema.Array(Schema.Struct({ state: DeliveryState, count: Schema.Number })),
  /** Queue items ended (completed or exhausted) and still kept; removed 30 days after they ended. */
  endedQueueItems: Schema.Number
}).annotations({ identifier: "TeamApplicationDeliverySummary" })

/** Notifications per page and audit rows per application, at most. */
export const NOTIFICATION_PAGE_LIMIT = 100

/**
 * A notification as an operator reads it (team_application_delivery_state): ids, audience, delivery state, attempts,
 * codes and times. Never an address, a name, the message or the envelope.
 */
export class NotificationItem extends Schema.Class<NotificationItem>("TeamApplicationNotificationItem")({
  effectId: Schema.String,
  applicationId: Schema.String,
  tenant: Schema.String,
  audience: Audience,
  state: DeliveryState,
  attempts: Schema.Number,
  /** failed: when the next attempt is due. */
  nextAttemptAt: Schema.NullOr(Schema.DateFromSelf),
  /** processing: when the lease ends unless it is refreshed. */
  leaseExpiresAt: Schema.NullOr(Schema.DateFromSelf),
  failures: Schema.Number,
  lastError: Schema.NullOr(Schema.String),
  outcomeAt: Schema.NullOr(Schema.DateFromSelf),
  createdAt: Schema.DateFromSelf
}) {}

/** One page of a tenant's notifications; `nextCursor` continues after its last one, null on the last page. */
export class NotificationPage extends Schema.Class<NotificationPage>("TeamApplicationNotificationPage")({
  items: Schema.Array(NotificationItem),
  nextCursor: Schema.NullOr(Schema.String)
}) {}

/** A `team_application_audit` row: who submitted the application, under which request. */
export class ApplicationAuditEntry extends Schema.Class<ApplicationAuditEntry>("TeamApplicationAuditEntry")({
  action: Schema.String,
  actor: Schema.String,
  correlationId: Schema.String,
  at: Schema.DateFromSelf
}) {}

// Refusals: a stable reason and the correlation id, nothing the client sent.

/** A notification list's cursor that this package did not write. */
export class NotificationCursorInvalid extends Schema.TaggedError<NotificationCursorInvalid>()("TeamApplicationNotificationCursorInvalid", {
  reason: Schema.Literal("cursor-invalid")
}) {}

export class CommandConflict extends Schema.TaggedError<CommandConflict>()("TeamApplicationCommandConflict", {
  reason: Schema.Literal("command-id-reused"),
  correlationId
}) {}

export class ApplicationNotFound extends Schema.TaggedError<ApplicationNotFound>()("TeamApplicationNotFound", {
  reason: Schema.Literal("application-not-found"),
  correlationId
}) {}

export class TeamApplicationsUnavailable extends Schema.TaggedError<TeamApplicationsUnavailable>()("TeamApplicationsUnavailable", {
  /** `team-applications-unconfigured`: TEAM_APPLICATION_FROM is not set in this process, so no envelope can be made. */
  reason: Schema.Literal("storage-unavailable", "team-applications-unconfigured"),
  correlationId
}) {}

/** Database failures inside the package; mapped to `TeamApplicationsUnavailable` at the HTTP edge. */
export class TeamApplicationsStorageUnavailable extends Schema.TaggedError<TeamApplicationsStorageUnavailable>()(
  "TeamApplicationsStorageUnavailable",
  { operation: Schema.String }
) {}
