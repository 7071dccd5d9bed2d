import { storageErrors } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import type { ConnectorSnapshot } from "./ConnectorBindings.ts"
import { IdleWakeStorageUnavailable } from "./Domain.ts"
import { MAX_BINDINGS } from "./Protocol.ts"

// SQL of the GitHub connector state (migration 0021); private to the package. Rows decode from their snake_case
// columns into the camelCase rows of ConnectorBindings.ts. bigint columns are read as text: a GitHub id can exceed
// what a JavaScript number holds exactly.

const storage = (operation: string) => storageErrors(operation, (fault) => new IdleWakeStorageUnavailable(fault))

/** One more row than may be proven per table, so an overflow is seen rather than cut off. */
export const SNAPSHOT_READ_LIMIT = MAX_BINDINGS + 1

const Timestamp = Schema.DateFromSelf
const NullableTimestamp = Schema.NullOr(Schema.DateFromSelf)

export const InstanceRecord = Schema.Struct({
  id: Schema.String,
  generation: Schema.Number,
  state: Schema.String,
  enrolled_at: Timestamp,
  retired_at: NullableTimestamp
}).pipe(Schema.rename({ enrolled_at: "enrolledAt", retired_at: "retiredAt" }))

export const ConnectionRecord = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  kind: Schema.String,
  owner: Schema.String,
  removed_at: NullableTimestamp,
  created_at: Timestamp
}).pipe(Schema.rename({ tenant_id: "tenantId", removed_at: "removedAt", created_at: "createdAt" }))

export const RegistrationRecord = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  connection_id: Schema.String,
  owner: Schema.String,
  app_id: Schema.String,
  installation_id: Schema.NullOr(Schema.String),
  state: Schema.String,
  completed_at: NullableTimestamp,
  created_at: Timestamp
}).pipe(Schema.rename({
  tenant_id: "tenantId",
  connection_id: "connectionId",
  app_id: "appId",
  installation_id: "installationId",
  completed_at: "completedAt",
  created_at: "createdAt"
}))

export const ChannelRecord = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  transport: Schema.String,
  endpoint_id: Schema.NullOr(Schema.String),
  enabled: Schema.Boolean,
  credential_ref: Schema.NullOr(Schema.String),
  archived_at: NullableTimestamp,
  created_at: Timestamp
}).pipe(Schema.rename({
  tenant_id: "tenantId",
  endpoint_id: "endpointId",
  credential_ref: "credentialRef",
  archived_at: "archivedAt",
  created_at: "createdAt"
}))

export const EndpointRecord = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  transport: Schema.String,
  connector_instance_id: Schema.String,
  connection_id: Schema.String,
  registration_id: Schema.NullOr(Schema.String),
  channel_connection_id: Schema.String,
  generation: Schema.Number,
  credential_ref: Schema.NullOr(Schema.String),
  archived_at: NullableTimestamp,
  archived_generation: Schema.NullOr(Schema.Number),
  created_at: Timestamp
}).pipe(Schema.rename({
  tenant_id: "tenantId",
  connector_instance_id: "connectorInstanceId",
  connection_id: "connectionId",
  registration_id: "registrationId",
  channel_connection_id: "channelConnectionId",
  credential_ref: "credentialRef",
  archived_at: "archivedAt",
  archived_generation: "archivedGeneration",
  created_at: "createdAt"
}))

export const LeaseRecord = Schema.Struct({
  endpoint_id: Schema.String,
  holder: Schema.String,
  acquired_at: Timestamp,
  expires_at: Timestamp,
  released_at: NullableTimestamp
}).pipe(Schema.rename({ endpoint_id: "endpointId", acquired_at: "acquiredAt", expires_at: "expiresAt", released_at: "releasedAt" }))

export const ConnectorCounts = Schema.Struct({
  instances: Schema.Number,
  connections: Schema.Number,
  registrations: Schema.Number,
  channels: Schema.Number,
  endpoints: Schema.Number,
  leases: Schema.Number,
  audit: Schema.Number
})
export type ConnectorCounts = typeof ConnectorCounts.Type

export const AuditAction = Schema.Literal(
  "instance-enrolled",
  "instance-retired",
  "connection-added",
  "connection-removed",
  "registration-started",
  "registration-completed",
  "endpoint-added",
  "endpoint-removed",
  "lease-acquired",
  "lease-renewed",
  "lease-released"
)
export type AuditAction = typeof AuditAction.Type

export interface AuditEntry {
  readonly action: AuditAction
  readonly subject: string
  readonly actor: string
  readonly correlationId: string
  readonly at: Date
}

const INSTANCE = "id, generation, state, enrolled_at, retired_at"
const CONNECTION = "id, tenant_id, kind, owner, removed_at, created_at"
const REGISTRATION =
  "id, tenant_id, connection_id, owner, app_id::text AS app_id, installation_id::text AS installation_id, state, completed_at, created_at"
const CHANNEL = "id, tenant_id, transport, endpoint_id, enabled, credential_ref, archived_at, created_at"
const ENDPOINT =
  "id, tenant_id, transport, connector_instance_id, connection_id, registration_id, channel_connection_id, generation, credential_ref, archived_at, archived_generation, created_at"
const LEASE = "endpoint_id, holder, acquired_at, expires_at, released_at"

export class ConnectorsRepo extends Effect.Service<ConnectorsRepo>()("@delivery/idle-wake/ConnectorsRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.literal

    // --- The snapshot: plain reads, run inside the caller's REPEATABLE READ, READ ONLY transaction. -----------------

    const enrolled = SqlSchema.findOne({
      Request: Schema.Void,
      Result: InstanceRecord,
      execute: () => sql`SELECT ${columns(INSTANCE)} FROM idle_wake_connector_instances WHERE state = 'enrolled'`.withoutTransform
    })

    const readAll = <A, I>(Result: Schema.Schema<A, I>, table: string, list: string, where: string, order: string) =>
      SqlSchema.findAll({
        Request: Schema.Void,
        Result,
        execute: () =>
          sql`SELECT ${columns(list)} FROM ${sql(table)} ${columns(where)} ORDER BY ${columns(order)}
              LIMIT ${SNAPSHOT_READ_LIMIT}`.withoutTransform
      })(undefined)

    const snapshot = Effect.gen(function* () {
      const instance = yield* enrolled(undefined)
      const connections = yield* readAll(ConnectionRecord, "idle_wake_github_connections", CONNECTION, "", "id")
      const registrations = yield* readAll(RegistrationRecord, "idle_wake_github_bot_registrations", REGISTRATION, "", "id")
      const endpoints = yield* readAll(EndpointRecord, "idle_wake_github_endpoints", ENDPOINT, "", "id")
      const channels = yield* readAll(ChannelRecord, "idle_wake_channel_connections", CHANNEL, "", "id")
      const leases = yield* readAll(LeaseRecord, "idle_wake_endpoint_leases", LEASE, "WHERE released_at IS NULL", "endpoint_id, holder, acquired_at")
      const truncated = [connections, registrations, endpoints, channels, leases].some((rows) => rows.length >= SNAPSHOT_READ_LIMIT)
      return {
        instance: instance._tag === "Some" ? { id: instance.value.id, generation: instance.value.generation } : null,
        connections,
        registrations,
        endpoints,
        channels,
        leases,
        truncated
      } satisfies ConnectorSnapshot
    })

    // --- Writers' statements: each runs inside a writer's transaction, after `lock`. ------------------------------

    // Every writer checks rows another writer may be changing (a connection removed while an endpoint is added to it,
    // two enrollments at once); they are rare operator actions, so one transaction-scoped lock serializes them all.
    // The drain's snapshot takes no lock and never waits for it.
    const lock = sql`SELECT pg_advisory_xact_lock(hashtextextended('idle-wake/connectors', 0))`.withoutTransform

    const byId = <A, I>(Result: Schema.Schema<A, I>, table: string, list: string) =>
      SqlSchema.findOne({
        Request: Schema.String,
        Result,
        execute: (id) => sql`SELECT ${columns(list)} FROM ${sql(table)} WHERE id = ${id}`.withoutTransform
      })

    /** A statement that returns exactly one row (an INSERT or a keyed UPDATE ... RETURNING). */
    const one = <A, I, E>(Result: Schema.Schema<A, I>, statement: () => Effect.Effect<ReadonlyArray<unknown>, E>) =>
      SqlSchema.single({ Request: Schema.Void, Result, execute: statement })(undefined).pipe(
        Effect.catchTag("NoSuchElementException", () => Effect.dieMessage("a keyed write returned no row"))
      )

    const counts = one(ConnectorCounts, () => sql`
      SELECT (SELECT count(*) FROM idle_wake_connector_instances)::int AS instances,
             (SELECT count(*) FROM idle_wake_github_connections)::int AS connections,
             (SELECT count(*) FROM idle_wake_github_bot_registrations)::int AS registrations,
             (SELECT count(*) FROM idle_wake_channel_connections)::int AS channels,
             (SELECT count(*) FROM idle_wake_github_endpoints)::int AS endpoints,
             (SELECT count(*) FROM idle_wake_endpoint_leases)::int AS leases,
             (SELECT count(*) FROM idle_wake_connector_audit)::int AS audit`.withoutTransform)

    const instanceById = byId(InstanceRecord, "idle_wake_connector_instances", INSTANCE)
    const connectionById = byId(ConnectionRecord, "idle_wake_github_connections", CONNECTION)
    const registrationById = byId(RegistrationRecord, "idle_wake_github_bot_registrations", REGISTRATION)
    const endpointById = byId(EndpointRecord, "idle_wake_github_endpoints", ENDPOINT)
    const channelById = byId(ChannelRecord, "idle_wake_channel_connections", CHANNEL)

    const retireEnrolled = (at: Date) =>
      SqlSchema.findAll({
        Request: Schema.Void,
        Result: InstanceRecord,
        execute: () => sql`UPDATE idle_wake_connector_instances SET state = 'retired', retired_at = ${at}
                           WHERE state = 'enrolled' RETURNING ${columns(INSTANCE)}`.withoutTransform
      })(undefined)

    // Generations only grow, across instances: a newly enrolled instance never repeats a generation a proof named.
    const insertInstance = (r: { readonly id: string; readonly at: Date }) =>
      one(InstanceRecord, () => sql`
        INSERT INTO idle_wake_connector_instances (id, generation, state, enrolled_at)
        SELECT ${r.id}, COALESCE(max(generation), 0) + 1, 'enrolled', ${r.at} FROM idle_wake_connector_instances
        RETURNING ${columns(INSTANCE)}`.withoutTransform)

    const insertConnection = (r: { readonly id: string; readonly tenant: string; readonly kind: string; readonly owner: string; readonly at: Date }) =>
      one(ConnectionRecord, () => sql`
        INSERT INTO idle_wake_github_connections (id, tenant_id, kind, owner, created_at)
        VALUES (${r.id}, ${r.tenant}, ${r.kind}, ${r.owner}, ${r.at})
        RETURNING ${columns(CONNECTION)}`.withoutTransform)

    const removeConnection = (r: { readonly id: string; readonly at: Date }) =>
      one(ConnectionRecord, () => sql`
        UPDATE idle_wake_github_connections SET removed_at = ${r.at} WHERE id = ${r.id}
        RETURNING ${columns(CONNECTION)}`.withoutTransform)

    const currentEndpointsOf = (connection: string) =>
      Effect.map(
        sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM idle_wake_github_endpoints
                                    WHERE connection_id = ${connection} AND archived_at IS NULL`.withoutTransform,
        (rows) => rows[0]?.n ?? 0
      )

    const insertRegistration = (r: {
      readonly id: string
      readonly tenant: string
      readonly connection: string
      readonly owner: string
      readonly appId: number
      readonly at: Date
    }) =>
      one(RegistrationRecord, () => sql`
        INSERT INTO idle_wake_github_bot_registrations (id, tenant_id, connection_id, owner, app_id, state, created_at)
        VALUES (${r.id}, ${r.tenant}, ${r.connection}, ${r.owner}, ${r.appId}, 'pending', ${r.at})
        RETURNING ${columns(REGISTRATION)}`.withoutTransform)

    const completeRegistration = (r: { readonly id: string; readonly installationId: number; readonly at: Date }) =>
      one(RegistrationRecord, () => sql`
        UPDATE idle_wake_github_bot_registrations
        SET state = 'completed', installation_id = ${r.installationId}, completed_at = ${r.at}
        WHERE id = ${r.id} RETURNING ${columns(REGISTRATION)}`.withoutTransform)

    const insertEndpoint = (r: {
      readonly id: string
      readonly tenant: string
      readonly instance: string
      readonly connection: string
      readonly registration: string
      readonly channel: string
      readonly credentialRef: string
      readonly at: Date
    }) =>
      one(EndpointRecord, () => sql`
        INSERT INTO idle_wake_github_endpoints (id, tenant_id, transport, connector_instance_id, connection_id, registration_id,
                                                channel_connection_id, generation, credential_ref, created_at)
        VALUES (${r.id}, ${r.tenant}, 'github', ${r.instance}, ${r.connection}, ${r.registration}, ${r.channel}, 1,
                ${r.credentialRef}, ${r.at})
        RETURNING ${columns(ENDPOINT)}`.withoutTransform)

    const insertChannel = (r: { readonly id: string; readonly tenant: string; readonly endpoint: string; readonly credentialRef: string; readonly at: Date }) =>
      one(ChannelRecord, () => sql`
        INSERT INTO idle_wake_channel_connections (id, tenant_id, transport, endpoint_id, enabled, credential_ref, created_at)
        VALUES (${r.id}, ${r.tenant}, 'github', ${r.endpoint}, true, ${r.credentialRef}, ${r.at})
        RETURNING ${columns(CHANNEL)}`.withoutTransform)

    const archiveEndpoint = (r: { readonly id: string; readonly at: Date }) =>
      one(EndpointRecord, () => sql`
        UPDATE idle_wake_github_endpoints
        SET archived_at = ${r.at}, archived_generation = generation, credential_ref = NULL
        WHERE id = ${r.id} RETURNING ${columns(ENDPOINT)}`.withoutTransform)

    // Only the same-tenant channel: another tenant's row of that id is not this endpoint's to archive.
    const archiveChannel = (r: { readonly id: string; readonly tenant: string; readonly at: Date }) =>
      SqlSchema.findAll({
        Request: Schema.Void,
        Result: ChannelRecord,
        execute: () => sql`
          UPDATE idle_wake_channel_connections
          SET archived_at = COALESCE(archived_at, ${r.at}), enabled = false, credential_ref = NULL
          WHERE id = ${r.id} AND tenant_id = ${r.tenant} RETURNING ${columns(CHANNEL)}`.withoutTransform
      })(undefined)

    const unreleasedLeases = (endpoint: string) =>
      SqlSchema.findAll({
        Request: Schema.Void,
        Result: LeaseRecord,
        execute: () => sql`SELECT ${columns(LEASE)} FROM idle_wake_endpoint_leases
                           WHERE endpoint_id = ${endpoint} AND released_at IS NULL
                           ORDER BY acquired_at`.withoutTransform
      })(undefined)

    const insertLease = (r: { readonly endpoint: string; readonly holder: string; readonly at: Date; readonly expiresAt: Date }) =>
      one(LeaseRecord, () => sql`
        INSERT INTO idle_wake_endpoint_leases (endpoint_id, holder, acquired_at, expires_at)
        VALUES (${r.endpoint}, ${r.holder}, ${r.at}, ${r.expiresAt})
        RETURNING ${columns(LEASE)}`.withoutTransform)

    const renewLease = (r: { readonly endpoint: string; readonly holder: string; readonly acquiredAt: Date; readonly expiresAt: Date }) =>
      one(LeaseRecord, () => sql`
        UPDATE idle_wake_endpoint_leases SET expires_at = ${r.expiresAt}
        WHERE endpoint_id = ${r.endpoint} AND holder = ${r.holder} AND acquired_at = ${r.acquiredAt} AND released_at IS NULL
        RETURNING ${columns(LEASE)}`.withoutTransform)

    /** Releases the endpoint's unreleased leases (of one holder when given), expired or not. */
    const releaseLeases = (r: { readonly endpoint: string; readonly holder?: string; readonly at: Date }) =>
      SqlSchema.findAll({
        Request: Schema.Void,
        Result: LeaseRecord,
        execute: () => sql`
          UPDATE idle_wake_endpoint_leases SET released_at = ${r.at}
          WHERE endpoint_id = ${r.endpoint} AND released_at IS NULL
            ${r.holder === undefined ? columns("") : sql`AND holder = ${r.holder}`}
          RETURNING ${columns(LEASE)}`.withoutTransform
      })(undefined)

    const insertAudit = (r: AuditEntry) =>
      sql`INSERT INTO idle_wake_connector_audit (action, subject, actor, correlation_id, at)
          VALUES (${r.action}, ${r.subject}, ${r.actor}, ${r.correlationId}, ${r.at})`.withoutTransform

    // REPEATABLE READ must be set before the transaction's first query: every count and row comes from one snapshot.
    const readOnly = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      sql.withTransaction(
        Effect.zipRight(sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`.withoutTransform, effect)
      )

    return {
      /** No transaction of its own: run it inside the caller's read-only snapshot. */
      snapshot: snapshot.pipe(storage("snapshot")),
      counts: counts.pipe(storage("counts")),
      lock: Effect.asVoid(lock).pipe(storage("lock")),
      instanceById: (id: string) => instanceById(id).pipe(storage("instanceById")),
      retireEnrolled: (at: Date) => retireEnrolled(at).pipe(storage("retireEnrolled")),
      insertInstance: (r: Parameters<typeof insertInstance>[0]) => insertInstance(r).pipe(storage("insertInstance")),
      enrolledInstance: enrolled(undefined).pipe(storage("enrolledInstance")),
      connectionById: (id: string) => connectionById(id).pipe(storage("connectionById")),
      insertConnection: (r: Parameters<typeof insertConnection>[0]) => insertConnection(r).pipe(storage("insertConnection")),
      removeConnection: (r: Parameters<typeof removeConnection>[0]) => removeConnection(r).pipe(storage("removeConnection")),
      currentEndpointsOf: (connection: string) => currentEndpointsOf(connection).pipe(storage("currentEndpointsOf")),
      registrationById: (id: string) => registrationById(id).pipe(storage("registrationById")),
      insertRegistration: (r: Parameters<typeof insertRegistration>[0]) => insertRegistration(r).pipe(storage("insertRegistration")),
      completeRegistration: (r: Parameters<typeof completeRegistration>[0]) =>
        completeRegistration(r).pipe(storage("completeRegistration")),
      endpointById: (id: string) => endpointById(id).pipe(storage("endpointById")),
      channelById: (id: string) => channelById(id).pipe(storage("channelById")),
      insertEndpoint: (r: Parameters<typeof insertEndpoint>[0]) => insertEndpoint(r).pipe(storage("insertEndpoint")),
      insertChannel: (r: Parameters<typeof insertChannel>[0]) => insertChannel(r).pipe(storage("insertChannel")),
      archiveEndpoint: (r: Parameters<typeof archiveEndpoint>[0]) => archiveEndpoint(r).pipe(storage("archiveEndpoint")),
      archiveChannel: (r: Parameters<typeof archiveChannel>[0]) => archiveChannel(r).pipe(storage("archiveChannel")),
      unreleasedLeases: (endpoint: string) => unreleasedLeases(endpoint).pipe(storage("unreleasedLeases")),
      insertLease: (r: Parameters<typeof insertLease>[0]) => insertLease(r).pipe(storage("insertLease")),
      renewLease: (r: Parameters<typeof renewLease>[0]) => renewLease(r).pipe(storage("renewLease")),
      releaseLeases: (r: Parameters<typeof releaseLeases>[0]) => releaseLeases(r).pipe(storage("releaseLeases")),
      insertAudit: (r: AuditEntry) => Effect.asVoid(insertAudit(r)).pipe(storage("insertAudit")),
      transaction: <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) => sql.withTransaction(effect).pipe(storage(operation)),
      readOnly: <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) => readOnly(effect).pipe(storage(operation))
    } as const
  })
}) {}
