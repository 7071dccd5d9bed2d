import { expect } from "@effect/vitest"
import type { LoopbackProvider } from "@delivery/testing"
import { QUEUE_NAME } from "@delivery/team-applications"

export { QUEUE_NAME, TEAM_APPLICATIONS_PERMISSION } from "@delivery/team-applications"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { call } from "./Http.ts"

// Team applications through real backend processes (TeamApplications.test.ts): the provider configuration, a
// submission, and the rows a submission leaves in team_applications, its command receipt, audit, outbox and the
// notification queue (effect_queue), read straight from the suite's database.

export const SENDER = { address: "teams@acme.example", name: "Acme Teams" }
export const MAIL_TOKEN = `mail-${randomBytes(24).toString("base64url")}`

const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`

/**
 * An enabled worker against the loopback provider, with short timing (tests override what they exercise). Receipt
 * and reset delivery are disabled: this suite's provider calls are team-application notifications only.
 */
export const enabledEnv = (provider: LoopbackProvider, extra: Record<string, string> = {}): Record<string, string> => ({
  RECEIPT_DELIVERY: "disabled",
  TEAM_APPLICATION_DELIVERY: "enabled",
  TEAM_APPLICATION_FROM: SENDER.address,
  TEAM_APPLICATION_FROM_NAME: SENDER.name,
  TEAM_APPLICATION_DELIVERY_POLL_INTERVAL: "50 millis",
  TEAM_APPLICATION_RETRY_BASE: "200 millis",
  TEAM_APPLICATION_RETRY_CAP: "400 millis",
  MAIL_PROVIDER_URL: provider.urlFor("/emails"),
  MAIL_PROVIDER_TOKEN: MAIL_TOKEN,
  MAIL_PROVIDER_TIMEOUT: "5 seconds",
  ...extra
})

/** No worker, but the sender: submissions are accepted and their notifications wait. */
export const disabledEnv: Record<string, string> = {
  RECEIPT_DELIVERY: "disabled",
  TEAM_APPLICATION_DELIVERY: "disabled",
  TEAM_APPLICATION_FROM: SENDER.address,
  TEAM_APPLICATION_FROM_NAME: SENDER.name
}

/** A submission body; every address and name is unique to it, so a leak is attributable. */
export const application = (overrides: Record<string, unknown> = {}) => {
  const tag = randomBytes(3).toString("hex")
  return {
    commandId: unique("cmd"),
    team: { slug: `platform-${tag}`, name: `Platform Crew ${tag}`, email: `crew.${tag}@teams.example` },
    applicant: { name: `Dana Applicant ${tag}`, email: `dana.${tag}@applicant.example` },
    message: `I would like to join (${tag}).\nSecond line.`,
    ...overrides
  }
}
export type Application = ReturnType<typeof application>

export const submit = (port: number, token: string, body: unknown) => call(port, "POST", "/api/team-applications", { token, body })

/** A refusal as documented: status, tag and reason, and the correlation id of the answer. */
export const expectRefusal = (
  answer: { readonly status: number; readonly json: any; readonly headers: Record<string, string> },
  status: number,
  tag: string,
  reason?: string
) => {
  expect({ status: answer.status, tag: answer.json?._tag, reason: answer.json?.reason }).toEqual({ status, tag, reason })
  if (reason !== undefined) expect(answer.json.correlationId).toBe(answer.headers["x-correlation-id"])
}

export const sha256Hex = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex")

/**
 * Every team-application row of a tenant as JSON (the queue items through the outbox's effect ids, since the
 * queue names only the effect), each with the id of the transaction that wrote it (`xmin`).
 */
export const rowsOf = (tenant: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly rows: string }>`
      SELECT json_build_object(
        'applications', (SELECT coalesce(json_agg(json_build_object('row', a, 'xmin', a.xmin::text) ORDER BY a.created_at, a.id), '[]')
                         FROM team_applications a WHERE tenant_id = ${tenant}),
        'commands', (SELECT coalesce(json_agg(json_build_object('row', c, 'xmin', c.xmin::text) ORDER BY c.created_at, c.command_id), '[]')
                     FROM team_application_commands c WHERE tenant_id = ${tenant}),
        'audit', (SELECT coalesce(json_agg(json_build_object('row', a, 'xmin', a.xmin::text) ORDER BY a.audit_id), '[]')
                  FROM team_application_audit a WHERE tenant_id = ${tenant}),
        'outbox', (SELECT coalesce(json_agg(json_build_object('row', o, 'xmin', o.xmin::text) ORDER BY o.created_at, o.application_id, o.audience), '[]')
                   FROM team_application_outbox o WHERE tenant_id = ${tenant}),
        'queue', (SELECT coalesce(json_agg(json_build_object('row', q, 'xmin', q.xmin::text) ORDER BY q.sequence), '[]')
                  FROM effect_queue q JOIN team_application_outbox o ON q.id = o.effect_id::text WHERE o.tenant_id = ${tenant})
      )::text AS rows`.withoutTransform).pipe(Effect.map(([row]) => JSON.parse(row!.rows)))

/** One notification: its outbox row and its queue item (null fields once the clean-up removed the item). */
export interface NotificationRow {
  readonly effect_id: string
  readonly audience: "applicant" | "team"
  readonly envelope: string
  readonly envelope_sha256: string
  readonly failures: number
  readonly last_error: string | null
  readonly outcome: string | null
  readonly outcome_attempt: number | null
  readonly queued: boolean
  readonly queue_name: string | null
  readonly element: string | null
  readonly attempts: number | null
  readonly completed: boolean | null
  readonly exhausted: boolean | null
  readonly last_failure: string | null
  readonly available_at: Date | null
  readonly acquired_by: string | null
  readonly lease_expires_at: Date | null
  readonly ended_at: Date | null
  /** The delivery-state view's state. */
  readonly state: string
  /** The database's clock when read, to compare the queue's times with. */
  readonly now: Date
}

/** Both notifications of an application, applicant first. */
export const notificationsOf = (applicationId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<NotificationRow>`
      SELECT o.effect_id::text AS effect_id, o.audience, o.envelope, o.envelope_sha256, o.failures, o.last_error,
             o.outcome, o.outcome_attempt, q.sequence IS NOT NULL AS queued, q.queue_name, q.element, q.attempts,
             q.completed, q.exhausted, q.last_failure, q.available_at, q.acquired_by::text AS acquired_by,
             q.lease_expires_at, q.ended_at, s.state, now() AS now
      FROM team_application_outbox o
      LEFT JOIN effect_queue q ON q.id = o.effect_id::text
      JOIN team_application_delivery_state s ON s.effect_id = o.effect_id
      WHERE o.application_id = ${applicationId}
      ORDER BY o.audience`.withoutTransform)

/** Polls `read` until `ready` holds (up to ~15 s), then dies naming `what` and the last value read. */
export const waitFor = <A, E, R>(read: Effect.Effect<A, E, R>, ready: (value: A) => boolean, what: string) =>
  Effect.gen(function* () {
    let last: A | undefined
    for (let i = 0; i < 300; i++) {
      last = yield* read
      if (ready(last)) return last
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.dieMessage(`never ${what}: ${JSON.stringify(last)}`)
  })

/** Waits until every notification of the application has an outcome in the outbox. */
export const settled = (applicationId: string) =>
  waitFor(notificationsOf(applicationId), (rows) => rows.length === 2 && rows.every((r) => r.outcome !== null), `settled ${applicationId}`)

/**
 * The suite's tests share one database: a test that starts a worker first ends the queue items earlier tests left
 * waiting on purpose, so that worker's provider calls are this test's alone. Fixture set-up, not an outcome.
 */
export const retireEarlierWork = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`UPDATE effect_queue
      SET completed = true, ended_at = now(), acquired_at = NULL, acquired_by = NULL, lease_expires_at = NULL, updated_at = now()
      WHERE queue_name = ${QUEUE_NAME} AND NOT completed AND NOT exhausted`.withoutTransform)
