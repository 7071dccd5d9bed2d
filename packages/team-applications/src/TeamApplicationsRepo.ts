import { completionBucket, queueViewQuery, QueueViewRow, storageErrors } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Audience, DeliveryState, QUEUE_NAME, TeamApplicationsStorageUnavailable } from "./Domain.ts"

// SQL of team applications (migrations 0017-0019); private to the package. The queue's own rows belong to the
// effect queue store (EffectQueueStore.ts); this file never writes them and reads them through
// team_application_delivery_state, or by queue name for the operator summary and the pending-work check.

const storage = (operation: string) => storageErrors(operation, () => new TeamApplicationsStorageUnavailable({ operation }))

export const Outcome = Schema.Literal("delivered", "rejected", "exhausted", "envelope-invalid")
export type Outcome = typeof Outcome.Type

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const CommandRow = Schema.Struct({ request_sha256: Schema.String, response: Schema.Unknown })

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const EnvelopeRow = Schema.Struct({
  envelope: Schema.String,
  envelope_sha256: Schema.String,
  outcome: Schema.NullOr(Outcome)
})

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const StateRow = Schema.Struct({
  effect_id: Schema.String,
  audience: Audience,
  state: DeliveryState,
  attempts: Schema.Number,
  next_attempt_at: Schema.NullOr(Schema.DateFromSelf),
  lease_expires_at: Schema.NullOr(Schema.DateFromSelf),
  failures: Schema.Number,
  last_error: Schema.NullOr(Schema.String),
  outcome_at: Schema.NullOr(Schema.DateFromSelf)
})

/** A notification as the console reads it, with its keyset position (created_at to the microsecond, UTC). */
// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const ItemRow = Schema.Struct({
  effect_id: Schema.String,
  application_id: Schema.String,
  tenant_id: Schema.String,
  audience: Audience,
  state: DeliveryState,
  attempts: Schema.Number,
  next_attempt_at: Schema.NullOr(Schema.DateFromSelf),
  lease_expires_at: Schema.NullOr(Schema.DateFromSelf),
  failures: Schema.Number,
  last_error: Schema.NullOr(Schema.String),
  outcome_at: Schema.NullOr(Schema.DateFromSelf),
  created_at: Schema.DateFromSelf,
  position: Schema.String
})
export type ItemRow = typeof ItemRow.Type

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const AuditRow = Schema.Struct({
  action: Schema.String,
  actor: Schema.String,
  correlation_id: Schema.String,
  at: Schema.DateFromSelf
})

const itemColumns = `effect_id::text AS effect_id, application_id::text AS application_id, tenant_id, audience, state, attempts,
  next_attempt_at, lease_expires_at, failures, last_error, outcome_at, created_at,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS position`

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const ApplicationHead = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  team_slug: Schema.String,
  created_at: Schema.DateFromSelf
})

export interface NewApplication {
  readonly id: string
  readonly tenant: string
  readonly commandId: string
  readonly teamSlug: string
  readonly teamName: string
  readonly teamEmail: string
  readonly applicantName: string
  readonly applicantEmail: string
  readonly message: string
  readonly submittedBy: string
  readonly at: Date
}

export interface NewEnvelope {
  readonly effectId: string
  readonly audience: Audience
  readonly envelope: string
  readonly sha256: string
}

/** The outbox's side of an outcome, run by the queue store's hooks inside its fenced transaction. */
export const recordOutcome = (effectId: string, attempt: number, outcome: Outcome, lastError: string | null) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE team_application_outbox
        SET outcome = ${outcome}, outcome_attempt = ${attempt}, outcome_at = now(), last_error = COALESCE(${lastError}, last_error)
        WHERE effect_id = ${effectId} AND outcome IS NULL`.withoutTransform)

export const recordFailure = (effectId: string, attempt: number, reason: string, exhausted: boolean) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE team_application_outbox
        SET failures = failures + 1, last_error = ${reason},
            outcome = CASE WHEN ${exhausted} THEN 'exhausted' END,
            outcome_attempt = CASE WHEN ${exhausted} THEN ${attempt}::int END,
            outcome_at = CASE WHEN ${exhausted} THEN now() END
        WHERE effect_id = ${effectId} AND outcome IS NULL`.withoutTransform)

export class TeamApplicationsRepo extends Effect.Service<TeamApplicationsRepo>()("@delivery/team-applications/TeamApplicationsRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    // Serializes commands with one id of one tenant: the second waits, then finds the first one's application.
    const lockCommand = (tenant: string, commandId: string) =>
      // Stryker disable next-line StringLiteral: one key for every command would serialize more commands, never fewer
      sql`SELECT pg_advisory_xact_lock(hashtextextended(${`team-application-command:${tenant}:${commandId}`}, 0))`.withoutTransform

    const findCommand = SqlSchema.findOne({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ tenant: Schema.String, commandId: Schema.String }),
      Result: CommandRow,
      execute: (r) => sql`SELECT request_sha256, response FROM team_application_commands
                          WHERE tenant_id = ${r.tenant} AND command_id = ${r.commandId}`.withoutTransform
    })

    const insertApplication = (r: NewApplication) =>
      sql`INSERT INTO team_applications (id, tenant_id, command_id, team_slug, team_name, team_email, applicant_name,
                                         applicant_email, message, submitted_by, created_at)
          VALUES (${r.id}, ${r.tenant}, ${r.commandId}, ${r.teamSlug}, ${r.teamName}, ${r.teamEmail}, ${r.applicantName},
                  ${r.applicantEmail}, ${r.message}, ${r.submittedBy}, ${r.at})`.withoutTransform

    const insertEnvelopes = (r: { readonly applicationId: string; readonly tenant: string; readonly at: Date; readonly envelopes: ReadonlyArray<NewEnvelope> }) =>
      sql`INSERT INTO team_application_outbox ${sql.insert(r.envelopes.map((e) => ({
        effect_id: e.effectId,
        application_id: r.applicationId,
        tenant_id: r.tenant,
        audience: e.audience,
        envelope: e.envelope,
        envelope_sha256: e.sha256,
        created_at: r.at
      })))}`.withoutTransform

    const insertCommand = (r: { readonly tenant: string; readonly commandId: string; readonly requestSha256: string; readonly applicationId: string; readonly response: unknown; readonly at: Date }) =>
      sql`INSERT INTO team_application_commands (tenant_id, command_id, request_sha256, application_id, response, created_at)
          VALUES (${r.tenant}, ${r.commandId}, ${r.requestSha256}, ${r.applicationId}, ${JSON.stringify(r.response)}::jsonb, ${r.at})`.withoutTransform

    const insertAudit = (r: { readonly tenant: string; readonly applicationId: string; readonly actor: string; readonly correlationId: string; readonly at: Date }) =>
      sql`INSERT INTO team_application_audit (tenant_id, application_id, action, actor, correlation_id, at)
          VALUES (${r.tenant}, ${r.applicationId}, 'application-submitted', ${r.actor}, ${r.correlationId}, ${r.at})`.withoutTransform

    const envelopeOf = SqlSchema.findOne({
      Request: Schema.String,
      Result: EnvelopeRow,
      execute: (effectId) => sql`SELECT envelope, envelope_sha256, outcome FROM team_application_outbox
                                 WHERE effect_id = ${effectId}`.withoutTransform
    })

    const head = SqlSchema.findOne({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ tenant: Schema.String, id: Schema.String }),
      Result: ApplicationHead,
      execute: (r) => sql`SELECT id::text AS id, tenant_id, team_slug, created_at FROM team_applications
                          WHERE tenant_id = ${r.tenant} AND id = ${r.id}`.withoutTransform
    })

    const states = SqlSchema.findAll({
      Request: Schema.String,
      Result: StateRow,
      execute: (applicationId) => sql`
        SELECT effect_id::text AS effect_id, audience, state, attempts, next_attempt_at, lease_expires_at, failures, last_error, outcome_at
        FROM team_application_delivery_state WHERE application_id = ${applicationId}
        ORDER BY audience`.withoutTransform
    })

    // The console's list: one tenant, optionally one delivery state, oldest first, by keyset on (created_at, effect_id).
    // The tenant and keyset conditions are on the outbox's columns, so they reach team_application_outbox_tenant
    // through the view; the state is computed per row from both tables.
    const listTenant = SqlSchema.findAll({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({
        tenant: Schema.String,
        state: Schema.NullOr(DeliveryState),
        // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
        after: Schema.NullOr(Schema.Struct({ at: Schema.String, id: Schema.String })),
        limit: Schema.Number
      }),
      Result: ItemRow,
      execute: (r) => sql`
        SELECT ${sql.literal(itemColumns)} FROM team_application_delivery_state
        WHERE tenant_id = ${r.tenant}
          ${r.state === null ? sql`` : sql`AND state = ${r.state}`}
          ${r.after === null ? sql`` : sql`AND (created_at, effect_id) > (${r.after.at}::timestamptz, ${r.after.id}::uuid)`}
        ORDER BY created_at, effect_id LIMIT ${r.limit}`.withoutTransform
    })

    const findItem = SqlSchema.findOne({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ tenant: Schema.String, id: Schema.String }),
      Result: ItemRow,
      execute: (r) => sql`
        SELECT ${sql.literal(itemColumns)} FROM team_application_delivery_state
        WHERE tenant_id = ${r.tenant} AND effect_id = ${r.id}::uuid`.withoutTransform
    })

    // An application's business audit, newest first, bounded (team_application_audit_application).
    const auditOf = SqlSchema.findAll({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ tenant: Schema.String, applicationId: Schema.String, limit: Schema.Number }),
      Result: AuditRow,
      execute: (r) => sql`
        SELECT action, actor, correlation_id, at FROM team_application_audit
        WHERE application_id = ${r.applicationId}::uuid AND tenant_id = ${r.tenant}
        ORDER BY audit_id DESC LIMIT ${r.limit}`.withoutTransform
    })

    const summary = Effect.all({
      states: SqlSchema.findAll({
        Request: Schema.Void,
        // Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
        Result: Schema.Struct({ state: DeliveryState, count: Schema.Number }),
        execute: () => sql`SELECT state, count(*)::int AS count FROM team_application_delivery_state GROUP BY state ORDER BY state`.withoutTransform
      })(undefined),
      ended: sql<{ readonly count: number }>`
        SELECT count(*)::int AS count FROM effect_queue
        WHERE queue_name = 'team-application-notifications' AND (completed OR exhausted)`.withoutTransform
    })

    // Spec 001: a stack does not sleep while a notification is owed. The queue decides what a worker still takes: an
    // item of this queue neither completed nor exhausted (due, waiting for its retry delay, or leased, live or
    // expired), exactly the rows of the store's claim index (effect_queue_take). An outcome ends the item.
    const findPending = SqlSchema.findOne({
      Request: Schema.Void,
      // Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
      Result: Schema.Struct({ found: Schema.Number }),
      execute: () => sql`
        SELECT 1 AS found FROM effect_queue
        WHERE queue_name = ${QUEUE_NAME} AND NOT completed AND NOT exhausted LIMIT 1`.withoutTransform
    })

    // The queue view: notifications by delivery state, and deliveries per window by their outcome time, in one pass
    // over team_application_delivery_state (the outbox keeps every outcome, the queue's ended items are cleaned up);
    // the oldest due item from the store's claim index (effect_queue_take), by the claim's own predicate.
    const queueView = SqlSchema.single({
      Request: Schema.Void,
      Result: QueueViewRow,
      execute: () => queueViewQuery(sql, {
        groups: sql`
          SELECT state, ${completionBucket(sql, sql`CASE WHEN state = 'delivered' THEN outcome_at END`)} AS bucket,
                 count(*)::int AS count
          FROM team_application_delivery_state GROUP BY 1, 2`,
        dueSince: sql`
          SELECT min(greatest(available_at, lease_expires_at)) FROM effect_queue
          WHERE queue_name = ${QUEUE_NAME} AND NOT completed AND NOT exhausted AND available_at <= now()
            AND (lease_expires_at IS NULL OR lease_expires_at <= now())`
      }).withoutTransform
    })

    return {
      lockCommand: (tenant: string, commandId: string) => Effect.asVoid(lockCommand(tenant, commandId)).pipe(storage("lockCommand")),
      findCommand: (tenant: string, commandId: string) => findCommand({ tenant, commandId }).pipe(storage("findCommand")),
      insertApplication: (r: NewApplication) => Effect.asVoid(insertApplication(r)).pipe(storage("insertApplication")),
      insertEnvelopes: (r: Parameters<typeof insertEnvelopes>[0]) => Effect.asVoid(insertEnvelopes(r)).pipe(storage("insertEnvelopes")),
      insertCommand: (r: Parameters<typeof insertCommand>[0]) => Effect.asVoid(insertCommand(r)).pipe(storage("insertCommand")),
      insertAudit: (r: Parameters<typeof insertAudit>[0]) => Effect.asVoid(insertAudit(r)).pipe(storage("insertAudit")),
      envelopeOf: (effectId: string) => envelopeOf(effectId).pipe(storage("envelopeOf")),
      head: (tenant: string, id: string) => head({ tenant, id }).pipe(storage("head")),
      states: (applicationId: string) => states(applicationId).pipe(storage("states")),
      listTenant: (r: Parameters<typeof listTenant>[0]) => listTenant(r).pipe(storage("listTenant")),
      findItem: (tenant: string, id: string) => findItem({ tenant, id }).pipe(storage("findItem")),
      auditOf: (r: Parameters<typeof auditOf>[0]) => auditOf(r).pipe(storage("auditOf")),
      summary: Effect.map(summary, ({ ended, states }) => ({ states, endedQueueItems: ended[0]?.count ?? 0 })).pipe(storage("summary")),
      hasPending: Effect.map(findPending(undefined), Option.isSome).pipe(storage("hasPending")),
      queueView: queueView(undefined).pipe(Effect.catchTag("NoSuchElementException", Effect.die), storage("queueView")),
      transaction: <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) => sql.withTransaction(effect).pipe(storage(operation))
    } as const
  })
}) {}
