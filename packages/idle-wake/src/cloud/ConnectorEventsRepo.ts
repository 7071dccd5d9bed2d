import { claimDue, completionBucket, queueViewQuery, QueueViewRow, storageErrors } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { CloudStorageUnavailable } from "./CloudDomain.ts"

// SQL of the cloud's connector event queue (migration 0023); private to the package. Claim = lease (attempt + 1 in
// the claiming statement, SKIP LOCKED); every outcome is fenced by `attempt = $claimed`.

const storage = (operation: string) => storageErrors(operation, (fault) => new CloudStorageUnavailable(fault))

export const EventRow = Schema.Struct({
  id: Schema.String,
  stack_id: Schema.String,
  connector_instance: Schema.String,
  endpoint_id: Schema.String,
  delivery_id: Schema.String,
  event: Schema.String,
  payload: Schema.Uint8ArrayFromSelf,
  github_signature: Schema.String,
  attempt: Schema.Number,
  failures: Schema.Number
})
export type EventRow = typeof EventRow.Type
const decodeEvents = Schema.decodeUnknown(Schema.Array(EventRow))

/** An event as an operator may see it: its queue state and codes, never its payload or GitHub's signature. */
export const EventSummaryRow = Schema.Struct({
  id: Schema.String,
  stack_id: Schema.String,
  connector_instance: Schema.String,
  endpoint_id: Schema.String,
  delivery_id: Schema.String,
  event: Schema.String,
  state: Schema.Literal("pending", "delivered", "dead"),
  attempt: Schema.Number,
  failures: Schema.Number,
  last_code: Schema.NullOr(Schema.String),
  available_at: Schema.DateFromSelf,
  lease_expires_at: Schema.NullOr(Schema.DateFromSelf),
  received_at: Schema.DateFromSelf,
  settled_at: Schema.NullOr(Schema.DateFromSelf),
  /** `received_at` to the microsecond, as text: a keyset position a JavaScript Date would round. */
  position: Schema.String
})
export type EventSummaryRow = typeof EventSummaryRow.Type

const SUMMARY_COLUMNS = `id::text AS id, stack_id, connector_instance, endpoint_id, delivery_id, event, state, attempt, failures,
  last_code, available_at, lease_expires_at, received_at, settled_at,
  to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS position`

export interface NewEvent {
  readonly stack: string
  readonly connectorInstance: string
  readonly endpoint: string
  readonly deliveryId: string
  readonly event: string
  readonly payload: Uint8Array
  readonly githubSignature: string
}

export class ConnectorEventsRepo extends Effect.Service<ConnectorEventsRepo>()("@delivery/idle-wake/ConnectorEventsRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /**
     * Committed before the broker hears 202: the event for a live stack, once per (stack, GitHub delivery id). Answers
     * the event's id and whether this call queued it; none for an unknown or archived stack.
     */
    const accept = (event: NewEvent) =>
      Effect.map(
        sql<{ id: string; queued: boolean }>`
          WITH stack AS (
            SELECT id FROM idle_wake_cloud_stacks WHERE id = ${event.stack} AND state <> 'archived'
          ), queued AS (
            INSERT INTO idle_wake_cloud_connector_events
              (id, stack_id, connector_instance, endpoint_id, delivery_id, event, payload, github_signature, state,
               available_at, received_at)
            SELECT gen_random_uuid(), stack.id, ${event.connectorInstance}, ${event.endpoint}, ${event.deliveryId},
                   ${event.event}, ${event.payload}, ${event.githubSignature}, 'pending', now(), now()
            FROM stack
            ON CONFLICT (stack_id, delivery_id) DO NOTHING
            RETURNING id::text AS id, true AS queued
          )
          SELECT id, queued FROM queued
          UNION ALL
          SELECT e.id::text, false FROM idle_wake_cloud_connector_events e, stack
          WHERE e.stack_id = stack.id AND e.delivery_id = ${event.deliveryId} AND NOT EXISTS (SELECT 1 FROM queued)`.withoutTransform,
        (rows) => rows[0]
      ).pipe(storage("acceptConnectorEvent"))

    /** Up to `limit` due events (pending, available, lease free or expired), leased for `leaseMs`. */
    const claim = (limit: number, leaseMs: number) =>
      Effect.flatMap(
        sql`${claimDue(sql, {
          table: "idle_wake_cloud_connector_events",
          due: sql`state = 'pending' AND available_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at < now())`,
          orderBy: sql`available_at, received_at`,
          limit,
          lease: sql`lease_expires_at = now() + ${leaseMs} * interval '1 millisecond'`,
          returning: sql`m.id::text AS id, m.stack_id, m.connector_instance, m.endpoint_id, m.delivery_id, m.event, m.payload,
            m.github_signature, m.attempt, m.failures`
        })}
        SELECT * FROM claimed`.withoutTransform,
        decodeEvents
      ).pipe(storage("claimConnectorEvents"))

    /** The current lease's acknowledgement settles the event; a late owner's touches nothing. */
    const settle = (id: string, attempt: number, state: "delivered" | "dead", code: string) =>
      Effect.map(
        sql`
          UPDATE idle_wake_cloud_connector_events
          SET state = ${state}, last_code = ${code}, settled_at = now(), lease_expires_at = NULL
          WHERE id = ${id}::uuid AND attempt = ${attempt} AND state = 'pending'
          RETURNING id`.withoutTransform,
        (rows) => rows.length === 1
      ).pipe(storage("settleConnectorEvent"))

    /** Back to the queue, due again after `delayMs`, with the reason (a failed delivery counted); fenced like every outcome. */
    const release = (id: string, attempt: number, delayMs: number, code: string, failed: boolean) =>
      Effect.map(
        sql`
          UPDATE idle_wake_cloud_connector_events
          SET lease_expires_at = NULL, available_at = now() + ${delayMs} * interval '1 millisecond', last_code = ${code},
              failures = failures + ${failed ? 1 : 0}
          WHERE id = ${id}::uuid AND attempt = ${attempt} AND state = 'pending'
          RETURNING id`.withoutTransform,
        (rows) => rows.length === 1
      ).pipe(storage("releaseConnectorEvent"))

    const summaryColumns = sql.literal(SUMMARY_COLUMNS)

    // The console's list: one stack's events, optionally in one state, oldest first by keyset on (received_at, id)
    // (migration 0028 indexes it): an index walk inside the stack, whatever the other stacks hold.
    const list = SqlSchema.findAll({
      Request: Schema.Struct({
        stack: Schema.String,
        state: Schema.NullOr(Schema.String),
        after: Schema.NullOr(Schema.Struct({ position: Schema.String, id: Schema.String })),
        limit: Schema.Number
      }),
      Result: EventSummaryRow,
      execute: (r) => sql`
        SELECT ${summaryColumns} FROM idle_wake_cloud_connector_events
        WHERE stack_id = ${r.stack}
        ${r.state === null ? sql`` : sql`AND state = ${r.state}`}
        ${r.after === null ? sql`` : sql`AND (received_at, id) > (${r.after.position}::timestamptz, ${r.after.id}::uuid)`}
        ORDER BY received_at, id LIMIT ${r.limit}`.withoutTransform
    })

    const find = SqlSchema.findOne({
      Request: Schema.Struct({ stack: Schema.String, id: Schema.String }),
      Result: EventSummaryRow,
      execute: (r) => sql`
        SELECT ${summaryColumns} FROM idle_wake_cloud_connector_events
        WHERE stack_id = ${r.stack} AND id = ${r.id}::uuid`.withoutTransform
    })

    const page = (request: Parameters<typeof list>[0]) => list(request).pipe(storage("listConnectorEvents"))
    const one = (stack: string, id: string) => find({ stack, id }).pipe(storage("findConnectorEvent"))

    /** Counts by state, and the age of the oldest pending event, for operators. */
    const summary = Effect.map(
      sql<{ state: string; events: number; oldest_seconds: number | null }>`
        SELECT state, count(*)::int AS events,
               floor(extract(epoch FROM now() - min(received_at)))::int AS oldest_seconds
        FROM idle_wake_cloud_connector_events GROUP BY state ORDER BY state`.withoutTransform,
      (rows) => rows.map((row) => ({ state: row.state, events: row.events, oldestSeconds: row.oldest_seconds }))
    ).pipe(storage("summarizeConnectorEvents"))

    // The queue view: counts by state and deliveries per window in one pass, and the oldest event the claim would take
    // now (its own predicate, on idle_wake_cloud_connector_events_due), aged from its availability or its lease's end.
    const readQueueView = SqlSchema.single({
      Request: Schema.Void,
      Result: QueueViewRow,
      execute: () => queueViewQuery(sql, {
        groups: sql`
          SELECT state, ${completionBucket(sql, sql`CASE WHEN state = 'delivered' THEN settled_at END`)} AS bucket,
                 count(*)::int AS count
          FROM idle_wake_cloud_connector_events GROUP BY 1, 2`,
        dueSince: sql`
          SELECT min(greatest(available_at, lease_expires_at)) FROM idle_wake_cloud_connector_events
          WHERE state = 'pending' AND available_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at < now())`
      }).withoutTransform
    })
    const queueView = readQueueView(undefined).pipe(Effect.catchTag("NoSuchElementException", Effect.die), storage("eventsQueueView"))

    return { accept, claim, settle, release, summary, page, one, queueView } as const
  })
}) {}
