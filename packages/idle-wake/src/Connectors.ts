import type { CorrelationId } from "@delivery/core"
import type { AccountId, TenantId } from "@delivery/identity"
import { Clock, Duration, Effect, Option } from "effect"
import {
  type AssessedBlocker,
  assessBroker,
  type ChannelRow,
  type ConnectionKind,
  type ConnectionRow,
  type EndpointRow,
  type InstanceRow,
  type LeaseRow,
  type RegistrationRow
} from "./ConnectorBindings.ts"
import { ConnectorConflict, ConnectorNotFound } from "./ConnectorErrors.ts"
import { type AuditAction, type ConnectorCounts, ConnectorsRepo } from "./ConnectorsRepo.ts"
import type { ConnectorId } from "./Domain.ts"

/** Who changes connector state and under which request: what the audit row records. */
export interface ConnectorActor {
  /** Names the credential kind, never the credential: `operator:environment`. */
  readonly actor: string
  readonly correlationId: CorrelationId
}

export interface InstanceEnrollment {
  readonly outcome: "enrolled" | "unchanged"
  readonly instance: InstanceRow
  /** The instance this enrollment retired, if one was enrolled. */
  readonly retired: ReadonlyArray<InstanceRow>
}

export interface ConnectionChange {
  readonly outcome: "added" | "removed" | "unchanged"
  readonly connection: ConnectionRow
}

export interface RegistrationChange {
  readonly outcome: "started" | "completed" | "unchanged"
  readonly registration: RegistrationRow
}

export interface EndpointChange {
  readonly outcome: "added" | "removed" | "unchanged"
  readonly endpoint: EndpointRow
  /** The paired channel connection; null only for a legacy endpoint whose same-tenant channel row is missing. */
  readonly channel: ChannelRow | null
  /** Leases the removal released. */
  readonly releasedLeases: number
}

export interface LeaseChange {
  readonly outcome: "acquired" | "renewed"
  readonly lease: LeaseRow
}

export interface LeaseRelease {
  readonly outcome: "released" | "unchanged"
  readonly released: number
}

export interface ConnectorState {
  readonly counts: ConnectorCounts
  readonly active: boolean
  readonly blockers: ReadonlyArray<AssessedBlocker>
}

/** Opaque references to where the credentials live, never the credentials. */
const endpointCredential = (id: string) => `vault:github-endpoint/${id}`
const channelCredential = (id: string) => `vault:github-channel/${id}`

const now = Effect.map(Clock.currentTimeMillis, (millis) => new Date(millis))

/**
 * The writers of the GitHub connector state (spec 001, github-broker-events-v1). Each change and its audit row
 * commit in one transaction; a refusal writes nothing. `removeEndpoint` is the ordinary removal writer whose result is
 * the only archived state ConnectorBindings.ts accepts as retained history.
 */
export class Connectors extends Effect.Service<Connectors>()("@delivery/idle-wake/Connectors", {
  effect: Effect.gen(function* () {
    const repo = yield* ConnectorsRepo

    const notFound = (reason: ConnectorNotFound["reason"], by: ConnectorActor) =>
      new ConnectorNotFound({ reason, correlationId: by.correlationId })
    const conflict = (reason: ConnectorConflict["reason"], by: ConnectorActor) =>
      new ConnectorConflict({ reason, correlationId: by.correlationId })
    const audit = (action: AuditAction, subject: string, by: ConnectorActor, at: Date) =>
      repo.insertAudit({ action, subject, actor: by.actor, correlationId: by.correlationId, at })

    /** `change` under the writers' lock, in one transaction with its audit rows, at one instant. */
    const write = <A, E, R>(operation: string, change: (at: Date) => Effect.Effect<A, E, R>) =>
      repo.transaction(operation, Effect.zipRight(repo.lock, Effect.flatMap(now, change)))

    /** Read inside the caller's REPEATABLE READ, READ ONLY transaction (the drain's snapshot); opens none itself. */
    const snapshot = repo.snapshot.pipe(Effect.withSpan("Connectors.snapshot"))

    /** Row counts and the assessment as it stands, for operators: one read-only snapshot, no proof. */
    const state = Effect.gen(function* () {
      const read = yield* repo.readOnly("state", Effect.all({ counts: repo.counts, snapshot: repo.snapshot }))
      const { active, blockers } = assessBroker(read.snapshot, { configured: false, now: yield* now })
      return { counts: read.counts, active, blockers } satisfies ConnectorState
    }).pipe(Effect.withSpan("Connectors.state"))

    const enrollInstance = Effect.fn("Connectors.enrollInstance")(function* (id: ConnectorId, by: ConnectorActor) {
      return yield* write("enrollInstance", (at) =>
        Effect.gen(function* () {
          const existing = yield* repo.instanceById(id)
          if (Option.isSome(existing)) {
            if (existing.value.state === "enrolled") return { outcome: "unchanged", instance: existing.value, retired: [] } satisfies InstanceEnrollment
            return yield* conflict("instance-retired", by)
          }
          // At most one instance is enrolled: the one the proof binds. Its predecessor's endpoints become foreign.
          const retired = yield* repo.retireEnrolled(at)
          for (const instance of retired) yield* audit("instance-retired", instance.id, by, at)
          const instance = yield* repo.insertInstance({ id, at })
          yield* audit("instance-enrolled", id, by, at)
          return { outcome: "enrolled", instance, retired } satisfies InstanceEnrollment
        }))
    })

    const addConnection = Effect.fn("Connectors.addConnection")(function* (
      input: { readonly id: ConnectorId; readonly tenant: TenantId; readonly kind: ConnectionKind; readonly owner: AccountId },
      by: ConnectorActor
    ) {
      return yield* write("addConnection", (at) =>
        Effect.gen(function* () {
          const existing = yield* repo.connectionById(input.id)
          if (Option.isSome(existing)) {
            const row = existing.value
            if (row.removedAt === null && row.tenantId === input.tenant && row.kind === input.kind && row.owner === input.owner) {
              return { outcome: "unchanged", connection: row } satisfies ConnectionChange
            }
            return yield* conflict("connection-exists", by)
          }
          const connection = yield* repo.insertConnection({ ...input, at })
          yield* audit("connection-added", input.id, by, at)
          return { outcome: "added", connection } satisfies ConnectionChange
        }))
    })

    const removeConnection = Effect.fn("Connectors.removeConnection")(function* (id: ConnectorId, by: ConnectorActor) {
      return yield* write("removeConnection", (at) =>
        Effect.gen(function* () {
          const existing = yield* repo.connectionById(id)
          if (Option.isNone(existing)) return yield* notFound("connection-not-found", by)
          if (existing.value.removedAt !== null) return { outcome: "unchanged", connection: existing.value } satisfies ConnectionChange
          // Endpoints go first, through the removal writer: a connection removed under a live endpoint would leave
          // a binding to nothing, and an endpoint removed by cascade would skip its cleanup.
          if ((yield* repo.currentEndpointsOf(id)) > 0) return yield* conflict("connection-has-endpoints", by)
          const connection = yield* repo.removeConnection({ id, at })
          yield* audit("connection-removed", id, by, at)
          return { outcome: "removed", connection } satisfies ConnectionChange
        }))
    })

    const startBotRegistration = Effect.fn("Connectors.startBotRegistration")(function* (
      input: { readonly id: ConnectorId; readonly connection: ConnectorId; readonly appId: number },
      by: ConnectorActor
    ) {
      return yield* write("startBotRegistration", (at) =>
        Effect.gen(function* () {
          const connection = yield* repo.connectionById(input.connection)
          if (Option.isNone(connection)) return yield* notFound("connection-not-found", by)
          const existing = yield* repo.registrationById(input.id)
          if (Option.isSome(existing)) {
            if (existing.value.connectionId === input.connection && existing.value.appId === String(input.appId)) {
              return { outcome: "unchanged", registration: existing.value } satisfies RegistrationChange
            }
            return yield* conflict("registration-exists", by)
          }
          if (connection.value.removedAt !== null) return yield* conflict("connection-removed", by)
          if (connection.value.kind !== "broker") return yield* conflict("connection-not-broker", by)
          // Tenant and owner come from the connection: the registration's ownership is then exactly the
          // connection-event owner's, which the reconstruction compares.
          const registration = yield* repo.insertRegistration({
            id: input.id,
            tenant: connection.value.tenantId,
            connection: input.connection,
            owner: connection.value.owner,
            appId: input.appId,
            at
          })
          yield* audit("registration-started", input.id, by, at)
          return { outcome: "started", registration } satisfies RegistrationChange
        }))
    })

    const completeBotRegistration = Effect.fn("Connectors.completeBotRegistration")(function* (
      input: { readonly id: ConnectorId; readonly installationId: number },
      by: ConnectorActor
    ) {
      return yield* write("completeBotRegistration", (at) =>
        Effect.gen(function* () {
          const existing = yield* repo.registrationById(input.id)
          if (Option.isNone(existing)) return yield* notFound("registration-not-found", by)
          const row = existing.value
          if (row.state === "completed" && row.installationId === String(input.installationId)) {
            return { outcome: "unchanged", registration: row } satisfies RegistrationChange
          }
          if (row.state !== "pending") return yield* conflict("registration-settled", by)
          const registration = yield* repo.completeRegistration({ id: input.id, installationId: input.installationId, at })
          yield* audit("registration-completed", input.id, by, at)
          return { outcome: "completed", registration } satisfies RegistrationChange
        }))
    })

    const addEndpoint = Effect.fn("Connectors.addEndpoint")(function* (
      input: { readonly id: ConnectorId; readonly channel: ConnectorId; readonly connection: ConnectorId; readonly registration: ConnectorId },
      by: ConnectorActor
    ) {
      return yield* write("addEndpoint", (at) =>
        Effect.gen(function* () {
          const existing = yield* repo.endpointById(input.id)
          if (Option.isSome(existing)) {
            const row = existing.value
            const same = row.archivedAt === null && row.connectionId === input.connection &&
              row.registrationId === input.registration && row.channelConnectionId === input.channel
            const channel = same ? yield* repo.channelById(input.channel) : Option.none()
            if (Option.isSome(channel)) return { outcome: "unchanged", endpoint: row, channel: channel.value, releasedLeases: 0 } satisfies EndpointChange
            return yield* conflict(row.archivedAt === null ? "endpoint-exists" : "endpoint-archived", by)
          }
          // Spec 001: "An active broker bot can retain its endpoint and paired channel connection only when setup has
          // finished": the writer binds only the enrolled instance, a present broker connection and its completed
          // registration, so everything it creates is a binding the reconstruction accepts.
          const instance = yield* repo.enrolledInstance
          if (Option.isNone(instance)) return yield* conflict("instance-missing", by)
          const connection = yield* repo.connectionById(input.connection)
          if (Option.isNone(connection)) return yield* notFound("connection-not-found", by)
          if (connection.value.removedAt !== null) return yield* conflict("connection-removed", by)
          if (connection.value.kind !== "broker") return yield* conflict("connection-not-broker", by)
          const registration = yield* repo.registrationById(input.registration)
          if (Option.isNone(registration)) return yield* notFound("registration-not-found", by)
          const reg = registration.value
          if (reg.connectionId !== input.connection || reg.tenantId !== connection.value.tenantId || reg.owner !== connection.value.owner) {
            return yield* conflict("registration-foreign", by)
          }
          if (reg.state !== "completed" || reg.installationId === null) return yield* conflict("registration-unsettled", by)
          if (Option.isSome(yield* repo.channelById(input.channel))) return yield* conflict("channel-exists", by)
          const tenant = connection.value.tenantId
          // The endpoint and its paired, same-tenant channel connection exist together or not at all.
          const endpoint = yield* repo.insertEndpoint({
            id: input.id,
            tenant,
            instance: instance.value.id,
            connection: input.connection,
            registration: input.registration,
            channel: input.channel,
            credentialRef: endpointCredential(input.id),
            at
          })
          const channel = yield* repo.insertChannel({ id: input.channel, tenant, endpoint: input.id, credentialRef: channelCredential(input.channel), at })
          yield* audit("endpoint-added", input.id, by, at)
          return { outcome: "added", endpoint, channel, releasedLeases: 0 } satisfies EndpointChange
        }))
    })

    /**
     * The ordinary removal writer (spec 001, "Removed GitHub endpoints"): in one transaction it archives the endpoint
     * with its timestamp and generation and clears its credential reference, archives and disables the same-tenant
     * channel connection and clears its credential reference, and releases every unreleased lease of the endpoint.
     */
    const removeEndpoint = Effect.fn("Connectors.removeEndpoint")(function* (id: ConnectorId, by: ConnectorActor) {
      return yield* write("removeEndpoint", (at) =>
        Effect.gen(function* () {
          const existing = yield* repo.endpointById(id)
          if (Option.isNone(existing)) return yield* notFound("endpoint-not-found", by)
          const row = existing.value
          if (row.archivedAt !== null) {
            const channel = yield* repo.channelById(row.channelConnectionId)
            return { outcome: "unchanged", endpoint: row, channel: Option.getOrNull(channel), releasedLeases: 0 } satisfies EndpointChange
          }
          const endpoint = yield* repo.archiveEndpoint({ id, at })
          const [channel] = yield* repo.archiveChannel({ id: row.channelConnectionId, tenant: row.tenantId, at })
          const released = yield* repo.releaseLeases({ endpoint: id, at })
          yield* audit("endpoint-removed", id, by, at)
          return { outcome: "removed", endpoint, channel: channel ?? null, releasedLeases: released.length } satisfies EndpointChange
        }))
    })

    const acquireLease = Effect.fn("Connectors.acquireLease")(function* (
      input: { readonly endpoint: ConnectorId; readonly holder: string; readonly ttl: Duration.DurationInput },
      by: ConnectorActor
    ) {
      const ttl = Duration.toMillis(Duration.decode(input.ttl))
      if (!(ttl >= 1 && Number.isFinite(ttl))) return yield* Effect.dieMessage("a lease needs a finite ttl of at least 1 ms")
      return yield* write("acquireLease", (at) =>
        Effect.gen(function* () {
          const endpoint = yield* repo.endpointById(input.endpoint)
          if (Option.isNone(endpoint)) return yield* notFound("endpoint-not-found", by)
          if (endpoint.value.archivedAt !== null) return yield* conflict("endpoint-archived", by)
          const live = (yield* repo.unreleasedLeases(input.endpoint)).filter((lease) => lease.expiresAt.getTime() > at.getTime())
          if (live.some((lease) => lease.holder !== input.holder)) return yield* conflict("endpoint-leased", by)
          const expiresAt = new Date(at.getTime() + ttl)
          const subject = `${input.endpoint}/${input.holder}`
          const own = live.find((lease) => lease.holder === input.holder)
          if (own !== undefined) {
            const lease = yield* repo.renewLease({ endpoint: input.endpoint, holder: input.holder, acquiredAt: own.acquiredAt, expiresAt })
            yield* audit("lease-renewed", subject, by, at)
            return { outcome: "renewed", lease } satisfies LeaseChange
          }
          const lease = yield* repo.insertLease({ endpoint: input.endpoint, holder: input.holder, at, expiresAt })
          yield* audit("lease-acquired", subject, by, at)
          return { outcome: "acquired", lease } satisfies LeaseChange
        }))
    })

    const releaseLease = Effect.fn("Connectors.releaseLease")(function* (
      input: { readonly endpoint: ConnectorId; readonly holder: string },
      by: ConnectorActor
    ) {
      return yield* write("releaseLease", (at) =>
        Effect.gen(function* () {
          if (Option.isNone(yield* repo.endpointById(input.endpoint))) return yield* notFound("endpoint-not-found", by)
          const released = yield* repo.releaseLeases({ endpoint: input.endpoint, holder: input.holder, at })
          if (released.length === 0) return { outcome: "unchanged", released: 0 } satisfies LeaseRelease
          yield* audit("lease-released", `${input.endpoint}/${input.holder}`, by, at)
          return { outcome: "released", released: released.length } satisfies LeaseRelease
        }))
    })

    return {
      snapshot,
      state,
      enrollInstance,
      addConnection,
      removeConnection,
      startBotRegistration,
      completeBotRegistration,
      addEndpoint,
      removeEndpoint,
      acquireLease,
      releaseLease
    } as const
  }),
  dependencies: [ConnectorsRepo.Default]
}) {}
