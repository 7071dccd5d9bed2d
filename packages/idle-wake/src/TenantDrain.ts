import { Canonical, type CorrelationId } from "@delivery/core"
import { Identity } from "@delivery/identity"
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Either, Option, Redacted, Schema } from "effect"
import { randomBytes } from "node:crypto"
import { groupBlockers } from "./Blockers.ts"
import { assessBroker } from "./ConnectorBindings.ts"
import { Connectors } from "./Connectors.ts"
import {
  AssertionForbidden,
  AssertionInvalid,
  AssertionReplayed,
  AssertionUnauthenticated,
  IdleWakeStorageUnavailable,
  IdleWakeUnavailable
} from "./Domain.ts"
import { DrainGate } from "./DrainGate.ts"
import { DrainRequests } from "./DrainRequests.ts"
import { challengeOf } from "./Fingerprint.ts"
import { IdleWakeSettingsTag, type TenantSettings } from "./IdleWakeConfig.ts"
import { BUILT_IN, ingressBlockers } from "./Ingress.ts"
import { KEY_READ_LIMIT, projectKeys } from "./KeyProjection.ts"
import { type LocalBlocker, LocalWork } from "./LocalWork.ts"
import { PendingWork } from "./PendingWork.ts"
import {
  type Blocker,
  type BlockerCode,
  type Bytes32,
  decodeCapability,
  DRAIN_READ_ACTION,
  DrainAssertion,
  type DrainReport,
  GITHUB_BROKER_PROFILE,
  type HoldState,
  type IncomingProof,
  type IncomingWakeCapability,
  type Instant,
  PROFILE_ROUTES,
  ProfileName,
  REPORT_TYPE,
  signObject,
  SUPPORTED_ASSERTION_VERSIONS,
  TENANT_API_PROFILE,
  verifyObject
} from "./Protocol.ts"

// DrainAssertion is closed by its own annotations: an unknown member is refused whatever the options.
const decodeAssertion = Schema.decodeUnknownEither(DrainAssertion)

/** Initial proofs kept per idle hold, so a final read can tell its proof changed; a few cycles are plenty. */
const REMEMBERED_CYCLES = 16

export interface Observation {
  readonly blockers: ReadonlyArray<Blocker>
  readonly profiles: IncomingProof["profiles"]
}

// Stryker disable next-line StringLiteral: diagnostic fields of an error that leaves only as 503 storage-unavailable (the cause is logged where it happened)
const snapshotFailure = { operation: "drainSnapshot", sqlstate: "unknown" }

const storageFailure = (error: unknown) =>
  error instanceof IdleWakeStorageUnavailable ? error : new IdleWakeStorageUnavailable(snapshotFailure)

/**
 * The tenant side of a drain read (spec 001). In order: the assertion's closed shape and version, the cloud signer's
 * key and signature, stack, action, audience and expiry, then the one-use request id, recorded and committed; only
 * then the capability's closed shape. A final read takes the idle hold before it looks (so nothing new starts while
 * it does), keeps it only if it reports idle, and the report is signed with this stack's report key.
 */
export class TenantDrain extends Effect.Service<TenantDrain>()("@delivery/idle-wake/TenantDrain", {
  effect: Effect.gen(function* () {
    const settings = yield* IdleWakeSettingsTag
    const requests = yield* DrainRequests
    const identity = yield* Identity
    const connectors = yield* Connectors
    const localWork = yield* LocalWork
    const gate = yield* DrainGate
    const pendingWork = yield* PendingWork
    const sql = yield* SqlClient.SqlClient
    const initialProofs = new Map<string, string>()

    /** Everything read from the database in one REPEATABLE READ, READ ONLY snapshot. */
    const snapshot = (withKeys: boolean) =>
      sql.withTransaction(
        Effect.gen(function* () {
          yield* sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`
          // Stryker disable next-line ArrayDeclaration: without the profile the keys are never projected, so what stands here is never read
          const keys = withKeys ? yield* identity.activeApiKeyMaterial(KEY_READ_LIMIT) : []
          const devices = yield* identity.hasActiveDeviceCredential()
          const state = yield* connectors.snapshot
          const pending = yield* Effect.forEach(pendingWork, (probe) => Effect.map(probe.pending, (has) => (has ? [probe.family] : [])))
          return { keys, devices, state, pending: pending.flat() }
        })
      ).pipe(Effect.mapError(storageFailure))

    /** What a read looks at, at one instant: the local-work probe and the database snapshot. */
    const look = (withKeys: boolean) =>
      Effect.gen(function* () {
        const local = yield* localWork.probe
        const read = yield* snapshot(withKeys)
        const now = new Date(yield* Clock.currentTimeMillis)
        return { local, ...read, now }
      })
    type Look = Effect.Effect.Success<ReturnType<typeof look>>

    const requestedProfiles = (capability: Option.Option<IncomingWakeCapability>) =>
      new Set<ProfileName>(Option.toArray(capability).flatMap((c) => c.profiles.map((p) => p.profile)))

    /** The blockers and the proofs of the requested profiles, from one look. */
    const assess = (seen: Look, capability: Option.Option<IncomingWakeCapability>, challenge: Bytes32) => {
      const requested = requestedProfiles(capability)
      const broker = assessBroker(seen.state, { configured: settings.ingress.includes("github-broker-events"), now: seen.now })

      const entries: Array<LocalBlocker> = [...seen.local]
      const proven = new Set<ProfileName>()
      const profiles: { -readonly [K in keyof IncomingProof["profiles"]]: IncomingProof["profiles"][K] } = {}
      if (requested.has(TENANT_API_PROFILE)) {
        const projection = projectKeys(challenge, seen.keys)
        if (projection._tag === "Projected") {
          profiles[TENANT_API_PROFILE] = projection.proof
          proven.add(TENANT_API_PROFILE)
        } else {
          entries.push({ code: projection.blocker, count: projection.count })
        }
      }
      if (requested.has(GITHUB_BROKER_PROFILE) && broker.proof !== null) {
        profiles[GITHUB_BROKER_PROFILE] = broker.proof
        proven.add(GITHUB_BROKER_PROFILE)
      }
      // Without the profile the whole transport blocks below; personal MCP connections block in every version.
      for (const blocker of broker.blockers) {
        if (requested.has(GITHUB_BROKER_PROFILE) || blocker.code === "github-personal-mcp") entries.push(blocker)
      }
      const active = [
        ...BUILT_IN,
        ...settings.ingress,
        ...(seen.devices ? ["controlplane-envelopes"] : []),
        ...(broker.active ? ["github-broker-events"] : [])
      ]
      for (const blocker of ingressBlockers(active, proven)) entries.push({ code: blocker.code })
      if (seen.pending.length > 0) entries.push({ code: "work-pending", ids: seen.pending })
      return { entries, profiles }
    }

    /** The blockers and the proofs of the requested profiles, as of now: keys are read only when projected. */
    const observe = (capability: Option.Option<IncomingWakeCapability>, challenge: Bytes32) =>
      Effect.map(look(requestedProfiles(capability).has(TENANT_API_PROFILE)), (seen) => assess(seen, capability, challenge))

    const refuseUnauthenticated = (reason: AssertionUnauthenticated["reason"], correlationId: CorrelationId) =>
      Effect.fail(new AssertionUnauthenticated({ reason, correlationId }))
    const refuseForbidden = (reason: AssertionForbidden["reason"], correlationId: CorrelationId) =>
      Effect.fail(new AssertionForbidden({ reason, correlationId }))
    const refuseInvalid = (reason: AssertionInvalid["reason"], correlationId: CorrelationId) =>
      Effect.fail(new AssertionInvalid({ reason, correlationId }))
    const unavailable = (correlationId: CorrelationId) => () =>
      Effect.fail(new IdleWakeUnavailable({ reason: "storage-unavailable", correlationId }))

    const configured = (correlationId: CorrelationId) =>
      Option.match(settings.tenant, {
        onNone: () => Effect.fail(new IdleWakeUnavailable({ reason: "idle-wake-unconfigured", correlationId })),
        onSome: (tenant) => Effect.succeed(tenant)
      })

    const remember = (idleHold: string, proof: string) => {
      initialProofs.delete(idleHold)
      initialProofs.set(idleHold, proof)
      for (const oldest of initialProofs.keys()) {
        if (initialProofs.size <= REMEMBERED_CYCLES) break
        initialProofs.delete(oldest)
      }
    }

    const sign = (tenant: TenantSettings, report: object) => signObject(report, Redacted.value(tenant.reportKey)) as DrainReport

    const read = Effect.fn("TenantDrain.read")(function* (body: unknown, correlationId: CorrelationId) {
      const tenant = yield* configured(correlationId)
      const decoded = decodeAssertion(body)
      if (Either.isLeft(decoded)) return yield* refuseInvalid("assertion-malformed", correlationId)
      const assertion = decoded.right
      if (!(SUPPORTED_ASSERTION_VERSIONS as ReadonlyArray<number>).includes(assertion.version)) {
        return yield* refuseInvalid("assertion-version-unknown", correlationId)
      }
      const key = tenant.cloudKeys.get(assertion.keyId)
      if (key === undefined) return yield* refuseUnauthenticated("assertion-key-unknown", correlationId)
      // Over the body as received (a plain JSON object: the shape check passed), never over a re-encoding of it.
      if (!verifyObject(body as DrainAssertion, key)) return yield* refuseUnauthenticated("assertion-signature-invalid", correlationId)
      if (assertion.stack !== tenant.stack) return yield* refuseForbidden("assertion-wrong-stack", correlationId)
      if (assertion.action !== DRAIN_READ_ACTION) return yield* refuseForbidden("assertion-wrong-action", correlationId)
      if (assertion.audience !== tenant.audience) return yield* refuseForbidden("assertion-wrong-audience", correlationId)

      const now = yield* Clock.currentTimeMillis
      const issuedAt = Date.parse(assertion.issuedAt)
      const expiresAt = Date.parse(assertion.expiresAt)
      const lifetime = Duration.toMillis(tenant.maxAssertionLifetime)
      if (expiresAt <= issuedAt || expiresAt - issuedAt > lifetime) return yield* refuseUnauthenticated("assertion-lifetime-invalid", correlationId)
      if (issuedAt > now + Duration.toMillis(tenant.clockSkew)) return yield* refuseUnauthenticated("assertion-not-yet-valid", correlationId)
      if (expiresAt <= now) return yield* refuseUnauthenticated("assertion-expired", correlationId)

      const first = yield* requests.record(
        {
          requestId: assertion.requestId,
          stack: assertion.stack,
          phase: assertion.cycle.phase,
          keyId: assertion.keyId,
          expiresAt: new Date(expiresAt),
          receivedAt: new Date(now),
          correlationId
        },
        new Date(now - lifetime - Duration.toMillis(tenant.clockSkew))
      ).pipe(Effect.catchTag("IdleWakeStorageUnavailable", unavailable(correlationId)))
      if (!first) return yield* Effect.fail(new AssertionReplayed({ reason: "assertion-replayed", correlationId }))

      let capability = Option.none<IncomingWakeCapability>()
      if (assertion.idleCapabilities !== undefined) {
        if (assertion.version !== 2) return yield* refuseInvalid("capability-requires-version-2", correlationId)
        const decodedCapability = decodeCapability(assertion.idleCapabilities)
        if (Either.isLeft(decodedCapability)) return yield* refuseInvalid(decodedCapability.left, correlationId)
        capability = Option.some(decodedCapability.right)
      }
      const { idleHold, phase, holdSeconds } = assertion.cycle
      if (holdSeconds * 1000 > Duration.toMillis(tenant.maxHold)) return yield* refuseInvalid("hold-too-long", correlationId)

      let hold: HoldState = "none"
      if (phase === "final") yield* gate.take(idleHold, Duration.seconds(holdSeconds))
      if (phase === "release" && (yield* gate.release(idleHold))) hold = "released"

      const challenge = challengeOf(tenant.stack, idleHold)
      const { entries, profiles } = yield* observe(capability, challenge).pipe(
        // A read that could not look must not leave the stack refusing work.
        Effect.onError(() => (phase === "final" ? gate.release(idleHold) : Effect.void)),
        Effect.catchTag("IdleWakeStorageUnavailable", unavailable(correlationId))
      )

      const proof: IncomingProof | undefined = Option.match(capability, {
        onNone: () => undefined,
        onSome: (requested) => ({ version: 1, stack: tenant.stack, challenge, capability: requested, profiles })
      })
      if (proof !== undefined) {
        const text = Either.getOrThrow(Canonical.canonicalString(proof))
        if (phase === "initial") remember(idleHold, text)
        const initial = initialProofs.get(idleHold)
        // Any later read of the cycle (the final one, a release) says so when its proof is not the initial one.
        if (initial !== undefined && initial !== text) entries.push({ code: "incoming-proof-changed" })
      }
      const blockers = groupBlockers(entries)
      const idle = blockers.length === 0

      if (phase === "final") {
        if (idle) hold = "held"
        else {
          yield* gate.release(idleHold)
          hold = "released"
        }
      }

      // Members in reading order; the signature covers their RFC 8785 form, whatever the order.
      const observedAt = new Date(yield* Clock.currentTimeMillis).toISOString() as Instant
      const head = { stack: tenant.stack, requestId: assertion.requestId, phase, observedAt, idle }
      const signer = { keyId: tenant.reportKeyId }
      if (assertion.version === 1) {
        const codes = [...new Set(blockers.map((blocker) => blocker.code))] as Array<BlockerCode>
        return sign(tenant, { type: REPORT_TYPE, version: 1, ...head, blockers: codes, ...signer })
      }
      if (proof === undefined) return sign(tenant, { type: REPORT_TYPE, version: 2, ...head, blockers, hold, ...signer })
      return sign(tenant, { type: REPORT_TYPE, version: 3, ...head, blockers, hold, incomingWake: proof, ...signer })
    })

    /**
     * What a drain read would report now, for operators: the conservative blockers (a version 2 read) and those of a
     * version 3 read asking for both profiles (with a throwaway challenge), and the idle hold. Takes no hold and
     * records nothing.
     */
    const status = Effect.fn("TenantDrain.status")(function* () {
      const everything: IncomingWakeCapability = {
        version: 1,
        // Stryker disable next-line ArrayDeclaration: a read looks at the requested profiles only, never at their routes
        profiles: ProfileName.literals.map((profile) => ({ profile, routes: [...PROFILE_ROUTES[profile]] }))
      }
      const challenge = randomBytes(32).toString("base64url") as Bytes32
      // One look serves both answers.
      const seen = yield* look(true)
      const conservative = assess(seen, Option.none(), challenge)
      const withCapability = assess(seen, Option.some(everything), challenge)
      const current = yield* gate.current
      return {
        configured: Option.isSome(settings.tenant),
        stack: Option.getOrNull(Option.map(settings.tenant, (tenant) => tenant.stack)),
        conservative: groupBlockers(conservative.entries),
        withCapability: groupBlockers(withCapability.entries),
        hold: Option.isSome(current) ? "held" as const : "none" as const
      }
    })

    return { read, status } as const
  })
}) {}
