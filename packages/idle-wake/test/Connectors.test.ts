import { HttpApi, HttpApiBuilder, HttpBody, HttpClient, type HttpClientResponse } from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { makeCorrelationId } from "@delivery/core"
import { AccountId, OperatorAuthenticationLive, TenantId } from "@delivery/identity"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { assessBroker } from "../src/ConnectorBindings.ts"
import { type ConnectorActor, Connectors } from "../src/Connectors.ts"
import { IdleWakeConnectorsApi } from "../src/ConnectorsApi.ts"
import { IdleWakeConnectorsHttpLive } from "../src/ConnectorsHttp.ts"
import { ConnectorId } from "../src/Domain.ts"
import { bindingsFingerprint } from "../src/Fingerprint.ts"
import { MAX_BINDINGS } from "../src/Protocol.ts"

// Spec 001, github-broker-events-v1, on real PostgreSQL: the connector writers (one transaction per change with its
// audit row), the snapshot the drain reads in its REPEATABLE READ, READ ONLY transaction, and what assessBroker
// makes of the state the writers leave. Each `layer` block has a database of its own; within a block every test
// uses ids of its own. Direct SQL writes only make state the writers never produce (partial removals, legacy rows).

const SuiteLayer = Connectors.Default.pipe(Layer.provideMerge(TestDatabaseLive))
// Each call of `layer(...)` builds its own layer, so each block gets a database of its own.
const fresh = () => layer(SuiteLayer, { excludeTestServices: true })
const suite = (name: string, body: Parameters<ReturnType<typeof fresh>>[1]) => fresh()(name, body)

const uid = (label: string) => ConnectorId.make(`${label}-${randomBytes(4).toString("hex")}`)
const by = (): ConnectorActor => ({ actor: "operator:environment", correlationId: makeCorrelationId() })
const tenant = TenantId.make("acme")
const owner = AccountId.make("acct-1")

const auditOf = (actor: ConnectorActor) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly action: string; readonly subject: string; readonly actor: string }>`
      SELECT action, subject, actor FROM idle_wake_connector_audit WHERE correlation_id = ${actor.correlationId}
      ORDER BY audit_id`.withoutTransform).pipe(Effect.map((rows) => rows.map((row) => [row.action, row.subject, row.actor])))

/** The snapshot as the drain reads it: inside a REPEATABLE READ, READ ONLY transaction of the caller's. */
const drainSnapshot = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const connectors = yield* Connectors
  return yield* sql.withTransaction(
    Effect.zipRight(sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`.withoutTransform, connectors.snapshot)
  )
})

const assessNow = (configured = false) => Effect.map(drainSnapshot, (snapshot) => assessBroker(snapshot, { configured, now: new Date() }))

/** An enrolled instance is assumed; a broker connection, its completed registration and one endpoint through the writers. */
const bindOne = Effect.gen(function* () {
  const connectors = yield* Connectors
  const ids = { connection: uid("conn"), registration: uid("reg"), endpoint: uid("ep"), channel: uid("ch") }
  yield* connectors.addConnection({ id: ids.connection, tenant, kind: "broker", owner }, by())
  yield* connectors.startBotRegistration({ id: ids.registration, connection: ids.connection, appId: 101 }, by())
  yield* connectors.completeBotRegistration({ id: ids.registration, installationId: 202 }, by())
  yield* connectors.addEndpoint({ id: ids.endpoint, channel: ids.channel, connection: ids.connection, registration: ids.registration }, by())
  return ids
})

const rowsOf = (table: string, id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<Record<string, unknown>>`SELECT * FROM ${sql(table)} WHERE id = ${id}`.withoutTransform)

suite("connector writers (spec 001, github-broker-events-v1, real PostgreSQL)", (it) => {
  it.effect("'the current enrolled connector instance': enrolling retires the enrolled one, both audited in the enrollment's transaction; the enrolled id again is unchanged; a retired id cannot come back", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      const sql = yield* SqlClient.SqlClient
      const [a, b] = [uid("inst"), uid("inst")]
      const byA = by()
      const first = yield* connectors.enrollInstance(a, byA)
      expect(first).toMatchObject({ outcome: "enrolled", instance: { id: a, state: "enrolled", retiredAt: null } })
      expect(yield* auditOf(byA)).toContainEqual(["instance-enrolled", a, "operator:environment"])

      const byAgain = by()
      expect(yield* connectors.enrollInstance(a, byAgain)).toMatchObject({ outcome: "unchanged", instance: { id: a }, retired: [] })
      expect(yield* auditOf(byAgain)).toEqual([])

      const byB = by()
      const second = yield* connectors.enrollInstance(b, byB)
      expect(second.outcome).toBe("enrolled")
      expect(second.retired.map((instance) => [instance.id, instance.state])).toEqual([[a, "retired"]])
      // Generations only grow: a proof naming the old instance's generation can never match the new one.
      expect(second.instance.generation).toBeGreaterThan(first.instance.generation)
      expect(yield* auditOf(byB)).toEqual([
        ["instance-retired", a, "operator:environment"],
        ["instance-enrolled", b, "operator:environment"]
      ])

      const byBack = by()
      const refused = yield* Effect.flip(connectors.enrollInstance(a, byBack))
      expect(refused).toMatchObject({ _tag: "ConnectorConflict", reason: "instance-retired", correlationId: byBack.correlationId })
      expect(yield* auditOf(byBack)).toEqual([])
      const enrolled = yield* sql<{ readonly id: string }>`SELECT id FROM idle_wake_connector_instances WHERE state = 'enrolled'`.withoutTransform
      expect(enrolled.map((row) => row.id)).toEqual([b])
    }))

  it.effect("connections: added, unchanged when repeated, a taken id is a conflict; 'removeConnection' is refused while it has non-archived endpoints", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      yield* connectors.enrollInstance(uid("inst"), by())
      const ids = yield* bindOne
      const repeat = by()
      expect((yield* connectors.addConnection({ id: ids.connection, tenant, kind: "broker", owner }, repeat)).outcome).toBe("unchanged")
      expect(yield* auditOf(repeat)).toEqual([])
      const taken = yield* Effect.flip(connectors.addConnection({ id: ids.connection, tenant, kind: "broker", owner: AccountId.make("acct-2") }, by()))
      expect(taken).toMatchObject({ _tag: "ConnectorConflict", reason: "connection-exists" })

      const early = by()
      expect(yield* Effect.flip(connectors.removeConnection(ids.connection, early))).toMatchObject({ reason: "connection-has-endpoints" })
      expect(yield* auditOf(early)).toEqual([])
      expect((yield* rowsOf("idle_wake_github_connections", ids.connection))[0]).toMatchObject({ removed_at: null })

      yield* connectors.removeEndpoint(ids.endpoint, by())
      const removal = by()
      const removed = yield* connectors.removeConnection(ids.connection, removal)
      expect(removed.outcome).toBe("removed")
      expect(removed.connection.removedAt).toBeInstanceOf(Date)
      expect(yield* auditOf(removal)).toEqual([["connection-removed", ids.connection, "operator:environment"]])
      expect((yield* connectors.removeConnection(ids.connection, by())).outcome).toBe("unchanged")
      // A removed id is not reused: its old events name it.
      expect(yield* Effect.flip(connectors.addConnection({ id: ids.connection, tenant, kind: "broker", owner }, by()))).toMatchObject({ reason: "connection-exists" })
      expect(yield* Effect.flip(connectors.removeConnection(uid("conn"), by()))).toMatchObject({ _tag: "ConnectorNotFound", reason: "connection-not-found" })
    }))

  it.effect("'exact completed GitHub bot registration ownership': a registration takes tenant and owner from its connection; completing it is audited; a settled one is not completed again", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      const connection = uid("conn")
      const registration = uid("reg")
      yield* connectors.addConnection({ id: connection, tenant: TenantId.make("globex"), kind: "broker", owner: AccountId.make("acct-7") }, by())
      const start = by()
      // Beyond 2^32: the ids are bigint columns carried as decimal text.
      const started = yield* connectors.startBotRegistration({ id: registration, connection, appId: 2 ** 40 + 1 }, start)
      expect(started).toMatchObject({
        outcome: "started",
        registration: { id: registration, tenantId: "globex", connectionId: connection, owner: "acct-7", appId: String(2 ** 40 + 1), installationId: null, state: "pending", completedAt: null }
      })
      expect(yield* auditOf(start)).toEqual([["registration-started", registration, "operator:environment"]])
      expect((yield* connectors.startBotRegistration({ id: registration, connection, appId: 2 ** 40 + 1 }, by())).outcome).toBe("unchanged")
      expect(yield* Effect.flip(connectors.startBotRegistration({ id: registration, connection, appId: 5 }, by()))).toMatchObject({ reason: "registration-exists" })

      const complete = by()
      const completed = yield* connectors.completeBotRegistration({ id: registration, installationId: 9_007_199_254_740_991 }, complete)
      expect(completed.registration).toMatchObject({ state: "completed", installationId: "9007199254740991" })
      expect(completed.registration.completedAt).toBeInstanceOf(Date)
      expect(yield* auditOf(complete)).toEqual([["registration-completed", registration, "operator:environment"]])
      expect((yield* connectors.completeBotRegistration({ id: registration, installationId: 9_007_199_254_740_991 }, by())).outcome).toBe("unchanged")
      expect(yield* Effect.flip(connectors.completeBotRegistration({ id: registration, installationId: 1 }, by()))).toMatchObject({ reason: "registration-settled" })

      const personal = uid("mcp")
      yield* connectors.addConnection({ id: personal, tenant, kind: "personal-mcp", owner }, by())
      expect(yield* Effect.flip(connectors.startBotRegistration({ id: uid("reg"), connection: personal, appId: 1 }, by()))).toMatchObject({ reason: "connection-not-broker" })
      const gone = uid("conn")
      yield* connectors.addConnection({ id: gone, tenant, kind: "broker", owner }, by())
      yield* connectors.removeConnection(gone, by())
      expect(yield* Effect.flip(connectors.startBotRegistration({ id: uid("reg"), connection: gone, appId: 1 }, by()))).toMatchObject({ reason: "connection-removed" })
      expect(yield* Effect.flip(connectors.startBotRegistration({ id: uid("reg"), connection: uid("conn"), appId: 1 }, by()))).toMatchObject({ _tag: "ConnectorNotFound", reason: "connection-not-found" })
      expect(yield* Effect.flip(connectors.completeBotRegistration({ id: uid("reg"), installationId: 1 }, by()))).toMatchObject({ _tag: "ConnectorNotFound", reason: "registration-not-found" })
    }))

  it.effect("'An active broker bot can retain its endpoint and paired channel connection only when setup has finished': addEndpoint creates both together, bound to the enrolled instance, and refuses unfinished or foreign setup", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      const instance = uid("inst")
      yield* connectors.enrollInstance(instance, by())
      const connection = uid("conn")
      const registration = uid("reg")
      yield* connectors.addConnection({ id: connection, tenant, kind: "broker", owner }, by())
      yield* connectors.startBotRegistration({ id: registration, connection, appId: 101 }, by())
      const [endpoint, channel] = [uid("ep"), uid("ch")]
      const input = { id: endpoint, channel, connection, registration }

      const early = by()
      expect(yield* Effect.flip(connectors.addEndpoint(input, early))).toMatchObject({ reason: "registration-unsettled", correlationId: early.correlationId })
      expect(yield* auditOf(early)).toEqual([])
      expect(yield* rowsOf("idle_wake_github_endpoints", endpoint)).toEqual([])
      yield* connectors.completeBotRegistration({ id: registration, installationId: 202 }, by())

      const add = by()
      const added = yield* connectors.addEndpoint(input, add)
      expect(added).toMatchObject({
        outcome: "added",
        endpoint: { id: endpoint, tenantId: "acme", transport: "github", connectorInstanceId: instance, connectionId: connection, registrationId: registration, channelConnectionId: channel, generation: 1, archivedAt: null },
        channel: { id: channel, tenantId: "acme", transport: "github", endpointId: endpoint, enabled: true, archivedAt: null }
      })
      // Opaque references to where the credentials are, never a credential.
      expect(added.endpoint.credentialRef).toBe(`vault:github-endpoint/${endpoint}`)
      expect(added.channel!.credentialRef).toBe(`vault:github-channel/${channel}`)
      expect(yield* auditOf(add)).toEqual([["endpoint-added", endpoint, "operator:environment"]])
      const again = by()
      expect((yield* connectors.addEndpoint(input, again)).outcome).toBe("unchanged")
      expect(yield* auditOf(again)).toEqual([])

      const refusals: ReadonlyArray<[Parameters<typeof connectors.addEndpoint>[0], string]> = [
        [{ ...input, channel: uid("ch") }, "endpoint-exists"],
        [{ ...input, id: uid("ep") }, "channel-exists"],
        [{ ...input, id: uid("ep"), channel: uid("ch"), connection: uid("conn") }, "connection-not-found"],
        [{ ...input, id: uid("ep"), channel: uid("ch"), registration: uid("reg") }, "registration-not-found"]
      ]
      for (const [refused, reason] of refusals) {
        expect(yield* Effect.flip(connectors.addEndpoint(refused, by()))).toMatchObject({ reason })
        expect(yield* rowsOf("idle_wake_github_endpoints", refused.id === endpoint ? uid("none") : refused.id)).toEqual([])
      }
      // A completed registration of another connection is not this connection's.
      const other = uid("conn")
      yield* connectors.addConnection({ id: other, tenant, kind: "broker", owner }, by())
      const foreignChannel = uid("ch")
      expect(yield* Effect.flip(connectors.addEndpoint({ id: uid("ep"), channel: foreignChannel, connection: other, registration }, by()))).toMatchObject({ reason: "registration-foreign" })
      expect(yield* rowsOf("idle_wake_channel_connections", foreignChannel)).toEqual([])
      const personal = uid("mcp")
      yield* connectors.addConnection({ id: personal, tenant, kind: "personal-mcp", owner }, by())
      expect(yield* Effect.flip(connectors.addEndpoint({ id: uid("ep"), channel: uid("ch"), connection: personal, registration }, by()))).toMatchObject({ reason: "connection-not-broker" })
    }))

  it.effect("each change commits with its audit row or not at all: a change whose audit row is refused leaves no row behind", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      yield* connectors.enrollInstance(uid("inst"), by())
      const ids = yield* bindOne
      // An actor the audit table refuses (it names a credential kind, never free text).
      const unauditable: ConnectorActor = { actor: "Not An Actor", correlationId: makeCorrelationId() }
      const connection = uid("conn")
      const failed = yield* Effect.flip(connectors.addConnection({ id: connection, tenant, kind: "broker", owner }, unauditable))
      expect(failed).toMatchObject({ _tag: "IdleWakeStorageUnavailable", operation: "insertAudit", sqlstate: "23514" })
      expect(yield* rowsOf("idle_wake_github_connections", connection)).toEqual([])

      const [endpoint, channel] = [uid("ep"), uid("ch")]
      yield* Effect.flip(connectors.addEndpoint({ id: endpoint, channel, connection: ids.connection, registration: ids.registration }, unauditable))
      expect(yield* rowsOf("idle_wake_github_endpoints", endpoint)).toEqual([])
      expect(yield* rowsOf("idle_wake_channel_connections", channel)).toEqual([])

      yield* Effect.flip(connectors.removeEndpoint(ids.endpoint, unauditable))
      expect((yield* rowsOf("idle_wake_github_endpoints", ids.endpoint))[0]).toMatchObject({ archived_at: null, credential_ref: `vault:github-endpoint/${ids.endpoint}` })
      expect((yield* rowsOf("idle_wake_channel_connections", ids.channel))[0]).toMatchObject({ enabled: true, archived_at: null })
    }))

  it.effect("'the ordinary removal writer archives the endpoint with its timestamp and generation, archives and disables the same-company channel connection, clears its credential references, and releases endpoint leases', in one transaction", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      const sql = yield* SqlClient.SqlClient
      yield* connectors.enrollInstance(uid("inst"), by())
      const ids = yield* bindOne
      // One lease left to expire unreleased by a holder that went away, one live.
      yield* connectors.acquireLease({ endpoint: ids.endpoint, holder: "worker-gone", ttl: "1 millis" }, by())
      yield* Effect.sleep("20 millis")
      yield* connectors.acquireLease({ endpoint: ids.endpoint, holder: "worker-live", ttl: "1 minute" }, by())

      const removal = by()
      const removed = yield* connectors.removeEndpoint(ids.endpoint, removal)
      expect(removed).toMatchObject({
        outcome: "removed",
        releasedLeases: 2,
        endpoint: { archivedGeneration: 1, generation: 1, credentialRef: null },
        channel: { enabled: false, credentialRef: null }
      })
      const [endpoint] = yield* rowsOf("idle_wake_github_endpoints", ids.endpoint)
      const [channel] = yield* rowsOf("idle_wake_channel_connections", ids.channel)
      expect(endpoint).toMatchObject({ archived_generation: 1, generation: 1, credential_ref: null })
      expect(endpoint!["archived_at"]).toBeInstanceOf(Date)
      expect(channel).toMatchObject({ enabled: false, credential_ref: null })
      // One instant for the whole change.
      expect(channel!["archived_at"]).toEqual(endpoint!["archived_at"])
      const leases = yield* sql<{ readonly released_at: Date | null }>`
        SELECT released_at FROM idle_wake_endpoint_leases WHERE endpoint_id = ${ids.endpoint}`.withoutTransform
      expect(leases.map((lease) => lease.released_at)).toEqual([endpoint!["archived_at"], endpoint!["archived_at"]])
      expect(yield* auditOf(removal)).toEqual([["endpoint-removed", ids.endpoint, "operator:environment"]])

      const again = by()
      expect(yield* connectors.removeEndpoint(ids.endpoint, again)).toMatchObject({ outcome: "unchanged", releasedLeases: 0 })
      expect(yield* auditOf(again)).toEqual([])
      expect(yield* Effect.flip(connectors.acquireLease({ endpoint: ids.endpoint, holder: "worker-late", ttl: "1 minute" }, by()))).toMatchObject({ reason: "endpoint-archived" })
      expect(yield* Effect.flip(connectors.removeEndpoint(uid("ep"), by()))).toMatchObject({ _tag: "ConnectorNotFound", reason: "endpoint-not-found" })
    }))

  it.effect("endpoint leases: one live holder at a time; the holder renews, another holder waits for expiry or release; releases are audited", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      yield* connectors.enrollInstance(uid("inst"), by())
      const ids = yield* bindOne
      const endpoint = ids.endpoint
      const acquire = by()
      const first = yield* connectors.acquireLease({ endpoint, holder: "worker-1", ttl: "1 minute" }, acquire)
      expect(first).toMatchObject({ outcome: "acquired", lease: { endpointId: endpoint, holder: "worker-1", releasedAt: null } })
      expect(first.lease.expiresAt.getTime() - first.lease.acquiredAt.getTime()).toBe(60_000)
      expect(yield* auditOf(acquire)).toEqual([["lease-acquired", `${endpoint}/worker-1`, "operator:environment"]])

      const renew = yield* connectors.acquireLease({ endpoint, holder: "worker-1", ttl: "2 minutes" }, by())
      expect(renew.outcome).toBe("renewed")
      expect(renew.lease.acquiredAt).toEqual(first.lease.acquiredAt)
      expect(renew.lease.expiresAt.getTime()).toBeGreaterThan(first.lease.expiresAt.getTime())

      expect(yield* Effect.flip(connectors.acquireLease({ endpoint, holder: "worker-2", ttl: "1 minute" }, by()))).toMatchObject({ reason: "endpoint-leased" })
      const release = by()
      expect(yield* connectors.releaseLease({ endpoint, holder: "worker-1" }, release)).toEqual({ outcome: "released", released: 1 })
      expect(yield* auditOf(release)).toEqual([["lease-released", `${endpoint}/worker-1`, "operator:environment"]])
      const noop = by()
      expect(yield* connectors.releaseLease({ endpoint, holder: "worker-1" }, noop)).toEqual({ outcome: "unchanged", released: 0 })
      expect(yield* auditOf(noop)).toEqual([])
      expect((yield* connectors.acquireLease({ endpoint, holder: "worker-2", ttl: "1 millis" }, by())).outcome).toBe("acquired")
      yield* Effect.sleep("20 millis")
      // Expired: another holder may take the endpoint.
      expect((yield* connectors.acquireLease({ endpoint, holder: "worker-3", ttl: "1 minute" }, by())).outcome).toBe("acquired")
      expect(yield* Effect.flip(connectors.acquireLease({ endpoint: uid("ep"), holder: "worker-1", ttl: "1 minute" }, by()))).toMatchObject({ reason: "endpoint-not-found" })
      expect(yield* Effect.flip(connectors.releaseLease({ endpoint: uid("ep"), holder: "worker-1" }, by()))).toMatchObject({ reason: "endpoint-not-found" })
    }))
})

suite("before any instance is enrolled (spec 001: 'The signed proof binds the current enrolled connector instance')", (it) => {
  it.effect("an empty state is not active and proves no instance and no bindings; an endpoint cannot be added without an enrolled instance (instance-missing)", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      expect(yield* assessNow()).toEqual({
        active: false,
        blockers: [],
        proof: { connectorInstance: null, connectorGeneration: 0, bindings: bindingsFingerprint(null, 0, []), bindingCount: 0 }
      })
      const connection = uid("conn")
      const registration = uid("reg")
      yield* connectors.addConnection({ id: connection, tenant, kind: "broker", owner }, by())
      yield* connectors.startBotRegistration({ id: registration, connection, appId: 101 }, by())
      yield* connectors.completeBotRegistration({ id: registration, installationId: 202 }, by())
      const refused = by()
      expect(yield* Effect.flip(connectors.addEndpoint({ id: uid("ep"), channel: uid("ch"), connection, registration }, refused)))
        .toMatchObject({ _tag: "ConnectorConflict", reason: "instance-missing", correlationId: refused.correlationId })
      // The broker connection makes the transport active; with no instance there is nothing to bind.
      const assessment = yield* assessNow()
      expect(assessment.active).toBe(true)
      expect(assessment.proof).toBeNull()
      expect(assessment.blockers).toEqual([
        { code: "github-connector-missing" },
        { code: "github-binding-unsettled", ids: [connection], count: 1 }
      ])
    }))
})

suite("removeEndpoint leaves retained history (spec 001, 'Removed GitHub endpoints are retained history only after the ordinary removal writer [...]')", (it) => {
  it.effect("a leased endpoint blocks; once the removal writer removed it, the rest is proven and the removed endpoint binds nothing", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      const instance = uid("inst")
      const enrolled = yield* connectors.enrollInstance(instance, by())
      const ids = yield* bindOne
      const [second, secondChannel] = [uid("ep"), uid("ch")]
      yield* connectors.addEndpoint({ id: second, channel: secondChannel, connection: ids.connection, registration: ids.registration }, by())
      const both = yield* assessNow()
      expect(both.blockers).toEqual([])
      expect(both.proof!.bindingCount).toBe(2)

      yield* connectors.acquireLease({ endpoint: second, holder: "worker-1", ttl: "5 minutes" }, by())
      expect((yield* assessNow()).blockers).toEqual([{ code: "github-endpoint-leased", ids: [second], count: 1 }])

      yield* connectors.removeEndpoint(second, by())
      const after = yield* assessNow()
      const binding = {
        endpoint: ids.endpoint,
        generation: 1,
        connection: ids.connection,
        owner,
        registration: ids.registration,
        appId: "101",
        installationId: "202",
        channel: ids.channel
      }
      expect(after).toEqual({
        active: true,
        blockers: [],
        proof: {
          connectorInstance: instance,
          connectorGeneration: enrolled.instance.generation,
          bindings: bindingsFingerprint(instance, enrolled.instance.generation, [binding]),
          bindingCount: 1
        }
      })
      expect(after.proof!.bindings).not.toBe(both.proof!.bindings)
      const state = yield* connectors.state
      expect(state).toMatchObject({ active: true, blockers: [], counts: { instances: 1, connections: 1, registrations: 1, endpoints: 2, channels: 2, leases: 1 } })
    }))

  it.effect("removing the last endpoint leaves its broker connection's setup unfinished until the connection is removed too; then the instance alone is proven", () =>
    Effect.gen(function* () {
      // Continues from the state the test above left.
      const connectors = yield* Connectors
      const snapshot = yield* drainSnapshot
      const current = snapshot.endpoints.filter((endpoint) => endpoint.archivedAt === null)
      for (const endpoint of current) yield* connectors.removeEndpoint(ConnectorId.make(endpoint.id), by())
      const connection = current[0]!.connectionId
      expect((yield* assessNow()).blockers).toEqual([{ code: "github-binding-unsettled", ids: [connection], count: 1 }])
      yield* connectors.removeConnection(ConnectorId.make(connection), by())
      const assessment = yield* assessNow()
      expect(assessment.blockers).toEqual([])
      expect(assessment.proof).toMatchObject({ connectorInstance: snapshot.instance!.id, bindingCount: 0 })
    }))
})

suite("a removal that skipped the writer (spec 001: 'Any retained lease, incomplete registration or malformed cleanup state still blocks')", (it) => {
  it.effect("endpoints archived by hand-written partial SQL are github-removal-incomplete, and the removal writer leaves an archived endpoint as it is", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      const sql = yield* SqlClient.SqlClient
      yield* connectors.enrollInstance(uid("inst"), by())
      const ids = yield* bindOne
      const add = () => {
        const [endpoint, channel] = [uid("ep"), uid("ch")]
        return Effect.as(connectors.addEndpoint({ id: endpoint, channel, connection: ids.connection, registration: ids.registration }, by()), { endpoint, channel })
      }
      const [channelLeft, leaseLeft, noGeneration] = [yield* add(), yield* add(), yield* add()]
      yield* connectors.acquireLease({ endpoint: leaseLeft.endpoint, holder: "worker-1", ttl: "1 minute" }, by())
      expect((yield* assessNow()).blockers).toEqual([{ code: "github-endpoint-leased", ids: [leaseLeft.endpoint], count: 1 }])

      // The endpoint archived, its channel connection left enabled with its credential reference.
      yield* sql`UPDATE idle_wake_github_endpoints SET archived_at = now(), archived_generation = generation, credential_ref = NULL
                 WHERE id = ${channelLeft.endpoint}`.withoutTransform
      // Everything archived and cleared, the lease never released.
      yield* sql`UPDATE idle_wake_github_endpoints SET archived_at = now(), archived_generation = generation, credential_ref = NULL
                 WHERE id = ${leaseLeft.endpoint}`.withoutTransform
      yield* sql`UPDATE idle_wake_channel_connections SET archived_at = now(), enabled = false, credential_ref = NULL
                 WHERE id = ${leaseLeft.channel}`.withoutTransform
      // Archived without its generation.
      yield* sql`UPDATE idle_wake_github_endpoints SET archived_at = now(), credential_ref = NULL WHERE id = ${noGeneration.endpoint}`.withoutTransform
      yield* sql`UPDATE idle_wake_channel_connections SET archived_at = now(), enabled = false, credential_ref = NULL
                 WHERE id = ${noGeneration.channel}`.withoutTransform

      const incomplete = [channelLeft.endpoint, leaseLeft.endpoint, noGeneration.endpoint].sort()
      const assessment = yield* assessNow()
      expect(assessment.blockers).toEqual([{ code: "github-removal-incomplete", ids: incomplete, count: 3 }])
      expect(assessment.proof).toBeNull()
      // "Removing an already archived endpoint is unchanged": it is not retained history for having been archived.
      expect((yield* connectors.removeEndpoint(channelLeft.endpoint, by())).outcome).toBe("unchanged")
      expect((yield* assessNow()).blockers).toEqual([{ code: "github-removal-incomplete", ids: incomplete, count: 3 }])
      // The operator's state shows the same blockers.
      expect((yield* connectors.state).blockers).toEqual([{ code: "github-removal-incomplete", ids: incomplete, count: 3 }])
    }))
})

suite("legacy and personal connector rows (spec 001)", (it) => {
  it.effect("'This change exposes their required connection IDs but keeps them blocked' (personal GitHub MCP); rows of older writers are unsupported, foreign or retained, never trusted", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      const sql = yield* SqlClient.SqlClient
      const personal = [uid("mcp"), uid("mcp")]
      for (const id of personal) yield* connectors.addConnection({ id, tenant, kind: "personal-mcp", owner }, by())
      // Not active: only the personal MCP connections block, and the proof is the one of no instance.
      const inactive = yield* assessNow()
      expect(inactive.active).toBe(false)
      expect(inactive.blockers).toEqual([{ code: "github-personal-mcp", ids: [...personal].sort(), count: 2 }])
      expect(inactive.proof).toMatchObject({ connectorInstance: null, bindingCount: 0 })

      const instance = uid("inst")
      yield* connectors.enrollInstance(instance, by())
      const ids = yield* bindOne
      // Older writers: a connection of a kind this writer never makes, with an endpoint on it; an endpoint of
      // another tenant's connection; an archived persistent transport.
      const [legacyConnection, legacyEndpoint, foreignEndpoint, socketEndpoint] = [uid("conn"), uid("ep"), uid("ep"), uid("ep")]
      yield* sql`INSERT INTO idle_wake_github_connections (id, tenant_id, kind, owner, created_at)
                 VALUES (${legacyConnection}, 'acme', 'oauth-app', 'acct-1', now())`.withoutTransform
      const endpointRow = (id: string, connection: string, tenantId: string, transport: string, archived: boolean) =>
        sql`INSERT INTO idle_wake_github_endpoints (id, tenant_id, transport, connector_instance_id, connection_id, registration_id,
                                                    channel_connection_id, generation, credential_ref, archived_at, archived_generation, created_at)
            VALUES (${id}, ${tenantId}, ${transport}, ${instance}, ${connection}, ${ids.registration}, ${ids.channel}, 1, NULL,
                    ${archived ? new Date() : null}, ${archived ? 1 : null}, now())`.withoutTransform
      yield* endpointRow(legacyEndpoint, legacyConnection, "acme", "github", false)
      yield* endpointRow(foreignEndpoint, ids.connection, "globex", "github", false)
      yield* endpointRow(socketEndpoint, ids.connection, "acme", "discord-gateway", true)

      const assessment = yield* assessNow()
      expect(assessment.active).toBe(true)
      expect(assessment.proof).toBeNull()
      expect(assessment.blockers).toEqual([
        // Both reuse the first endpoint's channel connection, which is paired with that endpoint.
        { code: "github-binding-foreign", ids: [foreignEndpoint, legacyEndpoint].sort(), count: 2 },
        { code: "github-binding-unsupported", ids: [legacyEndpoint], count: 1 },
        { code: "archived-transport-retained", ids: [socketEndpoint], count: 1 },
        { code: "github-personal-mcp", ids: [...personal].sort(), count: 2 }
      ])
    }))
})

suite("the snapshot (spec 001: 'In the same read-only snapshot')", (it) => {
  it.effect("it reads in the caller's REPEATABLE READ, READ ONLY transaction and opens none of its own: a change committed meanwhile is not seen", () =>
    Effect.gen(function* () {
      const connectors = yield* Connectors
      const sql = yield* SqlClient.SqlClient
      const connection = uid("conn")
      // Outside the transaction: another connection of the pool, as another process's writer would be.
      const elsewhere = <A, E>(effect: Effect.Effect<A, E>) =>
        Effect.mapInputContext(effect, (context: Context.Context<never>) => Context.omit(SqlClient.TransactionConnection)(context))
      const [before, during] = yield* sql.withTransaction(Effect.gen(function* () {
        yield* sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`.withoutTransform
        const before = yield* connectors.snapshot
        yield* elsewhere(sql`INSERT INTO idle_wake_github_connections (id, tenant_id, kind, owner, created_at)
                             VALUES (${connection}, 'acme', 'broker', 'acct-1', now())`.withoutTransform)
        const during = yield* connectors.snapshot
        return [before, during] as const
      }))
      expect(during).toEqual(before)
      expect(before.connections.map((row) => row.id)).not.toContain(connection)
      expect((yield* drainSnapshot).connections.map((row) => row.id)).toContain(connection)
    }))

  it.effect(`it reads at most MAX_BINDINGS + 1 (${MAX_BINDINGS + 1}) rows per table and says truncated when a table hits that limit`, () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      // Unreleased leases of an endpoint that does not exist: a state no writer makes.
      yield* sql`INSERT INTO idle_wake_endpoint_leases (endpoint_id, holder, acquired_at, expires_at)
                 SELECT 'ep-ghost', 'worker-' || n, now(), now() + interval '1 minute'
                 FROM generate_series(1, ${MAX_BINDINGS}) AS n`.withoutTransform
      const full = yield* drainSnapshot
      expect(full.leases).toHaveLength(MAX_BINDINGS)
      expect(full.truncated).toBe(false)
      yield* sql`INSERT INTO idle_wake_endpoint_leases (endpoint_id, holder, acquired_at, expires_at)
                 VALUES ('ep-ghost', 'worker-extra', now(), now() + interval '1 minute')`.withoutTransform
      yield* sql`INSERT INTO idle_wake_endpoint_leases (endpoint_id, holder, acquired_at, expires_at)
                 VALUES ('ep-ghost', 'worker-extra-2', now(), now() + interval '1 minute')`.withoutTransform
      const over = yield* drainSnapshot
      expect(over.leases).toHaveLength(MAX_BINDINGS + 1)
      expect(over.truncated).toBe(true)
      expect(assessBroker(over, { configured: true, now: new Date() }).blockers).toEqual([{ code: "github-binding-overflow" }])
    }))
})

// Exactly what the backend does: the group added to the one HttpApi named "delivery".
const DeliveryApi = HttpApi.make("delivery").add(IdleWakeConnectorsApi)
const TOKEN = `op-${randomBytes(32).toString("base64url")}`
const serve = HttpApiBuilder.serve().pipe(
  Layer.provide(HttpApiBuilder.api(DeliveryApi).pipe(Layer.provide(IdleWakeConnectorsHttpLive), Layer.provide(OperatorAuthenticationLive))),
  Layer.provideMerge(BunHttpServer.layerTest),
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["OPERATOR_TOKEN", TOKEN]]))))
)
const auth = { authorization: `Bearer ${TOKEN}` }
const base = "/operator/idle-wake/connectors"
const send = (method: "post" | "del" | "get", path: string, body?: unknown, headers: Record<string, string> = auth) =>
  Effect.flatMap(HttpClient.HttpClient, (client) =>
    (method === "get" ? client.get(path, { headers }) : client[method](path, { headers, body: body === undefined ? HttpBody.empty : HttpBody.unsafeJson(body) })).pipe(
      Effect.flatMap((response: HttpClientResponse.HttpClientResponse) =>
        Effect.map(response.json, (json) => ({ status: response.status, body: json as any, correlationId: response.headers["x-correlation-id"] })))
    ))

suite("connector writers over HTTP (operator)", (it) => {
  it.effect("201 created, 200 unchanged, 404 not found, 409 conflict; closed bodies; the state route shows the blockers; every change audited as operator:environment", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const unauthenticated = yield* send("get", `${base}/state`, undefined, {})
      expect(unauthenticated.status).toBe(401)

      const enrolled = yield* send("post", `${base}/instances`, { id: "inst-http" })
      expect(enrolled).toMatchObject({ status: 201, body: { outcome: "enrolled", instance: { id: "inst-http", state: "enrolled" }, retired: [] } })
      expect(enrolled.body.correlationId).toBe(enrolled.correlationId)
      expect((yield* send("post", `${base}/instances`, { id: "inst-http" })).body.outcome).toBe("unchanged")
      expect((yield* send("post", `${base}/instances`, { id: "inst-http" })).status).toBe(200)

      const connection = { id: "conn-http", tenant: "acme", kind: "broker", owner: "acct-1" }
      expect(yield* send("post", `${base}/connections`, connection)).toMatchObject({ status: 201, body: { outcome: "added", connection: { id: "conn-http", tenant: "acme" } } })
      expect((yield* send("post", `${base}/connections`, connection)).status).toBe(200)
      // Closed: an unknown member is refused, never dropped, and nothing is written.
      expect((yield* send("post", `${base}/connections`, { ...connection, id: "conn-extra", secret: "x" })).status).toBe(400)
      expect((yield* send("post", `${base}/connections`, { ...connection, kind: "oauth-app", id: "conn-kind" })).status).toBe(400)
      expect(yield* rowsOf("idle_wake_github_connections", "conn-extra")).toEqual([])

      const started = yield* send("post", `${base}/connections/conn-http/registrations`, { id: "reg-http", appId: 101 })
      expect(started).toMatchObject({ status: 201, body: { outcome: "started", registration: { owner: "acct-1", appId: "101", state: "pending" } } })
      const endpoint = { id: "ep-http", channel: "ch-http", connection: "conn-http", registration: "reg-http" }
      const unsettled = yield* send("post", `${base}/endpoints`, endpoint)
      expect(unsettled).toMatchObject({ status: 409, body: { _tag: "ConnectorConflict", reason: "registration-unsettled" } })
      expect(unsettled.body.correlationId).toBe(unsettled.correlationId)
      const state = yield* send("get", `${base}/state`)
      expect(state).toMatchObject({ status: 200, body: { active: true, blockers: [{ code: "github-binding-unsettled", ids: ["conn-http"], count: 1 }] } })

      expect(yield* send("post", `${base}/registrations/reg-http/complete`, { installationId: 202 }))
        .toMatchObject({ status: 200, body: { outcome: "completed", registration: { installationId: "202", state: "completed" } } })
      const added = yield* send("post", `${base}/endpoints`, endpoint)
      expect(added).toMatchObject({ status: 201, body: { outcome: "added", endpoint: { id: "ep-http", connectorInstance: "inst-http", generation: 1 }, channel: { id: "ch-http", enabled: true } } })
      // Views never carry credential references.
      expect(JSON.stringify(added.body)).not.toContain("vault:")
      expect((yield* send("post", `${base}/endpoints`, endpoint)).status).toBe(200)
      expect((yield* send("get", `${base}/state`)).body).toMatchObject({
        active: true,
        blockers: [],
        counts: { instances: 1, connections: 1, registrations: 1, endpoints: 1, channels: 1, leases: 0 }
      })

      expect(yield* send("del", `${base}/connections/conn-http`)).toMatchObject({ status: 409, body: { reason: "connection-has-endpoints" } })
      expect(yield* send("del", `${base}/endpoints/ep-http`)).toMatchObject({ status: 200, body: { outcome: "removed", releasedLeases: 0, endpoint: { archivedGeneration: 1 }, channel: { enabled: false } } })
      expect(yield* send("del", `${base}/endpoints/ep-http`)).toMatchObject({ status: 200, body: { outcome: "unchanged" } })
      expect(yield* send("del", `${base}/endpoints/ep-none`)).toMatchObject({ status: 404, body: { _tag: "ConnectorNotFound", reason: "endpoint-not-found" } })
      expect(yield* send("del", `${base}/connections/conn-http`)).toMatchObject({ status: 200, body: { outcome: "removed" } })
      expect((yield* send("get", `${base}/state`)).body).toMatchObject({ active: true, blockers: [] })

      const actors = yield* sql<{ readonly actor: string; readonly n: number }>`
        SELECT actor, count(*)::int AS n FROM idle_wake_connector_audit GROUP BY actor`.withoutTransform
      expect(actors).toEqual([{ actor: "operator:environment", n: 7 }])
    }).pipe(Effect.provide(serve)))
})
