import { Schema } from "effect"
import { ConnectorId } from "./Domain.ts"
import { type Binding, bindingsFingerprint } from "./Fingerprint.ts"
import { type BlockerEntry, groupBlockers } from "./Blockers.ts"
import { type Blocker, BlockerCode, type GithubBrokerProof, MAX_BINDINGS } from "./Protocol.ts"

// github-broker-events-v1 (spec 001), the tenant's reconstruction of "all current GitHub bindings" from its own
// connector rows. Pure: the rows come from the drain's read-only snapshot (ConnectorsRepo.snapshot), and nothing
// here trusts that they are consistent. The tables have no foreign keys, so every link of every binding is checked
// here, and any link that is missing, foreign, unsupported or unsettled is a blocker and there is no proof at all
// (never a proof of the bindings that happened to check out).

/** A connector instance row. */
export interface InstanceRow {
  readonly id: string
  readonly generation: number
  readonly state: string
  readonly enrolledAt: Date
  readonly retiredAt: Date | null
}

export interface ConnectionRow {
  readonly id: string
  readonly tenantId: string
  /** 'broker' or 'personal-mcp' from this writer; older writers may have left anything. */
  readonly kind: string
  /** The original connection-event owner (an account id). */
  readonly owner: string
  readonly removedAt: Date | null
  readonly createdAt: Date
}

export interface RegistrationRow {
  readonly id: string
  readonly tenantId: string
  readonly connectionId: string
  readonly owner: string
  /** A bigint column, carried as its decimal text. */
  readonly appId: string
  readonly installationId: string | null
  readonly state: string
  readonly completedAt: Date | null
  readonly createdAt: Date
}

export interface ChannelRow {
  readonly id: string
  readonly tenantId: string
  readonly transport: string
  readonly endpointId: string | null
  readonly enabled: boolean
  readonly credentialRef: string | null
  readonly archivedAt: Date | null
  readonly createdAt: Date
}

export interface EndpointRow {
  readonly id: string
  readonly tenantId: string
  readonly transport: string
  readonly connectorInstanceId: string
  readonly connectionId: string
  readonly registrationId: string | null
  readonly channelConnectionId: string
  readonly generation: number
  readonly credentialRef: string | null
  readonly archivedAt: Date | null
  readonly archivedGeneration: number | null
  readonly createdAt: Date
}

export interface LeaseRow {
  readonly endpointId: string
  readonly holder: string
  readonly acquiredAt: Date
  readonly expiresAt: Date
  readonly releasedAt: Date | null
}

export interface ConnectorSnapshot {
  /** The enrolled instance, if any. */
  readonly instance: { readonly id: string; readonly generation: number } | null
  readonly connections: ReadonlyArray<ConnectionRow>
  readonly registrations: ReadonlyArray<RegistrationRow>
  readonly endpoints: ReadonlyArray<EndpointRow>
  readonly channels: ReadonlyArray<ChannelRow>
  /** Unreleased leases only. */
  readonly leases: ReadonlyArray<LeaseRow>
  /** Some table read hit its limit: the rows are not all there. */
  readonly truncated: boolean
}

/** A blocker of the assessment, as reports carry it. */
export type AssessedBlocker = Blocker

export interface BrokerAssessment {
  readonly active: boolean
  readonly proof: GithubBrokerProof | null
  readonly blockers: ReadonlyArray<AssessedBlocker>
}

/** The connection kinds this writer creates: a broker bot's connection, or a personal GitHub MCP connection. */
export const ConnectionKind = Schema.Literal("broker", "personal-mcp")
export type ConnectionKind = typeof ConnectionKind.Type

const BROKER: ConnectionKind = "broker"
const PERSONAL_MCP: ConnectionKind = "personal-mcp"
const GITHUB = "github"

const isConnectorId = Schema.is(ConnectorId)

/** A registration is settled once it completed or failed; anything else is setup still running. */
const settled = (registration: RegistrationRow) => registration.state === "completed" || registration.state === "failed"

const byId = <T extends { readonly id: string }>(rows: ReadonlyArray<T>): ReadonlyMap<string, T> => {
  const map = new Map<string, T>()
  for (const row of rows) if (!map.has(row.id)) map.set(row.id, row)
  return map
}


/** The proof of a stack where the transport is not active: no instance and the fingerprint of no bindings. */
const inactiveProof = (): GithubBrokerProof => ({
  connectorInstance: null,
  connectorGeneration: 0,
  bindings: bindingsFingerprint(null, 0, []),
  bindingCount: 0
})

/** The protocol's order of codes: assessments list their blockers in it. */
const codeOrder = (code: BlockerCode) => BlockerCode.literals.indexOf(code)

/** What the reconstruction found: one entry per row concerned (or per code when no row can be named). */
class Found {
  private readonly entries: Array<BlockerEntry> = []

  /** Records `code` with how many rows it concerns, when they are too many to name. */
  addCount(code: BlockerCode, count: number): void {
    this.entries.push({ code, count })
  }

  /** Records `code`, with `id` when there is a row to name. */
  add(code: BlockerCode, id?: string): void {
    this.entries.push(id === undefined ? { code } : { code, ids: [id] })
  }

  get size(): number {
    return this.entries.length
  }

  /** Grouped as every report groups blockers (ids sorted, at most MAX_BLOCKER_IDS, `count` the full number), in the protocol's order. */
  blockers(): ReadonlyArray<AssessedBlocker> {
    return [...groupBlockers(this.entries)].sort((a, b) => codeOrder(a.code) - codeOrder(b.code))
  }
}

/**
 * The github-broker-events-v1 assessment of one snapshot (spec 001). `configured`: the transport is configured in
 * this process; `now`: the instant leases are judged at.
 */
export const assessBroker = (
  snapshot: ConnectorSnapshot,
  options: { readonly configured: boolean; readonly now: Date }
): BrokerAssessment => {
  const found = new Found()
  const now = options.now.getTime()
  const connections = byId(snapshot.connections)
  const registrations = byId(snapshot.registrations)
  const channels = byId(snapshot.channels)
  const unreleased = snapshot.leases.filter((lease) => lease.releasedAt === null)
  const current = snapshot.endpoints.filter((endpoint) => endpoint.archivedAt === null)
  const archived = snapshot.endpoints.filter((endpoint) => endpoint.archivedAt !== null)
  const present = snapshot.connections.filter((connection) => connection.removedAt === null)
  const brokers = present.filter((connection) => connection.kind === BROKER)

  // "This change exposes their required connection IDs but keeps them blocked": whether or not the broker
  // transport is active, until the continuity proof of the domain-deadline change exists.
  for (const connection of present) {
    if (connection.kind === PERSONAL_MCP) found.add("github-personal-mcp", connection.id)
  }

  // "Removed GitHub endpoints are retained history only after the ordinary removal writer archives the endpoint with
  // its timestamp and generation, archives and disables the same-company channel connection, clears its credential
  // references, and releases endpoint leases. [...] This exemption covers only GitHub." Leftovers that are not such
  // history block whether or not anything else makes the transport active: unknown state fails closed.
  let leftovers = false
  for (const endpoint of archived) {
    if (endpoint.transport !== GITHUB) {
      found.add("archived-transport-retained", endpoint.id)
      leftovers = true
      continue
    }
    const channel = channels.get(endpoint.channelConnectionId)
    const registration = endpoint.registrationId === null ? undefined : registrations.get(endpoint.registrationId)
    const history = endpoint.archivedGeneration === endpoint.generation &&
      endpoint.credentialRef === null &&
      channel !== undefined &&
      channel.tenantId === endpoint.tenantId &&
      channel.endpointId === endpoint.id &&
      channel.transport === GITHUB &&
      channel.archivedAt !== null &&
      !channel.enabled &&
      channel.credentialRef === null &&
      // "Any retained lease [...] still blocks": expired or not, a lease the writer did not release is retained.
      !unreleased.some((lease) => lease.endpointId === endpoint.id) &&
      // "[...] incomplete registration [...] still blocks."
      (registration === undefined || settled(registration))
    if (!history) {
      found.add("github-removal-incomplete", endpoint.id)
      leftovers = true
    }
  }

  const active = options.configured || snapshot.instance !== null || brokers.length > 0 || current.length > 0 || leftovers
  if (!active) return { active, proof: inactiveProof(), blockers: found.blockers() }

  const refused = (): BrokerAssessment => ({ active, proof: null, blockers: found.blockers() })

  // A partial read cannot prove "all current GitHub bindings"; checking links against it would also name rows as
  // missing that were only not read. Overflow alone says what is wrong.
  if (current.length > MAX_BINDINGS) {
    found.addCount("github-binding-overflow", current.length)
    return refused()
  }
  if (snapshot.truncated) {
    found.add("github-binding-overflow")
    return refused()
  }

  // The proof binds "the current enrolled connector instance": without a well-formed one there is nothing to bind.
  const instance = snapshot.instance !== null && isConnectorId(snapshot.instance.id) &&
      Number.isInteger(snapshot.instance.generation) && snapshot.instance.generation >= 1
    ? snapshot.instance
    : null
  if (instance === null) found.add("github-connector-missing")

  const bindings: Array<Binding> = []
  for (const endpoint of current) {
    let bound = true
    const block = (code: BlockerCode) => {
      bound = false
      found.add(code, endpoint.id)
    }

    // Delivery in progress on the endpoint, whatever its binding looks like.
    if (unreleased.some((lease) => lease.endpointId === endpoint.id && lease.expiresAt.getTime() > now)) {
      block("github-endpoint-leased")
    }
    if (endpoint.transport !== GITHUB) {
      block("github-binding-unsupported")
      continue
    }

    // Each link is checked on its own, so one answer names every broken link of the endpoint.
    if (instance === null) block("github-connector-missing")
    else if (endpoint.connectorInstanceId !== instance.id) block("github-binding-foreign")

    // A removed connection is gone: it binds nothing and lends its owner to no registration.
    const row = connections.get(endpoint.connectionId)
    const connection = row !== undefined && row.removedAt === null ? row : undefined
    if (connection === undefined) block("github-binding-missing")
    else if (connection.tenantId !== endpoint.tenantId) block("github-binding-foreign")
    else if (connection.kind !== BROKER) block("github-binding-unsupported")

    // "Exact completed GitHub bot registration ownership": the registration of this very connection, tenant and
    // connection-event owner, completed with an installation.
    const registration = endpoint.registrationId === null ? undefined : registrations.get(endpoint.registrationId)
    if (endpoint.registrationId === null) block("github-binding-unsettled")
    else if (registration === undefined) block("github-binding-missing")
    else if (
      registration.connectionId !== endpoint.connectionId ||
      registration.tenantId !== endpoint.tenantId ||
      (connection !== undefined && (registration.tenantId !== connection.tenantId || registration.owner !== connection.owner))
    ) block("github-binding-foreign")
    else if (registration.state !== "completed" || registration.installationId === null) block("github-binding-unsettled")

    // The paired channel connection: same tenant, paired with this endpoint, a GitHub channel, live.
    const channel = channels.get(endpoint.channelConnectionId)
    if (channel === undefined) block("github-binding-missing")
    else if (channel.tenantId !== endpoint.tenantId || channel.endpointId !== endpoint.id) block("github-binding-foreign")
    else if (channel.transport !== GITHUB) block("github-binding-unsupported")
    else if (!channel.enabled || channel.archivedAt !== null) block("github-binding-unsettled")

    if (bound && connection !== undefined && registration !== undefined && registration.installationId !== null && channel !== undefined) {
      bindings.push({
        endpoint: endpoint.id,
        generation: endpoint.generation,
        connection: connection.id,
        owner: connection.owner,
        registration: registration.id,
        appId: registration.appId,
        installationId: registration.installationId,
        channel: channel.id
      })
    }
  }

  // "An active broker bot can retain its endpoint and paired channel connection only when setup has finished": a
  // broker connection without an endpoint, or with a registration still running, is setup that has not finished.
  for (const connection of brokers) {
    const bound = current.some((endpoint) => endpoint.connectionId === connection.id)
    const running = snapshot.registrations.some((registration) => registration.connectionId === connection.id && !settled(registration))
    if (!bound || running) found.add("github-binding-unsettled", connection.id)
  }

  if (found.size > 0) return refused()
  // No blocker: `instance` is set, and every current endpoint gave its binding.
  return {
    active,
    proof: {
      connectorInstance: instance!.id as ConnectorId,
      connectorGeneration: instance!.generation,
      bindings: bindingsFingerprint(instance!.id, instance!.generation, bindings),
      bindingCount: bindings.length
    },
    blockers: []
  }
}
