import type { CorrelationId } from "@delivery/core"
import { completionBucket, encodeKeyset, isKeysetTime, queueSnapshotOf, type QueueView, queueViewQuery, QueueViewRow, readKeyset, storageErrors } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Duration, Effect, Either, Option, Redacted, Schema } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"
import { ConnectorEventDelivery, type ConnectorEventReceipt } from "./ConnectorEventProtocol.ts"
import {
  ConnectorEventRefused,
  ConnectorEventUnauthenticated,
  IdleWakeStorageUnavailable,
  IdleWakeUnavailable,
  RECORDED_EVENT_PAGE_LIMIT,
  RecordedConnectorEvent,
  RecordedEventCursorInvalid,
  RecordedEventPage,
  TenantDraining
} from "./Domain.ts"
import { DrainGate } from "./DrainGate.ts"
import { IdleWakeSettingsTag } from "./IdleWakeConfig.ts"
import { verifyObject } from "./Protocol.ts"

// github-broker-events-v1, the tenant's side of delivery (spec 001): "Original GitHub signature verification and
// current endpoint/connection authorization still run on delivery. Duplicate transport delivery uses the domain's
// existing receipts/atomic claims." In order: the cloud's signature, this stack and audience, GitHub's
// X-Hub-Signature-256 over the payload, the idle hold (a draining stack takes no new work), then in one transaction
// the endpoint's current authorization and the receipt (one row per event id and per GitHub delivery id). The
// answer, recorded or duplicate, acknowledges the cloud's current event lease.

const decodeDelivery = Schema.decodeUnknownEither(ConnectorEventDelivery)
const storage = storageErrors("recordConnectorEvent", (fault) => new IdleWakeStorageUnavailable(fault))

/** Constant-time comparison of GitHub's `sha256=<hex>` with the HMAC of the payload under the webhook secret. */
export const githubSignatureValid = (secret: string, payload: Uint8Array, header: string): boolean => {
  const expected = Buffer.from(`sha256=${createHmac("sha256", secret).update(payload).digest("hex")}`)
  const given = Buffer.from(header)
  return expected.length === given.length && timingSafeEqual(expected, given)
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** A receipt as the console reads it: everything but the payload, with its keyset position. */
const RecordedRow = Schema.Struct({
  event_id: Schema.String,
  delivery_id: Schema.String,
  connector_instance: Schema.String,
  endpoint_id: Schema.String,
  event: Schema.String,
  cloud_attempt: Schema.Number,
  received_at: Schema.DateFromSelf,
  position: Schema.String
})
type RecordedRow = typeof RecordedRow.Type

const recordedColumns = `event_id::text AS event_id, delivery_id, connector_instance, endpoint_id, event, cloud_attempt, received_at,
  to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS position`

const toRecorded = (row: RecordedRow) =>
  new RecordedConnectorEvent({
    eventId: row.event_id,
    deliveryId: row.delivery_id,
    connectorInstance: row.connector_instance,
    endpoint: row.endpoint_id,
    event: row.event,
    cloudAttempt: row.cloud_attempt,
    receivedAt: row.received_at
  })

// Cursor: base64url of "<received_at to the microsecond, UTC>|<event id>", the last event of a page. received_at is the
// database's now(), with microseconds: a millisecond form would skip or repeat events received within one millisecond.
const encodeCursor = (row: RecordedRow) => encodeKeyset(row.position, row.event_id)

const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)\|([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/

const decodeCursor = (cursor: string) => {
  const match = readKeyset(cursor, CURSOR)
  return match === null || !isKeysetTime(match[1]!)
    ? Effect.fail(new RecordedEventCursorInvalid({ reason: "cursor-invalid" }))
    : Effect.succeed({ at: match[1]!, id: match[2]! })
}

export class ConnectorEventInbox extends Effect.Service<ConnectorEventInbox>()("@delivery/idle-wake/ConnectorEventInbox", {
  effect: Effect.gen(function* () {
    const settings = yield* IdleWakeSettingsTag
    const gate = yield* DrainGate
    const sql = yield* SqlClient.SqlClient

    const unauthenticated = (reason: ConnectorEventUnauthenticated["reason"], correlationId: CorrelationId) =>
      Effect.fail(new ConnectorEventUnauthenticated({ reason, correlationId }))
    const refused = (reason: ConnectorEventRefused["reason"], correlationId: CorrelationId) =>
      Effect.fail(new ConnectorEventRefused({ reason, correlationId }))

    /** The endpoint is current: not archived, its connection not removed, bound to the enrolled instance named. */
    const authorized = (delivery: ConnectorEventDelivery) =>
      Effect.map(
        sql`
          SELECT 1 FROM idle_wake_github_endpoints e
          JOIN idle_wake_connector_instances i ON i.id = e.connector_instance_id AND i.state = 'enrolled'
          JOIN idle_wake_github_connections c ON c.id = e.connection_id AND c.removed_at IS NULL AND c.kind = 'broker'
          WHERE e.id = ${delivery.endpoint} AND e.archived_at IS NULL AND e.connector_instance_id = ${delivery.connectorInstance}`.withoutTransform,
        (rows) => rows.length === 1
      )

    const receive = Effect.fn("ConnectorEventInbox.receive")(function* (body: unknown, correlationId: CorrelationId) {
      const tenant = yield* Option.match(settings.tenant, {
        onNone: () => Effect.fail(new IdleWakeUnavailable({ reason: "idle-wake-unconfigured", correlationId })),
        onSome: Effect.succeed
      })
      const decoded = decodeDelivery(body)
      if (Either.isLeft(decoded)) return yield* refused("event-malformed", correlationId)
      const delivery = decoded.right
      const key = tenant.cloudKeys.get(delivery.keyId)
      if (key === undefined) return yield* unauthenticated("event-key-unknown", correlationId)
      if (!verifyObject(body as ConnectorEventDelivery, key)) return yield* unauthenticated("event-signature-invalid", correlationId)
      if (delivery.stack !== tenant.stack) return yield* unauthenticated("event-wrong-stack", correlationId)
      if (delivery.audience !== tenant.audience) return yield* unauthenticated("event-wrong-audience", correlationId)
      if (Option.isNone(tenant.githubWebhookSecret)) {
        return yield* Effect.fail(new IdleWakeUnavailable({ reason: "github-secret-unset", correlationId }))
      }
      const payload = Buffer.from(delivery.payload, "base64url")
      if (!githubSignatureValid(Redacted.value(tenant.githubWebhookSecret.value), payload, delivery.githubSignature)) {
        return yield* refused("github-signature-invalid", correlationId)
      }
      const hold = yield* gate.current
      if (Option.isSome(hold)) {
        const retryAfter = Math.max(1, Math.ceil(Duration.toMillis(hold.value.remaining) / 1000))
        return yield* Effect.fail(new TenantDraining({ reason: "tenant-draining", correlationId, retryAfter }))
      }
      const outcome = yield* sql.withTransaction(Effect.gen(function* () {
        if (!(yield* authorized(delivery))) return "unauthorized" as const
        const inserted = yield* sql`
          INSERT INTO idle_wake_connector_events
            (event_id, delivery_id, connector_instance, endpoint_id, event, payload, cloud_attempt, received_at)
          VALUES (${delivery.eventId}, ${delivery.deliveryId}, ${delivery.connectorInstance}, ${delivery.endpoint},
                  ${delivery.event}, ${payload}, ${delivery.attempt}, now())
          ON CONFLICT DO NOTHING
          RETURNING 1 AS recorded`.withoutTransform
        return inserted.length === 1 ? "recorded" as const : "duplicate" as const
      })).pipe(storage, Effect.catchTag("IdleWakeStorageUnavailable", () =>
        Effect.fail(new IdleWakeUnavailable({ reason: "storage-unavailable", correlationId }))))
      if (outcome === "unauthorized") return yield* refused("event-endpoint-unauthorized", correlationId)
      return { outcome, eventId: delivery.eventId } satisfies ConnectorEventReceipt
    })

    const readQueueView = SqlSchema.single({
      Request: Schema.Void,
      Result: QueueViewRow,
      execute: () => queueViewQuery(sql, {
        groups: sql`
          SELECT 'recorded' AS state, ${completionBucket(sql, sql`received_at`)} AS bucket, count(*)::int AS count
          FROM idle_wake_connector_events GROUP BY 2`,
        dueSince: sql`SELECT NULL::timestamptz`
      }).withoutTransform
    })

    /**
     * The stack's connector events (core's QueueView). The tenant keeps a receipt per event and nothing waits after it:
     * an event is final once recorded (its undelivered ones wait in the cloud's queue, the cloud role's view). So one
     * state, recorded; nothing is ever due; completed: events recorded, by their receipt time (duplicates are not).
     */
    const queueView: QueueView = {
      family: "connector-events",
      title: "Connector events",
      snapshot: readQueueView(undefined).pipe(
        Effect.catchTag("NoSuchElementException", Effect.die),
        storageErrors("connectorEventsQueueView", (fault) => new IdleWakeStorageUnavailable(fault)),
        Effect.map(queueSnapshotOf("connector-events", ["recorded"])),
        Effect.withSpan("ConnectorEventInbox.queueView")
      )
    }

    // The console's list: newest first by keyset on (received_at, event_id), optionally one connector instance's and one
    // GitHub event name's (idle_wake_connector_events_received, _connector). Never the payload.
    const listRecorded = SqlSchema.findAll({
      Request: Schema.Struct({
        connector: Schema.NullOr(Schema.String),
        event: Schema.NullOr(Schema.String),
        before: Schema.NullOr(Schema.Struct({ at: Schema.String, id: Schema.String })),
        limit: Schema.Number
      }),
      Result: RecordedRow,
      execute: (r) => sql`
        SELECT ${sql.literal(recordedColumns)} FROM idle_wake_connector_events
        WHERE true
          ${r.connector === null ? sql`` : sql`AND connector_instance = ${r.connector}`}
          ${r.event === null ? sql`` : sql`AND event = ${r.event}`}
          ${r.before === null ? sql`` : sql`AND (received_at, event_id) < (${r.before.at}::timestamptz, ${r.before.id}::uuid)`}
        ORDER BY received_at DESC, event_id DESC LIMIT ${r.limit}`.withoutTransform
    })

    const findRecorded = SqlSchema.findOne({
      Request: Schema.String,
      Result: RecordedRow,
      execute: (id) => sql`SELECT ${sql.literal(recordedColumns)} FROM idle_wake_connector_events WHERE event_id = ${id}::uuid`.withoutTransform
    })

    const readStorage = (operation: string) => storageErrors(operation, (fault) => new IdleWakeStorageUnavailable(fault))

    /**
     * One page of the events this stack recorded, optionally of one connector instance and one GitHub event name,
     * newest first (the console's list). Sizes are clamped to 1..100.
     */
    const recordedEvents = Effect.fn("ConnectorEventInbox.recordedEvents")(function* (options: {
      readonly connector?: string | undefined
      readonly event?: string | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
    } = {}) {
      const size = Math.min(Math.max(Math.floor(options.limit ?? RECORDED_EVENT_PAGE_LIMIT), 1), RECORDED_EVENT_PAGE_LIMIT)
      const before = options.cursor === undefined ? null : yield* decodeCursor(options.cursor)
      const rows = yield* listRecorded({ connector: options.connector ?? null, event: options.event ?? null, before, limit: size + 1 }).pipe(
        readStorage("recordedEvents")
      )
      const page = rows.slice(0, size)
      const last = page[page.length - 1]
      return new RecordedEventPage({
        items: page.map(toRecorded),
        nextCursor: rows.length > size && last !== undefined ? encodeCursor(last) : null
      })
    })

    /** One recorded event by its (the cloud's) event id; none for an id that is not one. */
    const recordedEvent = Effect.fn("ConnectorEventInbox.recordedEvent")(function* (eventId: string) {
      if (!UUID.test(eventId)) return Option.none<RecordedConnectorEvent>()
      return Option.map(yield* findRecorded(eventId).pipe(readStorage("recordedEvent")), toRecorded)
    })

    return { receive, queueView, recordedEvents, recordedEvent } as const
  })
}) {}
