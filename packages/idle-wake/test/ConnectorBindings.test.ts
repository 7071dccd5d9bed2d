import { describe, expect, it } from "@effect/vitest"
import {
  assessBroker,
  type BrokerAssessment,
  type ChannelRow,
  type ConnectionRow,
  type ConnectorSnapshot,
  type EndpointRow,
  type LeaseRow,
  type RegistrationRow
} from "../src/ConnectorBindings.ts"
import { bindingsFingerprint } from "../src/Fingerprint.ts"
import { type BlockerCode, MAX_BINDINGS, MAX_BLOCKER_IDS } from "../src/Protocol.ts"

// Spec 001, github-broker-events-v1: the tenant's pure reconstruction of "all current GitHub bindings" from its
// connector rows. Every rule is checked on a snapshot that differs from a fully bound one in exactly that rule.

const created = new Date("2026-03-01T10:00:00.000Z")
const now = new Date("2026-03-01T12:00:00.000Z")
const later = (ms: number) => new Date(now.getTime() + ms)

const connection = (over: Partial<ConnectionRow> = {}): ConnectionRow => ({
  id: "conn-1",
  tenantId: "acme",
  kind: "broker",
  owner: "acct-1",
  removedAt: null,
  createdAt: created,
  ...over
})

const registration = (over: Partial<RegistrationRow> = {}): RegistrationRow => ({
  id: "reg-1",
  tenantId: "acme",
  connectionId: "conn-1",
  owner: "acct-1",
  appId: "101",
  installationId: "202",
  state: "completed",
  completedAt: created,
  createdAt: created,
  ...over
})

const endpoint = (over: Partial<EndpointRow> = {}): EndpointRow => ({
  id: "ep-1",
  tenantId: "acme",
  transport: "github",
  connectorInstanceId: "inst-1",
  connectionId: "conn-1",
  registrationId: "reg-1",
  channelConnectionId: "ch-1",
  generation: 1,
  credentialRef: "vault:github-endpoint/ep-1",
  archivedAt: null,
  archivedGeneration: null,
  createdAt: created,
  ...over
})

const channel = (over: Partial<ChannelRow> = {}): ChannelRow => ({
  id: "ch-1",
  tenantId: "acme",
  transport: "github",
  endpointId: "ep-1",
  enabled: true,
  credentialRef: "vault:github-channel/ch-1",
  archivedAt: null,
  createdAt: created,
  ...over
})

const lease = (over: Partial<LeaseRow> = {}): LeaseRow => ({
  endpointId: "ep-1",
  holder: "worker-1",
  acquiredAt: created,
  expiresAt: later(60_000),
  releasedAt: null,
  ...over
})

/** One endpoint, bound through every link: the state the writer produces. */
const bound = (over: Partial<ConnectorSnapshot> = {}): ConnectorSnapshot => ({
  instance: { id: "inst-1", generation: 3 },
  connections: [connection()],
  registrations: [registration()],
  endpoints: [endpoint()],
  channels: [channel()],
  leases: [],
  truncated: false,
  ...over
})

/** `ep-2`, removed by the ordinary removal writer: archived at its generation, cleaned up, leases released. */
const removedEndpoint = (over: Partial<EndpointRow> = {}) =>
  endpoint({ id: "ep-2", channelConnectionId: "ch-2", generation: 2, archivedAt: created, archivedGeneration: 2, credentialRef: null, ...over })
const removedChannel = (over: Partial<ChannelRow> = {}) =>
  channel({ id: "ch-2", endpointId: "ep-2", enabled: false, credentialRef: null, archivedAt: created, ...over })

/** `bound()` plus the removed `ep-2`. */
const withRemoved = (over: { readonly endpoint?: Partial<EndpointRow>; readonly channel?: Partial<ChannelRow> | null; readonly leases?: ReadonlyArray<LeaseRow>; readonly registrations?: ReadonlyArray<RegistrationRow> } = {}) =>
  bound({
    endpoints: [endpoint(), removedEndpoint(over.endpoint)],
    channels: over.channel === null ? [channel()] : [channel(), removedChannel(over.channel)],
    leases: over.leases ?? [],
    registrations: over.registrations ?? [registration()]
  })

const observed = new Set<BlockerCode>()
const assess = (snapshot: ConnectorSnapshot, configured = false): BrokerAssessment => {
  const assessment = assessBroker(snapshot, { configured, now })
  for (const blocker of assessment.blockers) observed.add(blocker.code)
  return assessment
}

const bindingOf = {
  endpoint: "ep-1",
  generation: 1,
  connection: "conn-1",
  owner: "acct-1",
  registration: "reg-1",
  appId: "101",
  installationId: "202",
  channel: "ch-1"
}

const expectOnly = (assessment: BrokerAssessment, code: BlockerCode, ids: ReadonlyArray<string>) => {
  // A blocker with no row to name carries neither ids nor a count.
  expect(assessment.blockers).toEqual([ids.length === 0 ? { code } : { code, ids, count: ids.length }])
  expect(assessment.proof).toBeNull()
}

const inactiveProof = { connectorInstance: null, connectorGeneration: 0, bindings: bindingsFingerprint(null, 0, []), bindingCount: 0 }

describe("github-broker-events-v1: the proof (spec 001)", () => {
  it("'The signed proof binds the current enrolled connector instance and canonical fingerprint of all current GitHub bindings'", () => {
    const assessment = assess(bound())
    expect(assessment).toEqual({
      active: true,
      blockers: [],
      proof: { connectorInstance: "inst-1", connectorGeneration: 3, bindings: bindingsFingerprint("inst-1", 3, [bindingOf]), bindingCount: 1 }
    })
    const two = assess(bound({
      connections: [connection()],
      registrations: [registration()],
      endpoints: [endpoint(), endpoint({ id: "ep-0", channelConnectionId: "ch-0", generation: 4 })],
      channels: [channel(), channel({ id: "ch-0", endpointId: "ep-0" })]
    }))
    expect(two.proof).toEqual({
      connectorInstance: "inst-1",
      connectorGeneration: 3,
      bindings: bindingsFingerprint("inst-1", 3, [bindingOf, { ...bindingOf, endpoint: "ep-0", generation: 4, channel: "ch-0" }]),
      bindingCount: 2
    })
  })

  it("the transport is active when configured, or an instance is enrolled, or a broker connection that is not removed exists, or an endpoint that is not archived exists", () => {
    const empty = bound({ instance: null, connections: [], registrations: [], endpoints: [], channels: [] })
    expect(assess(empty).active).toBe(false)
    expect(assess(empty, true).active).toBe(true)
    expect(assess({ ...empty, instance: { id: "inst-1", generation: 1 } }).active).toBe(true)
    expect(assess({ ...empty, connections: [connection()] }).active).toBe(true)
    expect(assess({ ...empty, connections: [connection({ removedAt: created })] }).active).toBe(false)
    expect(assess({ ...empty, connections: [connection({ kind: "personal-mcp" })] }).active).toBe(false)
    expect(assess({ ...empty, connections: [connection({ kind: "oauth-app" })] }).active).toBe(false)
    expect(assess({ ...empty, endpoints: [endpoint({ transport: "slack" })] }).active).toBe(true)
    // Retained history alone does not make it active; leftovers that are not history do (unknown state fails closed).
    expect(assess({ ...empty, endpoints: [removedEndpoint()], channels: [removedChannel()] }).active).toBe(false)
    expect(assess({ ...empty, endpoints: [removedEndpoint()] }).active).toBe(true)
    expect(assess({ ...empty, endpoints: [removedEndpoint({ transport: "slack" })], channels: [removedChannel()] }).active).toBe(true)
  })

  it("an enrolled instance with no binding at all is proven: the fingerprint of no bindings under that instance", () => {
    const assessment = assess(bound({ connections: [], registrations: [], endpoints: [], channels: [] }))
    expect(assessment).toEqual({
      active: true,
      blockers: [],
      proof: { connectorInstance: "inst-1", connectorGeneration: 3, bindings: bindingsFingerprint("inst-1", 3, []), bindingCount: 0 }
    })
  })

  it("not active: the proof of no instance (generation 0, no bindings) and no blockers except personal MCP", () => {
    const assessment = assess({
      instance: null,
      connections: [connection({ removedAt: created }), connection({ id: "conn-9", kind: "oauth-app" })],
      registrations: [registration({ state: "pending" })],
      endpoints: [removedEndpoint({ registrationId: null })],
      channels: [removedChannel()],
      leases: [lease({ endpointId: "ep-2", releasedAt: created })],
      truncated: false
    })
    expect(assessment).toEqual({ active: false, blockers: [], proof: inactiveProof })
  })

  it("'Any retained lease, incomplete registration or malformed cleanup state still blocks', also when nothing else is active", () => {
    const assessment = assess({
      instance: null,
      connections: [],
      registrations: [],
      endpoints: [removedEndpoint({ archivedGeneration: null })],
      channels: [],
      leases: [lease({ endpointId: "ep-2" })],
      truncated: false
    })
    expect(assessment.active).toBe(true)
    expect(assessment.proof).toBeNull()
    expect(assessment.blockers).toEqual([{ code: "github-connector-missing" }, { code: "github-removal-incomplete", ids: ["ep-2"], count: 1 }])
  })

  it("'Personal GitHub MCP connections [...] This change exposes their required connection IDs but keeps them blocked', active or not", () => {
    const personal = [connection({ id: "mcp-b", kind: "personal-mcp" }), connection({ id: "mcp-a", kind: "personal-mcp", tenantId: "other" })]
    const removed = connection({ id: "mcp-gone", kind: "personal-mcp", removedAt: created })
    const inactive = assess(bound({ instance: null, connections: [...personal, removed], registrations: [], endpoints: [], channels: [] }))
    expect(inactive).toEqual({
      active: false,
      blockers: [{ code: "github-personal-mcp", ids: ["mcp-a", "mcp-b"], count: 2 }],
      proof: inactiveProof
    })
    // Active and otherwise fully bound: the personal connections still block, so there is no proof.
    const active = assess(bound({ connections: [connection(), ...personal, removed] }))
    expectOnly(active, "github-personal-mcp", ["mcp-a", "mcp-b"])
    expect(active.active).toBe(true)
  })
})

describe("github-broker-events-v1: each link of each binding (spec 001: 'Missing, foreign, changed, unsupported or unsettled binding state prevents sleep')", () => {
  it("an endpoint whose transport is not github: github-binding-unsupported", () => {
    expectOnly(assess(bound({ endpoints: [endpoint({ transport: "slack" })] })), "github-binding-unsupported", ["ep-1"])
  })

  it("no enrolled instance: github-connector-missing, naming each endpoint (and with none to name when only configured)", () => {
    expectOnly(assess(bound({ instance: null })), "github-connector-missing", ["ep-1"])
    expectOnly(assess(bound({ instance: null, connections: [], registrations: [], endpoints: [], channels: [] }), true), "github-connector-missing", [])
    // A malformed instance row is no instance to bind.
    expectOnly(assess(bound({ instance: { id: "Inst 1", generation: 3 }, endpoints: [endpoint({ connectorInstanceId: "Inst 1" })] })), "github-connector-missing", ["ep-1"])
    expectOnly(assess(bound({ instance: { id: "inst-1", generation: 0 } })), "github-connector-missing", ["ep-1"])
  })

  it("an endpoint bound to another instance than the enrolled one: github-binding-foreign", () => {
    expectOnly(assess(bound({ endpoints: [endpoint({ connectorInstanceId: "inst-0" })] })), "github-binding-foreign", ["ep-1"])
  })

  it("its connection missing or removed: github-binding-missing", () => {
    // The broker connection of the binding is then gone too, so only the endpoint is named.
    expectOnly(assess(bound({ connections: [] })), "github-binding-missing", ["ep-1"])
    expectOnly(assess(bound({ connections: [connection({ removedAt: created })] })), "github-binding-missing", ["ep-1"])
  })

  it("a connection of another tenant: github-binding-foreign", () => {
    const assessment = assess(bound({ connections: [connection({ tenantId: "other" })], registrations: [registration({ tenantId: "other" })] }))
    expectOnly(assessment, "github-binding-foreign", ["ep-1"])
  })

  it("a connection whose kind is not broker: github-binding-unsupported", () => {
    expectOnly(assess(bound({ connections: [connection({ kind: "oauth-app" })] })), "github-binding-unsupported", ["ep-1"])
    // A personal MCP connection is both: exposed, and no broker binding.
    const personal = assess(bound({ connections: [connection({ kind: "personal-mcp" })] }))
    expect(personal.blockers).toEqual([
      { code: "github-binding-unsupported", ids: ["ep-1"], count: 1 },
      { code: "github-personal-mcp", ids: ["conn-1"], count: 1 }
    ])
  })

  it("'setup has finished': an endpoint without a registration is github-binding-unsettled", () => {
    expectOnly(assess(bound({ endpoints: [endpoint({ registrationId: null })] })), "github-binding-unsettled", ["ep-1"])
  })

  it("a registration row that is missing: github-binding-missing", () => {
    expectOnly(assess(bound({ registrations: [] })), "github-binding-missing", ["ep-1"])
  })

  it("'exact completed GitHub bot registration ownership': a registration of another connection, tenant or connection-event owner is github-binding-foreign", () => {
    for (const over of [{ connectionId: "conn-2" }, { tenantId: "other" }, { owner: "acct-2" }]) {
      expectOnly(assess(bound({ registrations: [registration(over)] })), "github-binding-foreign", ["ep-1"])
    }
  })

  it("a registration that is not completed, or completed without an installation: github-binding-unsettled", () => {
    // A pending registration is also unfinished setup of the broker connection.
    const pending = assess(bound({ registrations: [registration({ state: "pending", installationId: null, completedAt: null })] }))
    expectOnly(pending, "github-binding-unsettled", ["conn-1", "ep-1"])
    expectOnly(assess(bound({ registrations: [registration({ state: "failed" })] })), "github-binding-unsettled", ["ep-1"])
    expectOnly(assess(bound({ registrations: [registration({ installationId: null })] })), "github-binding-unsettled", ["ep-1"])
  })

  it("the paired channel connection missing: github-binding-missing", () => {
    expectOnly(assess(bound({ channels: [] })), "github-binding-missing", ["ep-1"])
  })

  it("a channel connection of another tenant, or paired with another endpoint: github-binding-foreign", () => {
    expectOnly(assess(bound({ channels: [channel({ tenantId: "other" })] })), "github-binding-foreign", ["ep-1"])
    expectOnly(assess(bound({ channels: [channel({ endpointId: "ep-9" })] })), "github-binding-foreign", ["ep-1"])
    expectOnly(assess(bound({ channels: [channel({ endpointId: null })] })), "github-binding-foreign", ["ep-1"])
  })

  it("a channel connection whose transport is not github: github-binding-unsupported", () => {
    expectOnly(assess(bound({ channels: [channel({ transport: "slack" })] })), "github-binding-unsupported", ["ep-1"])
  })

  it("a channel connection disabled or archived: github-binding-unsettled", () => {
    expectOnly(assess(bound({ channels: [channel({ enabled: false })] })), "github-binding-unsettled", ["ep-1"])
    expectOnly(assess(bound({ channels: [channel({ archivedAt: created })] })), "github-binding-unsettled", ["ep-1"])
  })

  it("a live lease (unreleased, not expired) on an endpoint: github-endpoint-leased; an expired or released one does not block a current endpoint", () => {
    expectOnly(assess(bound({ leases: [lease()] })), "github-endpoint-leased", ["ep-1"])
    expect(assess(bound({ leases: [lease({ expiresAt: now })] })).blockers).toEqual([])
    expect(assess(bound({ leases: [lease({ expiresAt: later(-1) })] })).blockers).toEqual([])
    expect(assess(bound({ leases: [lease({ releasedAt: created })] })).blockers).toEqual([])
  })

  it("one answer names every broken link of an endpoint", () => {
    const assessment = assess(bound({
      endpoints: [endpoint({ connectorInstanceId: "inst-0", registrationId: null })],
      channels: [],
      leases: [lease()]
    }))
    expect(assessment.blockers.map((blocker) => blocker.code)).toEqual([
      "github-binding-missing",
      "github-binding-foreign",
      "github-binding-unsettled",
      "github-endpoint-leased"
    ])
  })
})

describe("github-broker-events-v1: unfinished setup (spec 001: 'An active broker bot can retain its endpoint and paired channel connection only when setup has finished')", () => {
  it("a broker connection without an endpoint: github-binding-unsettled with the connection id", () => {
    const assessment = assess(bound({ connections: [connection(), connection({ id: "conn-2" })] }))
    expectOnly(assessment, "github-binding-unsettled", ["conn-2"])
    // Removed, it no longer needs one.
    expect(assess(bound({ connections: [connection(), connection({ id: "conn-2", removedAt: created })] })).blockers).toEqual([])
  })

  it("a broker connection with a registration still pending: github-binding-unsettled; a failed one is settled", () => {
    const pending = registration({ id: "reg-2", state: "pending", installationId: null, completedAt: null })
    expectOnly(assess(bound({ registrations: [registration(), pending] })), "github-binding-unsettled", ["conn-1"])
    expect(assess(bound({ registrations: [registration(), registration({ id: "reg-2", state: "failed" })] })).blockers).toEqual([])
  })
})

describe("github-broker-events-v1: bounds (spec 001)", () => {
  it("a snapshot that hit a read limit (truncated): github-binding-overflow and no proof", () => {
    expectOnly(assess(bound({ truncated: true })), "github-binding-overflow", [])
    // Personal MCP connections are still exposed.
    const both = assess(bound({ truncated: true, connections: [connection(), connection({ id: "mcp-1", kind: "personal-mcp" })] }))
    expect(both.blockers.map((blocker) => blocker.code)).toEqual(["github-binding-overflow", "github-personal-mcp"])
  })

  it(`more than MAX_BINDINGS (${MAX_BINDINGS}) current endpoints: github-binding-overflow with the full count and no ids`, () => {
    const endpoints = Array.from({ length: MAX_BINDINGS + 1 }, (_, i) => endpoint({ id: `ep-${String(MAX_BINDINGS - i).padStart(4, "0")}` }))
    const assessment = assess(bound({ endpoints }))
    expect(assessment.blockers).toEqual([{ code: "github-binding-overflow", count: MAX_BINDINGS + 1 }])
    expect(assessment.proof).toBeNull()
  })

  it(`blockers are grouped by code in the protocol's order, ids sorted, at most MAX_BLOCKER_IDS (${MAX_BLOCKER_IDS}) each, count the full number`, () => {
    const endpoints = Array.from({ length: 150 }, (_, i) => endpoint({ id: `ep-${String(149 - i).padStart(3, "0")}`, connectionId: "conn-missing" }))
    const assessment = assess(bound({ endpoints, instance: null }))
    const ids = endpoints.map((e) => e.id).sort()
    expect(assessment.blockers).toEqual([
      { code: "github-connector-missing", ids: ids.slice(0, MAX_BLOCKER_IDS), count: 150 },
      { code: "github-binding-missing", ids: ids.slice(0, MAX_BLOCKER_IDS), count: 150 },
      // Every channel is ch-1, paired with ep-1: foreign to these endpoints.
      { code: "github-binding-foreign", ids: ids.slice(0, MAX_BLOCKER_IDS), count: 150 },
      { code: "github-binding-unsettled", ids: ["conn-1"], count: 1 }
    ])
  })
})

describe("github-broker-events-v1: removed endpoints (spec 001, 'Removed GitHub endpoints are retained history only after the ordinary removal writer [...]')", () => {
  it("an endpoint archived with its timestamp and generation, its same-company channel connection archived and disabled, both credential references cleared and its leases released is retained history: exempt", () => {
    const assessment = assess(withRemoved({ leases: [lease({ endpointId: "ep-2", releasedAt: created })] }))
    expect(assessment.blockers).toEqual([])
    // History binds nothing: the proof is the one of the current endpoint alone.
    expect(assessment.proof).toEqual(assess(bound()).proof)
    // Its (settled) registration may stay; a completed one or a failed one.
    expect(assess(withRemoved({ endpoint: { registrationId: "reg-2" }, registrations: [registration(), registration({ id: "reg-2", connectionId: "conn-old", state: "failed" })] })).blockers).toEqual([])
  })

  const incomplete: ReadonlyArray<[string, Parameters<typeof withRemoved>[0]]> = [
    ["archived without its generation", { endpoint: { archivedGeneration: null } }],
    ["archived at another generation", { endpoint: { archivedGeneration: 1 } }],
    ["the endpoint's credential reference kept", { endpoint: { credentialRef: "vault:github-endpoint/ep-2" } }],
    ["its channel connection missing", { channel: null }],
    ["its channel connection of another company", { channel: { tenantId: "other" } }],
    ["its channel connection paired with another endpoint", { channel: { endpointId: "ep-1" } }],
    ["its channel connection of another transport", { channel: { transport: "slack" } }],
    ["its channel connection not archived", { channel: { archivedAt: null } }],
    ["its channel connection still enabled", { channel: { enabled: true } }],
    ["the channel's credential reference kept", { channel: { credentialRef: "vault:github-channel/ch-2" } }],
    ["a live lease retained", { leases: [lease({ endpointId: "ep-2" })] }],
    ["an expired lease never released", { leases: [lease({ endpointId: "ep-2", expiresAt: later(-60_000) })] }],
    [
      "an incomplete registration",
      {
        endpoint: { registrationId: "reg-2" },
        registrations: [registration(), registration({ id: "reg-2", connectionId: "conn-old", state: "pending", installationId: null })]
      }
    ]
  ]
  for (const [how, over] of incomplete) {
    it(`'Any retained lease, incomplete registration or malformed cleanup state still blocks': ${how} is github-removal-incomplete`, () => {
      expectOnly(assess(withRemoved(over)), "github-removal-incomplete", ["ep-2"])
    })
  }

  it("'This exemption covers only GitHub; archived persistent transports remain blocked': archived-transport-retained, however clean", () => {
    expectOnly(assess(withRemoved({ endpoint: { transport: "discord-gateway" } })), "archived-transport-retained", ["ep-2"])
  })
})

describe("github-broker-events-v1: the fingerprint (spec 001: 'canonical fingerprint of all current GitHub bindings')", () => {
  const base = assess(bound()).proof!.bindings

  const changes: ReadonlyArray<[string, ConnectorSnapshot]> = [
    ["the endpoint id", bound({ endpoints: [endpoint({ id: "ep-x" })], channels: [channel({ endpointId: "ep-x" })] })],
    ["the endpoint generation", bound({ endpoints: [endpoint({ generation: 2 })] })],
    ["the connection id", bound({ connections: [connection({ id: "conn-x" })], endpoints: [endpoint({ connectionId: "conn-x" })], registrations: [registration({ connectionId: "conn-x" })] })],
    ["the connection-event owner", bound({ connections: [connection({ owner: "acct-x" })], registrations: [registration({ owner: "acct-x" })] })],
    ["the registration id", bound({ registrations: [registration({ id: "reg-x" })], endpoints: [endpoint({ registrationId: "reg-x" })] })],
    ["the app id", bound({ registrations: [registration({ appId: "102" })] })],
    ["the installation id", bound({ registrations: [registration({ installationId: "203" })] })],
    ["the channel connection id", bound({ channels: [channel({ id: "ch-x" })], endpoints: [endpoint({ channelConnectionId: "ch-x" })] })],
    ["the instance", bound({ instance: { id: "inst-2", generation: 3 }, endpoints: [endpoint({ connectorInstanceId: "inst-2" })] })],
    ["the instance generation", bound({ instance: { id: "inst-1", generation: 4 } })]
  ]
  for (const [what, snapshot] of changes) {
    it(`'Any change of any binding, of the instance or of its generation changes it': ${what}`, () => {
      const assessment = assess(snapshot)
      expect(assessment.blockers).toEqual([])
      expect(assessment.proof!.bindings).not.toBe(base)
    })
  }

  it("what is not part of a binding (times, credential references, other tenants' history) leaves it as it is", () => {
    const same = assess(bound({
      endpoints: [endpoint({ createdAt: now, credentialRef: "vault:github-endpoint/rotated" })],
      channels: [channel({ createdAt: now, credentialRef: null })],
      registrations: [registration({ completedAt: now })]
    }))
    expect(same.proof!.bindings).toBe(base)
  })

  it("the proof depends on the rows, never on the order they came back in", () => {
    const rows = bound({
      connections: [connection(), connection({ id: "conn-2", owner: "acct-2" })],
      registrations: [registration(), registration({ id: "reg-2", connectionId: "conn-2", owner: "acct-2", installationId: "303" })],
      endpoints: [endpoint(), endpoint({ id: "ep-2", connectionId: "conn-2", registrationId: "reg-2", channelConnectionId: "ch-2" }), removedEndpoint({ id: "ep-3", channelConnectionId: "ch-3" })],
      channels: [channel(), channel({ id: "ch-2", endpointId: "ep-2" }), removedChannel({ id: "ch-3", endpointId: "ep-3" })]
    })
    const reversed: ConnectorSnapshot = {
      ...rows,
      connections: [...rows.connections].reverse(),
      registrations: [...rows.registrations].reverse(),
      endpoints: [...rows.endpoints].reverse(),
      channels: [...rows.channels].reverse()
    }
    const forward = assess(rows)
    expect(forward.blockers).toEqual([])
    expect(forward.proof!.bindingCount).toBe(2)
    expect(assess(reversed)).toEqual(forward)
  })
})

const GITHUB_CODES: ReadonlyArray<BlockerCode> = [
  "github-connector-missing",
  "github-binding-missing",
  "github-binding-foreign",
  "github-binding-unsettled",
  "github-binding-unsupported",
  "github-binding-overflow",
  "github-endpoint-leased",
  "github-removal-incomplete",
  "archived-transport-retained",
  "github-personal-mcp"
]

describe("github-broker-events-v1: coverage", () => {
  // Runs after the suites above (vitest keeps a file's order).
  it("every blocker code of the profile's binding state is produced by some state above", () => {
    expect([...observed].sort()).toEqual([...GITHUB_CODES].sort())
  })
})
