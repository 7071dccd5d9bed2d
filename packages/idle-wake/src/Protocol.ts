import { Canonical } from "@delivery/core"
import { CreatedAt, decodeBase64Url, decodeSignature, encodeBase64Url, SignatureText } from "@delivery/signer"
import { Either, Schema } from "effect"
import { type KeyObject, sign, verify } from "node:crypto"
import { ConnectorId, SignerKeyId, StackId } from "./Domain.ts"

// The idle-wake wire protocol (spec 001), one module for both roles: the cloud's signed drain assertion, the
// tenant's signed drain report and the version-1 incoming proof it carries. docs/idle-wake.md is this module in
// prose, with a worked example that test/ProtocolExample.test.ts recomputes from the page.
//
// Signatures follow the control-plane envelope's rule: Ed25519 (RFC 8032) over the UTF-8 bytes of the RFC 8785
// (JCS) form of the object without its `signature` member, carried as unpadded base64url. Each object names its
// `type`, so an assertion's signature can never be taken for a report's, nor either for an envelope's.

const closed = { parseOptions: { onExcessProperty: "error" } } as const

export const ASSERTION_TYPE = "idle-wake/drain-assertion"
export const REPORT_TYPE = "idle-wake/drain-report"
export const DRAIN_READ_ACTION = "task-drain:read"

/** Drain-read versions this tenant speaks; version 3 reports answer a version 2 read that carries the capability. */
export const SUPPORTED_ASSERTION_VERSIONS = [1, 2] as const

/** RFC 3339 UTC, the envelope's `createdAt` rule. */
export const Instant = CreatedAt
export type Instant = typeof Instant.Type

// Strict: padding, foreign characters and a second spelling of the same bytes are all refused.
const decode32 = (text: string) => decodeBase64Url(text, 32)

/** 32 random bytes, unpadded base64url (43 characters, the last one canonical). */
export const Bytes32 = Schema.String.pipe(
  Schema.filter((text) => Either.isRight(decode32(text)), { message: () => "expected unpadded base64url of 32 bytes" }),
  Schema.brand("Bytes32")
)
export type Bytes32 = typeof Bytes32.Type

/** The request id the tenant records as used: 16..64 of `A-Z a-z 0-9 _ -` (a UUID or 32 hex digits fits). */
export const RequestId = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_-]{16,64}$/), Schema.brand("DrainRequestId"))
export type RequestId = typeof RequestId.Type

/** Whom the assertion is for: the tenant's configured audience, printable ASCII without spaces. */
export const Audience = Schema.String.pipe(Schema.pattern(/^[\x21-\x7e]{1,256}$/), Schema.brand("Audience"))
export type Audience = typeof Audience.Type

/** Parsed wide so that a wrong action is `assertion-wrong-action`, not a malformed assertion. */
export const Action = Schema.String.pipe(Schema.pattern(/^[a-z][a-z0-9:._-]{0,63}$/))

/**
 * The sleep cycle: the cloud's new random idle hold (the challenge is derived from it and the stack), which read
 * of the cycle this is, and for `final` how long the tenant keeps refusing new work if it reports idle.
 */
export const Phase = Schema.Literal("initial", "final", "release")
export type Phase = typeof Phase.Type

export const MAX_HOLD_SECONDS = 3600

export const Cycle = Schema.Struct({
  idleHold: Bytes32,
  phase: Phase,
  holdSeconds: Schema.Int.pipe(Schema.between(1, MAX_HOLD_SECONDS))
}).annotations({ ...closed, identifier: "DrainCycle" })
export type Cycle = typeof Cycle.Type

/**
 * The drain assertion as first decoded: every member closed and bounded except `idleCapabilities`, whose closed
 * shape is checked only after stack, action, audience, expiry and the one-use request id (spec 001's order).
 */
export const DrainAssertion = Schema.Struct({
  type: Schema.Literal(ASSERTION_TYPE),
  version: Schema.Int.pipe(Schema.between(1, 99)),
  action: Action,
  stack: StackId,
  audience: Audience,
  requestId: RequestId,
  issuedAt: Instant,
  expiresAt: Instant,
  keyId: SignerKeyId,
  cycle: Cycle,
  idleCapabilities: Schema.optional(Schema.Unknown),
  signature: SignatureText
}).annotations({ ...closed, identifier: "DrainAssertion" })
export type DrainAssertion = typeof DrainAssertion.Type

// --- The capability -----------------------------------------------------------------------------------------

export const TENANT_API_PROFILE = "tenant-api-http-v2"
export const GITHUB_BROKER_PROFILE = "github-broker-events-v1"

/** Each profile and the routes it may name: anything else fails closed. */
export const PROFILE_ROUTES = {
  [TENANT_API_PROFILE]: ["api"],
  [GITHUB_BROKER_PROFILE]: ["connector-events"]
} as const

export const ProfileName = Schema.Literal(TENANT_API_PROFILE, GITHUB_BROKER_PROFILE)
export type ProfileName = typeof ProfileName.Type

export const CapabilityProfile = Schema.Struct({
  profile: ProfileName,
  routes: Schema.Array(Schema.String).pipe(Schema.minItems(1), Schema.maxItems(4))
}).annotations({ ...closed, identifier: "CapabilityProfile" })

export const IncomingWakeCapability = Schema.Struct({
  version: Schema.Literal(1),
  profiles: Schema.Array(CapabilityProfile).pipe(Schema.minItems(1), Schema.maxItems(2))
}).annotations({ ...closed, identifier: "IncomingWakeCapability" })
export type IncomingWakeCapability = typeof IncomingWakeCapability.Type

export type CapabilityRefusal =
  | "capability-malformed"
  | "capability-version-unknown"
  | "capability-profile-unknown"
  | "capability-profile-duplicate"
  | "capability-route-unknown"

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const hasExactly = (value: Record<string, unknown>, members: ReadonlyArray<string>) => {
  const keys = Object.keys(value)
  return keys.length === members.length && members.every((member) => Object.hasOwn(value, member))
}

/**
 * `idleCapabilities` → `incomingWake`, checked by hand so that each way of being wrong has its own stable reason.
 * Closed at every level: an unknown member, version, profile or route fails closed; nothing is dropped.
 */
export const decodeCapability = (raw: unknown): Either.Either<IncomingWakeCapability, CapabilityRefusal> => {
  if (!isRecord(raw) || !hasExactly(raw, ["incomingWake"])) return Either.left("capability-malformed")
  const wake = raw["incomingWake"]
  if (!isRecord(wake) || !hasExactly(wake, ["version", "profiles"])) return Either.left("capability-malformed")
  if (typeof wake["version"] !== "number" || !Number.isInteger(wake["version"])) return Either.left("capability-malformed")
  if (wake["version"] !== 1) return Either.left("capability-version-unknown")
  const profiles = wake["profiles"]
  if (!Array.isArray(profiles) || profiles.length === 0 || profiles.length > 2) return Either.left("capability-malformed")
  const seen = new Set<string>()
  const decoded: Array<IncomingWakeCapability["profiles"][number]> = []
  for (const entry of profiles) {
    if (!isRecord(entry) || !hasExactly(entry, ["profile", "routes"])) return Either.left("capability-malformed")
    const { profile, routes } = entry
    if (typeof profile !== "string") return Either.left("capability-malformed")
    if (!Object.hasOwn(PROFILE_ROUTES, profile)) return Either.left("capability-profile-unknown")
    if (seen.has(profile)) return Either.left("capability-profile-duplicate")
    seen.add(profile)
    if (!Array.isArray(routes) || routes.length === 0 || routes.length > 4) return Either.left("capability-malformed")
    if (!routes.every((route) => typeof route === "string")) return Either.left("capability-malformed")
    if (new Set(routes).size !== routes.length) return Either.left("capability-malformed")
    const allowed: ReadonlyArray<string> = PROFILE_ROUTES[profile as ProfileName]
    if (!routes.every((route) => allowed.includes(route))) return Either.left("capability-route-unknown")
    decoded.push({ profile: profile as ProfileName, routes: routes as ReadonlyArray<string> })
  }
  return Either.right({ version: 1, profiles: decoded })
}

// --- The report ---------------------------------------------------------------------------------------------

/** Every reason a tenant gives for not sleeping (docs/idle-wake.md, "Blockers", says why for each). */
export const BlockerCode = Schema.Literal(
  // Configured ingress transports without a qualified wake path.
  "ingress-tenant-api-http",
  "ingress-github-broker-events",
  "ingress-controlplane-envelopes",
  "ingress-github-webhook",
  "ingress-routine-webhook",
  "ingress-slack-webhook",
  "ingress-voice-webhook",
  "ingress-x-webhook",
  "ingress-x-cloud-forwarding",
  "ingress-mcp-sse-subscription",
  "ingress-dot",
  "ingress-muse",
  "ingress-gateway-resource",
  "ingress-discord-gateway",
  "ingress-mcp-stdio",
  "ingress-persistent-socket",
  "ingress-telegram",
  "ingress-teams",
  "ingress-photon",
  "ingress-hosted-preview",
  "legacy-alarm-with-ingress",
  // tenant-api-http-v2: the key projection failed closed.
  "api-key-projection-overflow",
  "api-key-projection-unknown",
  "api-key-projection-malformed",
  "api-key-projection-duplicate",
  // github-broker-events-v1: binding state that cannot be proven.
  "github-connector-missing",
  "github-binding-missing",
  "github-binding-foreign",
  "incoming-proof-changed",
  "github-binding-unsettled",
  "github-binding-unsupported",
  "github-binding-overflow",
  "github-endpoint-leased",
  "github-removal-incomplete",
  "archived-transport-retained",
  "github-personal-mcp",
  // The local-work probe.
  "runtime-initializing",
  "runtime-retiring",
  "runtime-retirement-failed",
  "runtime-failed",
  "service-shutdown-failed",
  "local-api-activity",
  "requests-in-flight",
  "work-pending"
)
export type BlockerCode = typeof BlockerCode.Type

export const MAX_BLOCKER_IDS = 100

/** A blocker with what an operator needs to act on it: the ids involved (at most 100) and how many there are. */
export const Blocker = Schema.Struct({
  code: BlockerCode,
  ids: Schema.optional(Schema.Array(Schema.String.pipe(Schema.maxLength(128))).pipe(Schema.maxItems(MAX_BLOCKER_IDS))),
  count: Schema.optional(Schema.Int.pipe(Schema.nonNegative()))
}).annotations({ ...closed, identifier: "Blocker" })
export type Blocker = typeof Blocker.Type

export const MAX_PROJECTED_KEYS = 1000

export const ProjectedKey = Schema.Struct({
  fingerprint: Bytes32,
  kind: Schema.Literal("board", "agent"),
  expiresAt: Schema.NullOr(Instant)
}).annotations({ ...closed, identifier: "ProjectedKey" })
export type ProjectedKey = typeof ProjectedKey.Type

export const TenantApiProof = Schema.Struct({
  keys: Schema.Array(ProjectedKey).pipe(Schema.maxItems(MAX_PROJECTED_KEYS))
}).annotations({ ...closed, identifier: "TenantApiProof" })
export type TenantApiProof = typeof TenantApiProof.Type

export const MAX_BINDINGS = 1000

export const GithubBrokerProof = Schema.Struct({
  connectorInstance: Schema.NullOr(ConnectorId),
  connectorGeneration: Schema.Int.pipe(Schema.nonNegative()),
  bindings: Bytes32,
  bindingCount: Schema.Int.pipe(Schema.between(0, MAX_BINDINGS))
}).annotations({ ...closed, identifier: "GithubBrokerProof" })
export type GithubBrokerProof = typeof GithubBrokerProof.Type

/** The exact version-1 incoming proof: what the cloud compares between the initial and the final read. */
export const IncomingProof = Schema.Struct({
  version: Schema.Literal(1),
  stack: StackId,
  challenge: Bytes32,
  capability: IncomingWakeCapability,
  profiles: Schema.Struct({
    [TENANT_API_PROFILE]: Schema.optional(TenantApiProof),
    [GITHUB_BROKER_PROFILE]: Schema.optional(GithubBrokerProof)
  }).annotations(closed)
}).annotations({ ...closed, identifier: "IncomingProof" })
export type IncomingProof = typeof IncomingProof.Type

export const HoldState = Schema.Literal("none", "held", "released")
export type HoldState = typeof HoldState.Type

const reportHead = {
  type: Schema.Literal(REPORT_TYPE),
  stack: StackId,
  requestId: RequestId,
  phase: Phase,
  observedAt: Instant,
  idle: Schema.Boolean,
  keyId: SignerKeyId,
  signature: SignatureText
}

/** Version 1: the blocker codes only. */
export const ReportV1 = Schema.Struct({
  ...reportHead,
  version: Schema.Literal(1),
  blockers: Schema.Array(BlockerCode)
}).annotations({ ...closed, identifier: "DrainReportV1" })

/** Version 2: blockers with their ids and counts, and whether the idle hold is held. */
export const ReportV2 = Schema.Struct({
  ...reportHead,
  version: Schema.Literal(2),
  blockers: Schema.Array(Blocker),
  hold: HoldState
}).annotations({ ...closed, identifier: "DrainReportV2" })

/** Version 3: version 2 and the incoming proof, for a version 2 read carrying `idleCapabilities.incomingWake`. */
export const ReportV3 = Schema.Struct({
  ...reportHead,
  version: Schema.Literal(3),
  blockers: Schema.Array(Blocker),
  hold: HoldState,
  incomingWake: IncomingProof
}).annotations({ ...closed, identifier: "DrainReportV3" })

export const DrainReport = Schema.Union(ReportV1, ReportV2, ReportV3).annotations({ identifier: "DrainReport" })
export type DrainReport = typeof DrainReport.Type
export type ReportV3 = typeof ReportV3.Type

// --- Signatures ---------------------------------------------------------------------------------------------

/** The 32 bytes behind a `Bytes32` text (the schema already proved it canonical). */
export const bytesOf = (text: Bytes32): Uint8Array => new Uint8Array(Buffer.from(text, "base64url"))

type Signed = { readonly signature: string }

const withoutSignature = <T extends Signed>({ signature: _, ...unsigned }: T): Omit<T, "signature"> => unsigned

/** The exact bytes a protocol signature covers: RFC 8785 of the object without `signature`. */
export const signingBytes = (value: object): Uint8Array => {
  const unsigned = "signature" in value ? withoutSignature(value as Signed) : value
  // Every protocol object is built from schemas that admit only JSON with an RFC 8785 form.
  return Either.getOrThrowWith(
    Canonical.canonicalBytes(unsigned),
    (error) => new Error(`idle-wake object has no RFC 8785 form at ${error.path} (${error.code})`)
  )
}

export const signObject = <T extends object>(unsigned: T, privateKey: KeyObject): T & Signed => ({
  ...unsigned,
  signature: encodeBase64Url(sign(null, signingBytes(unsigned), privateKey))
})

/** True only for a well-formed Ed25519 signature by `publicKey` over the object's signing bytes. */
export const verifyObject = <T extends Signed>(value: T, publicKey: KeyObject): boolean =>
  Either.match(decodeSignature(value.signature), {
    onLeft: () => false,
    onRight: (signature) => verify(null, signingBytes(value), publicKey, signature)
  })

