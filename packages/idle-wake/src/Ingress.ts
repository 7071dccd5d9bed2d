import type { BlockerCode, ProfileName } from "./Protocol.ts"

// The registry of ingress transports a stack can have (spec 001, "Explicit remaining coverage"). Each transport is
// a closed name with its blocker and the spec's reason for keeping it; only the two profiles can lift a blocker, and
// only in a version 3 report whose proof for that profile succeeded. docs/idle-wake.md prints this table and a test
// keeps the two equal.

export interface Transport {
  readonly name: string
  /** Null: passive, never blocks sleep. */
  readonly blocker: BlockerCode | null
  /** The profile whose proof lets the stack sleep with this transport configured. */
  readonly profile: ProfileName | null
  readonly reason: string
}

const webhook = "keep their configured-ingress blocker until their exact response budget, retry and retention, authenticated wake and replay contracts are qualified"
const ownBlocker = "keep their own blocker"
const socket = "a required persistent socket: needs an owner-proved stop, reconnect and sequence replay"
const chat = "needs its own actual producer and lifecycle classification"

export const TRANSPORTS: ReadonlyArray<Transport> = [
  {
    name: "tenant-api-http",
    blocker: "ingress-tenant-api-http",
    profile: "tenant-api-http-v2",
    reason: "the tenant API under `/api/...` (always served): wakes only through the cloud's bounded wake for a projected board or agent key"
  },
  {
    name: "github-broker-events",
    blocker: "ingress-github-broker-events",
    profile: "github-broker-events-v1",
    reason: "connector events through the cloud's durable connector queue: sleeps only with a proof of the current connector instance and every GitHub binding"
  },
  {
    name: "controlplane-envelopes",
    blocker: "ingress-controlplane-envelopes",
    profile: null,
    reason: "signed control-plane envelopes from devices (active whenever a device credential can authenticate): device credentials have no authenticated wake path"
  },
  { name: "github-webhook", blocker: "ingress-github-webhook", profile: null, reason: `direct GitHub webhooks ${webhook}` },
  { name: "routine-webhook", blocker: "ingress-routine-webhook", profile: null, reason: `routine webhooks ${webhook}` },
  { name: "slack-webhook", blocker: "ingress-slack-webhook", profile: null, reason: `Slack webhooks ${webhook}` },
  { name: "voice-webhook", blocker: "ingress-voice-webhook", profile: null, reason: `voice webhooks ${webhook}` },
  { name: "x-webhook", blocker: "ingress-x-webhook", profile: null, reason: `X webhooks ${webhook}` },
  { name: "x-cloud-forwarding", blocker: "ingress-x-cloud-forwarding", profile: null, reason: "Cloud X forwarding by itself does not establish wake" },
  { name: "mcp-http-outbound", blocker: null, profile: null, reason: "saved outbound HTTP MCP stays passive under its narrow rule: nothing arrives while asleep" },
  { name: "mcp-sse-subscription", blocker: "ingress-mcp-sse-subscription", profile: null, reason: `public MCP/SSE subscriptions ${ownBlocker}` },
  { name: "dot", blocker: "ingress-dot", profile: null, reason: "Dot keeps its own blocker" },
  { name: "muse", blocker: "ingress-muse", profile: null, reason: "the separately reserved Muse protocol keeps its own blocker and gains no wake path" },
  { name: "gateway-resource", blocker: "ingress-gateway-resource", profile: null, reason: `gateway resources ${ownBlocker}` },
  { name: "discord-gateway", blocker: "ingress-discord-gateway", profile: null, reason: `the Discord Gateway is ${socket}` },
  { name: "mcp-stdio", blocker: "ingress-mcp-stdio", profile: null, reason: `local MCP stdio is ${socket}` },
  { name: "persistent-socket", blocker: "ingress-persistent-socket", profile: null, reason: "any other required persistent socket: needs an owner-proved stop, reconnect and sequence replay" },
  { name: "telegram", blocker: "ingress-telegram", profile: null, reason: `Telegram ${chat}` },
  { name: "teams", blocker: "ingress-teams", profile: null, reason: `Teams ${chat}` },
  { name: "photon", blocker: "ingress-photon", profile: null, reason: `Photon ${chat}` },
  { name: "hosted-preview", blocker: "ingress-hosted-preview", profile: null, reason: "hosted previews belong to their own ingress change" },
  {
    name: "legacy-alarms",
    blocker: "legacy-alarm-with-ingress",
    profile: null,
    reason: "legacy scheduled alarms stay conservative when combined with ingress (the tenant API is always an ingress here)"
  }
]

/** The names IDLE_WAKE_INGRESS may list; the tenant API is always present and need not be listed. */
export const TRANSPORT_NAMES: ReadonlyArray<string> = TRANSPORTS.map((transport) => transport.name)

export const transportNamed = (name: string): Transport | undefined => TRANSPORTS.find((transport) => transport.name === name)

/** The transports always present in this backend: the tenant API. Others come from configuration or from state. */
export const BUILT_IN: ReadonlyArray<string> = ["tenant-api-http"]

/**
 * The ingress blockers of a report: every active transport's blocker, unless its profile's proof succeeded in this
 * report (`proven`). Versions 1 and 2 pass no proven profile, so every configured ingress blocks (spec 001: "without
 * this capability, versions 1/2 and all existing ingress blockers remain").
 */
export const ingressBlockers = (
  active: ReadonlyArray<string>,
  proven: ReadonlySet<ProfileName>
): ReadonlyArray<{ readonly code: BlockerCode; readonly transport: string }> => {
  const blockers: Array<{ code: BlockerCode; transport: string }> = []
  for (const name of new Set(active)) {
    const transport = transportNamed(name)
    // An unknown name cannot get past configuration; if it ever did, it is not known to be safe.
    if (transport === undefined) throw new Error(`unknown ingress transport: ${name}`)
    if (transport.blocker === null) continue
    // Stryker disable next-line ConditionalExpression: a transport without a profile is never in `proven`; the null test only narrows the type
    if (transport.profile !== null && proven.has(transport.profile)) continue
    blockers.push({ code: transport.blocker, transport: transport.name })
  }
  return blockers
}
