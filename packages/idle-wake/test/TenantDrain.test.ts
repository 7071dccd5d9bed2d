import { ApiKeyName, DeviceId, Email, type IdentityConflict, Permission, presentedKeyMaterial, TenantId } from "@delivery/identity"
import { PgClusterFromVitest } from "@delivery/testing/vitest"
import { expect, layer } from "@effect/vitest"
import { connect } from "@delivery/testing"
import type { SqlClient } from "@effect/sql"
import { Duration, Effect, Either, Option, Redacted, Schema } from "effect"
import { generateKeyPairSync, randomBytes } from "node:crypto"
import { challengeOf, compareForStop, presentedFingerprint } from "../src/Fingerprint.ts"
import { type Bytes32, DrainReport, type ReportV3, verifyObject } from "../src/Protocol.ts"
import {
  API_ONLY,
  assertion,
  BROKER_ONLY,
  type AssertionOptions,
  AUDIENCE,
  BOTH,
  clockAt,
  correlationId,
  newIdleHold,
  report,
  STACK,
  tenantSettings,
  tenantWorld,
  withCapability
} from "./support/Tenant.ts"

// Spec 001, the tenant side of a drain read, through TenantDrain on real PostgreSQL (a database per test: the key
// projection reads every key of the database) with real Ed25519 assertions signed by a cloud key.

type World = Effect.Effect.Success<ReturnType<typeof tenantWorld>>

const read = (world: World, options: AssertionOptions = {}) => world.drain.read(assertion(options), correlationId())
const refusal = (world: World, body: unknown) =>
  Effect.flip(world.drain.read(body, correlationId())).pipe(Effect.map((error) => ({ tag: error._tag, reason: error.reason })))

const decodeReport = Schema.decodeUnknownSync(DrainReport, { onExcessProperty: "error" })

/** A tenant with one account; keys are issued through Identity as the provisioning routes do. */
const account = (world: World, name: string) =>
  Effect.gen(function* () {
    const tenant = TenantId.make(name)
    yield* world.identity.createTenant(tenant).pipe(Effect.catchTag("IdentityConflict", (_: IdentityConflict) => Effect.void))
    const id = yield* world.identity.createAccount({ tenant, email: Schema.decodeSync(Email)(`ops-${randomBytes(3).toString("hex")}@${name}.example`) })
    return { tenant, account: id }
  })

type Owner = Effect.Effect.Success<ReturnType<typeof account>>

const issueKey = (world: World, owner: Owner, kind: "board" | "agent" = "board", expiresInSeconds?: number) =>
  world.identity.issueApiKey({
    tenant: owner.tenant,
    account: owner.account,
    kind,
    name: ApiKeyName.make("k"),
    permissions: [Permission.make("receipts:write")],
    ...(expiresInSeconds === undefined ? {} : { expiresIn: Duration.seconds(expiresInSeconds) })
  })

layer(PgClusterFromVitest, { excludeTestServices: true, timeout: 120_000 })("drain reads (spec 001, tenant side)", (it) => {
  it.scoped("a signed read is answered by a signed version 2 report; with nothing configured the tenant API blocks sleep", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const answer = yield* read(world, { version: 2 })
      expect(verifyObject(answer, report.publicKey)).toBe(true)
      expect(decodeReport(answer)).toMatchObject({ version: 2, stack: STACK, idle: false, hold: "none", blockers: [{ code: "ingress-tenant-api-http" }] })
      const v1 = yield* read(world, { version: 1 })
      expect(v1).toMatchObject({ version: 1, idle: false, blockers: ["ingress-tenant-api-http"] })
      expect(verifyObject(v1, report.publicKey)).toBe(true)
    }))

  it.scoped("a one-use request id is recorded durably: a replay is refused whatever else it says", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const first = assertion({ requestId: "replay-0000000000001" })
      yield* world.drain.read(first, correlationId())
      expect(yield* refusal(world, first)).toEqual({ tag: "AssertionReplayed", reason: "assertion-replayed" })
      // Another read signed later with the same id is a replay too.
      expect(yield* refusal(world, assertion({ requestId: "replay-0000000000001", phase: "final" }))).toEqual({ tag: "AssertionReplayed", reason: "assertion-replayed" })
      const rows = yield* world.sql<{ request_id: string; phase: string }>`SELECT request_id, phase FROM idle_wake_drain_requests`
      expect(rows).toEqual([{ request_id: "replay-0000000000001", phase: "initial" }])
      // A second process on the same database sees the same record.
      const other = yield* tenantWorld()
      expect(other.db.name).not.toBe(world.db.name)
    }))

  it.scoped("expired, not yet valid and too long-lived assertions are refused before their request id is recorded", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const now = Date.now()
      const cases: ReadonlyArray<[AssertionOptions, string]> = [
        [{ issuedAt: new Date(now - 120_000), expiresAt: new Date(now - 1) }, "assertion-expired"],
        [{ issuedAt: new Date(now + 60_000), expiresAt: new Date(now + 120_000) }, "assertion-not-yet-valid"],
        [{ issuedAt: new Date(now), expiresAt: new Date(now + 6 * 60_000) }, "assertion-lifetime-invalid"],
        [{ issuedAt: new Date(now), expiresAt: new Date(now) }, "assertion-lifetime-invalid"]
      ]
      for (const [options, reason] of cases) {
        expect(yield* refusal(world, assertion(options))).toEqual({ tag: "AssertionUnauthenticated", reason })
      }
      // Within the clock skew is fine.
      yield* read(world, { issuedAt: new Date(now + 20_000), expiresAt: new Date(now + 80_000) })
      expect((yield* world.sql`SELECT 1 FROM idle_wake_drain_requests`).length).toBe(1)
    }))

  it.scoped("wrong stack, action and audience are refused; so are an unknown key, a foreign signature and a changed member", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      expect(yield* refusal(world, assertion({ stack: "stack-other" }))).toEqual({ tag: "AssertionForbidden", reason: "assertion-wrong-stack" })
      expect(yield* refusal(world, assertion({ action: "task-drain:write" }))).toEqual({ tag: "AssertionForbidden", reason: "assertion-wrong-action" })
      expect(yield* refusal(world, assertion({ audience: `${AUDIENCE}-x` }))).toEqual({ tag: "AssertionForbidden", reason: "assertion-wrong-audience" })
      expect(yield* refusal(world, assertion({ keyId: "cloud-9" }))).toEqual({ tag: "AssertionUnauthenticated", reason: "assertion-key-unknown" })
      const forged = assertion({ signWith: generateKeyPairSync("ed25519").privateKey })
      expect(yield* refusal(world, forged)).toEqual({ tag: "AssertionUnauthenticated", reason: "assertion-signature-invalid" })
      // A capability added after signing (the only way a capability can be "installed" without the signer).
      const plain = assertion()
      expect(yield* refusal(world, { ...plain, idleCapabilities: withCapability(BOTH) })).toEqual({ tag: "AssertionUnauthenticated", reason: "assertion-signature-invalid" })
      expect(yield* refusal(world, { ...plain, cycle: { ...plain.cycle, phase: "final" } })).toEqual({ tag: "AssertionUnauthenticated", reason: "assertion-signature-invalid" })
      expect((yield* world.sql`SELECT 1 FROM idle_wake_drain_requests`).length).toBe(0)
    }))

  it.scoped("unknown versions and malformed assertions fail closed", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      expect(yield* refusal(world, assertion({ version: 3 }))).toEqual({ tag: "AssertionInvalid", reason: "assertion-version-unknown" })
      const good = assertion()
      const { cycle: _, ...withoutCycle } = good
      for (const body of [null, [], "x", {}, withoutCycle, { ...good, extra: 1 }, { ...good, cycle: { ...good.cycle, extra: 1 } }, { ...good, type: "controlplane/v1" }]) {
        expect(yield* refusal(world, body)).toEqual({ tag: "AssertionInvalid", reason: "assertion-malformed" })
      }
    }))

  it.scoped("the capability's closed shape is checked after the request id; a bad one consumes it", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const cases: ReadonlyArray<[unknown, number, string]> = [
        [withCapability(API_ONLY), 1, "capability-requires-version-2"],
        [{ incomingWake: { ...API_ONLY, version: 2 } }, 2, "capability-version-unknown"],
        [{ incomingWake: { version: 1, profiles: [{ profile: "slack-events-v1", routes: ["api"] }] } }, 2, "capability-profile-unknown"],
        [{ incomingWake: { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: ["mcp"] }] } }, 2, "capability-route-unknown"],
        [{ incomingWake: API_ONLY, other: {} }, 2, "capability-malformed"]
      ]
      for (const [capability, version, reason] of cases) {
        const body = assertion({ capability, version })
        expect(yield* refusal(world, body)).toEqual({ tag: "AssertionInvalid", reason })
        expect(yield* refusal(world, body)).toEqual({ tag: "AssertionReplayed", reason: "assertion-replayed" })
      }
      expect(yield* refusal(world, assertion({ phase: "final", holdSeconds: 121 }))).toEqual({ tag: "AssertionInvalid", reason: "hold-too-long" })
      // Exactly IDLE_WAKE_HOLD_MAX is allowed.
      expect(yield* read(world, { phase: "final", holdSeconds: 120 })).toMatchObject({ phase: "final" })
    }))

  it.scoped("without IDLE_WAKE_STACK every read is refused as unconfigured", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld({ tenant: Option.none() })
      expect(yield* refusal(world, assertion())).toEqual({ tag: "IdleWakeUnavailable", reason: "idle-wake-unconfigured" })
    }))

  it.scoped("tenant-api-http-v2: the active board and agent keys as per-cycle fingerprints the cloud recomputes from the token; expiry carried", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const owner = yield* account(world, "acme")
      const board = yield* issueKey(world, owner, "board", 3600)
      const agent = yield* issueKey(world, owner, "agent")
      const revoked = yield* issueKey(world, owner, "agent")
      yield* world.identity.revokeApiKey(owner.tenant, revoked.id)
      const disabled = yield* account(world, "acme")
      yield* issueKey(world, disabled, "board")
      yield* world.identity.setAccountEnabled(disabled.tenant, disabled.account, false)

      const idleHold = newIdleHold()
      const answer = (yield* read(world, { capability: withCapability(API_ONLY), idleHold })) as ReportV3
      expect(verifyObject(answer, report.publicKey)).toBe(true)
      expect(answer.version).toBe(3)
      expect(answer.idle).toBe(true)
      expect(answer.blockers).toEqual([])
      // An initial read never takes the hold, idle or not.
      expect(answer.hold).toBe("none")
      expect((yield* world.gate.admit)._tag).toBe("Admitted")
      yield* world.gate.leave
      const challenge = challengeOf(STACK, idleHold)
      expect(answer.incomingWake).toMatchObject({ version: 1, stack: STACK, challenge, capability: API_ONLY })
      const keys = answer.incomingWake.profiles["tenant-api-http-v2"]!.keys
      const expected = [board, agent].map((issued) => ({
        fingerprint: presentedFingerprint(challenge, Option.getOrThrow(presentedKeyMaterial(Redacted.value(issued.token)))),
        kind: issued === board ? "board" : "agent",
        expiresAt: issued.expiresAt === null ? null : issued.expiresAt.toISOString()
      }))
      expect([...keys]).toEqual(expected.sort((a, b) => (a.fingerprint < b.fingerprint ? -1 : 1)))
      // Raw keys and stored hashes never leave the tenant: neither appears anywhere in the report.
      const text = JSON.stringify(answer)
      for (const issued of [board, agent]) {
        const material = Option.getOrThrow(presentedKeyMaterial(Redacted.value(issued.token)))
        // The secret is what follows the second `_` (it may itself contain `_`).
        expect(text).not.toContain(Redacted.value(issued.token).split("_").slice(2).join("_"))
        expect(text).not.toContain(Buffer.from(material.secretHash).toString("base64url"))
        expect(text).not.toContain(Buffer.from(material.secretHash).toString("hex"))
        expect(text).not.toContain(material.lookupId)
      }
    }))

  it.scoped("1,000 active keys are projected and 1,001 fail closed as an overflow", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const owner = yield* account(world, "bulk")
      // Fixture: 1,000 keys written directly (the issuing route would take minutes); their rows are what Identity writes.
      yield* world.sql`
        INSERT INTO identity_api_keys (lookup_id, tenant_id, account_id, kind, name, secret_hash)
        SELECT lpad(to_hex(n), 24, '0'), ${owner.tenant}, ${owner.account}, 'agent', 'bulk', sha256(n::text::bytea)
        FROM generate_series(1, 1000) AS n`
      const full = (yield* read(world, { capability: withCapability(API_ONLY) })) as ReportV3
      expect(full.idle).toBe(true)
      expect(full.incomingWake.profiles["tenant-api-http-v2"]!.keys).toHaveLength(1000)
      yield* issueKey(world, owner, "board")
      const over = (yield* read(world, { capability: withCapability(API_ONLY) })) as ReportV3
      expect(over.idle).toBe(false)
      expect(over.blockers).toEqual([{ code: "api-key-projection-overflow", count: 1001 }, { code: "ingress-tenant-api-http" }])
      expect(over.incomingWake.profiles["tenant-api-http-v2"]).toBeUndefined()
    }))

  it.scoped("a key revoked or created between the initial and the final read changes the receipt: the stop is refused", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const owner = yield* account(world, "acme")
      const kept = yield* issueKey(world, owner)
      const revoked = yield* issueKey(world, owner)

      const cycle = (change: Effect.Effect<unknown, unknown>) =>
        Effect.gen(function* () {
          const idleHold = newIdleHold()
          const initial = (yield* read(world, { capability: withCapability(API_ONLY), idleHold })) as ReportV3
          yield* change
          const final = (yield* read(world, { capability: withCapability(API_ONLY), idleHold, phase: "final" })) as ReportV3
          return { idleHold, initial, final }
        })

      const unchanged = yield* cycle(Effect.void)
      expect(unchanged.final).toMatchObject({ idle: true, hold: "held" })
      expect(compareForStop({ stack: STACK, requested: API_ONLY, ...unchanged })._tag).toBe("Right")
      yield* world.gate.release(unchanged.idleHold)

      const revocation = yield* cycle(
        world.identity.revokeApiKey(owner.tenant, revoked.id)
      )
      expect(compareForStop({ stack: STACK, requested: API_ONLY, ...revocation })).toEqual(Either.left("report-not-idle"))
      // The tenant itself refuses to hold: its final proof is not the initial one.
      expect(revocation.final).toMatchObject({ idle: false, hold: "released", blockers: [{ code: "incoming-proof-changed" }] })
      expect(compareForStop({ stack: STACK, idleHold: revocation.idleHold, requested: API_ONLY, initial: revocation.initial, final: { ...revocation.final, idle: true } })).toEqual(Either.left("proof-changed"))
      expect((yield* world.gate.admit)._tag).toBe("Admitted")
      yield* world.gate.leave

      const creation = yield* cycle(issueKey(world, owner, "agent"))
      expect(creation.final).toMatchObject({ idle: false, blockers: [{ code: "incoming-proof-changed" }] })
      expect(creation.final.incomingWake.profiles["tenant-api-http-v2"]!.keys).toHaveLength(2)
      expect(kept.id).toBeDefined()
    }))

  it.scoped("a GitHub binding changed between the initial and the final read changes the receipt: the stop is refused", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const by = { actor: "operator:environment", correlationId: correlationId() }
      const id = (text: string) => text as never
      yield* world.connectors.enrollInstance(id("connector-1"), by)
      yield* world.connectors.addConnection({ id: id("conn-1"), tenant: TenantId.make("acme"), kind: "broker", owner: id("acct-1") }, by)
      for (const n of ["1", "2"]) {
        yield* world.connectors.startBotRegistration({ id: id(`reg-${n}`), connection: id("conn-1"), appId: 1001 }, by)
        yield* world.connectors.completeBotRegistration({ id: id(`reg-${n}`), installationId: 2000 + Number(n) }, by)
        yield* world.connectors.addEndpoint({ id: id(`endpoint-${n}`), channel: id(`channel-${n}`), connection: id("conn-1"), registration: id(`reg-${n}`) }, by)
      }
      const capability = withCapability(BROKER_ONLY)
      const idleHold = newIdleHold()
      const initial = (yield* read(world, { capability, idleHold })) as ReportV3
      expect(initial.incomingWake.profiles["github-broker-events-v1"]).toMatchObject({ connectorInstance: "connector-1", bindingCount: 2 })
      // The ordinary removal writer: retained history, so still provable, but no longer the same bindings.
      yield* world.connectors.removeEndpoint(id("endpoint-2"), by)
      const final = (yield* read(world, { capability, idleHold, phase: "final" })) as ReportV3
      expect(final.incomingWake.profiles["github-broker-events-v1"]).toMatchObject({ connectorInstance: "connector-1", bindingCount: 1 })
      // A release of the cycle says so too.
      const release = yield* read(world, { capability, idleHold, phase: "release" })
      expect(release.blockers.map((b) => (b as { code: string }).code)).toContain("incoming-proof-changed")
      expect(final).toMatchObject({ idle: false, hold: "released" })
      expect(final.blockers.map((b) => (b as { code: string }).code)).toContain("incoming-proof-changed")
      expect(compareForStop({ stack: STACK, idleHold, requested: BROKER_ONLY, initial: { ...initial, idle: true }, final: { ...final, idle: true } })).toEqual(Either.left("proof-changed"))
    }))

  it.scoped("a final read that reports idle takes the idle hold (new requests refused) until it ends or is released", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const idleHold = newIdleHold()
      const final = (yield* read(world, { capability: withCapability(API_ONLY), idleHold, phase: "final", holdSeconds: 30 })) as ReportV3
      expect(final).toMatchObject({ phase: "final", idle: true, hold: "held" })
      const refused = yield* world.gate.admit
      expect(refused._tag).toBe("Draining")
      if (refused._tag === "Draining") expect(refused.retryAfterSeconds).toBeLessThanOrEqual(30)
      // A release for another cycle changes nothing; this cycle's release ends the hold.
      const other = yield* read(world, { phase: "release", idleHold: newIdleHold() })
      expect(other).toMatchObject({ hold: "none" })
      expect((yield* world.gate.admit)._tag).toBe("Draining")
      const released = yield* read(world, { phase: "release", idleHold })
      expect(released).toMatchObject({ phase: "release", hold: "released" })
      expect((yield* world.gate.admit)._tag).toBe("Admitted")
      yield* world.gate.leave
    }))

  it.scoped("a final read that finds blockers releases the hold at once; a request in flight is one", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      yield* world.gate.admit
      const idleHold = newIdleHold()
      const final = yield* read(world, { capability: withCapability(API_ONLY), idleHold, phase: "final" })
      expect(final).toMatchObject({ idle: false, hold: "released", blockers: [{ code: "requests-in-flight", count: 1 }] })
      expect((yield* world.gate.admit)._tag).toBe("Admitted")
      yield* world.gate.leave
      yield* world.gate.leave
    }))

  it.scoped("the local API activity hold and the workers block sleep through the local-work probe", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      yield* world.activity.observe({ _tag: "ApiKey", tenant: "t", account: "a", keyId: "k", kind: "agent", permissions: [] } as never, 200)
      yield* world.workers.register("outbox")
      const answer = yield* read(world, { capability: withCapability(API_ONLY) })
      expect(answer.blockers).toEqual([{ code: "local-api-activity" }, { code: "runtime-initializing", ids: ["workers/outbox"], count: 1 }])
    }))

  it.scoped("configured ingress transports block in every version; device credentials make the control-plane inbox an ingress", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld({ ingress: ["slack-webhook", "mcp-http-outbound", "legacy-alarms"] })
      const v3 = yield* read(world, { capability: withCapability(BOTH) })
      expect(v3.blockers).toEqual([{ code: "ingress-slack-webhook" }, { code: "legacy-alarm-with-ingress" }])
      const owner = yield* account(world, "devices")
      yield* world.identity.issueDeviceCredential({ tenant: owner.tenant, account: owner.account, device: DeviceId.make("d-1") })
      const after = yield* read(world, { capability: withCapability(BOTH) })
      expect(after.blockers.map((b) => (b as { code: string }).code)).toEqual(["ingress-controlplane-envelopes", "ingress-slack-webhook", "legacy-alarm-with-ingress"])
    }))

  it.scoped("unfinished durable work of any family blocks sleep", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      world.switches.pending.add("outbox")
      world.switches.pending.add("receipts")
      const answer = yield* read(world, { capability: withCapability(API_ONLY) })
      expect(answer.blockers).toEqual([{ code: "work-pending", ids: ["outbox", "receipts"], count: 2 }])
    }))

  it.scoped("validity bounds are exact: a lifetime of exactly the maximum, issuedAt exactly at the skew, expiresAt exactly now", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const at = Date.parse("2026-12-01T10:00:00.000Z")
      const atTime = (options: AssertionOptions) => Effect.withClock(world.drain.read(assertion(options), correlationId()), clockAt(at))
      const refusedAt = (options: AssertionOptions) => Effect.map(Effect.flip(atTime(options)), (error) => error.reason)
      yield* atTime({ issuedAt: new Date(at - 1_000), expiresAt: new Date(at - 1_000 + 300_000) })
      expect(yield* refusedAt({ issuedAt: new Date(at - 1_000), expiresAt: new Date(at + 300_000) })).toBe("assertion-lifetime-invalid")
      yield* atTime({ issuedAt: new Date(at + 30_000), expiresAt: new Date(at + 60_000) })
      expect(yield* refusedAt({ issuedAt: new Date(at + 30_001), expiresAt: new Date(at + 60_000) })).toBe("assertion-not-yet-valid")
      yield* atTime({ issuedAt: new Date(at - 60_000), expiresAt: new Date(at + 1) })
      expect(yield* refusedAt({ issuedAt: new Date(at - 60_000), expiresAt: new Date(at) })).toBe("assertion-expired")
    }))

  it.scoped("request ids are forgotten only once their assertion expired longer ago than the longest lifetime and the skew", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const at = Date.parse("2026-12-01T10:00:00.000Z")
      const horizon = at - 300_000 - 30_000
      // Fixture: ids of earlier reads, as recorded.
      for (const [id, expires] of [["forget-0000000000001", horizon - 1_000], ["keep-00000000000001", horizon + 1_000]] as const) {
        yield* world.sql`
          INSERT INTO idle_wake_drain_requests (request_id, stack, phase, key_id, expires_at, received_at, correlation_id)
          VALUES (${id}, ${STACK}, 'initial', 'cloud-1', ${new Date(expires)}, ${new Date(expires - 60_000)}, ${"0".repeat(32)})`
      }
      yield* Effect.withClock(world.drain.read(assertion({ requestId: "current-00000000001", issuedAt: new Date(at), expiresAt: new Date(at + 60_000) }), correlationId()), clockAt(at))
      const left = yield* world.sql<{ request_id: string }>`SELECT request_id FROM idle_wake_drain_requests ORDER BY request_id`
      expect(left.map((row) => row.request_id)).toEqual(["current-00000000001", "keep-00000000000001"])
    }))

  it.scoped("a request id that cannot be recorded is 503 storage-unavailable, and nothing is read or held", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      yield* world.sql`ALTER TABLE idle_wake_drain_requests RENAME TO idle_wake_drain_requests_gone`
      expect(yield* refusal(world, assertion({ phase: "final" }))).toEqual({ tag: "IdleWakeUnavailable", reason: "storage-unavailable" })
      expect((yield* world.gate.admit)._tag).toBe("Admitted")
      yield* world.gate.leave
      yield* world.sql`ALTER TABLE idle_wake_drain_requests_gone RENAME TO idle_wake_drain_requests`
    }))

  it.scoped("an initial read that fails leaves a hold taken by the cycle's final read in place", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const idleHold = newIdleHold()
      expect(yield* read(world, { capability: withCapability(API_ONLY), idleHold, phase: "final" })).toMatchObject({ hold: "held" })
      yield* world.sql`ALTER TABLE identity_api_keys RENAME TO identity_api_keys_gone`
      expect(yield* refusal(world, assertion({ capability: withCapability(API_ONLY), idleHold }))).toEqual({ tag: "IdleWakeUnavailable", reason: "storage-unavailable" })
      expect((yield* world.gate.admit)._tag).toBe("Draining")
      yield* world.sql`ALTER TABLE identity_api_keys_gone RENAME TO identity_api_keys`
    }))

  it.scoped("the snapshot is read-only and repeatable: a write inside it fails the read; a commit from outside is not seen", () =>
    Effect.gen(function* () {
      const seen: Array<number> = []
      const writer = yield* tenantWorld({
        probes: (sql) => [{ family: "writer", pending: Effect.as(sql`DELETE FROM idle_wake_drain_requests`, false) }]
      })
      expect(yield* refusal(writer, assertion({ capability: withCapability(API_ONLY) }))).toEqual({ tag: "IdleWakeUnavailable", reason: "storage-unavailable" })

      let outside: SqlClient.SqlClient | undefined
      const world = yield* tenantWorld({
        probes: (sql) => [{
          family: "observer",
          pending: Effect.gen(function* () {
            const count = () => Effect.map(sql<{ n: number }>`SELECT count(*)::int AS n FROM identity_api_keys`, (rows) => rows[0]!.n)
            seen.push(yield* count())
            // Another connection commits a new key while the snapshot is open. Run on a fiber of its own: inside this one,
            // any SqlClient would join the snapshot's transaction.
            yield* Effect.promise(() =>
              Effect.runPromise(outside!`
                INSERT INTO identity_api_keys (lookup_id, tenant_id, account_id, kind, name, secret_hash)
                SELECT ${randomBytes(12).toString("hex")}, tenant_id, id, 'board', 'late', sha256('late'::bytea) FROM identity_accounts LIMIT 1`))
            seen.push(yield* count())
            return false
          })
        }]
      })
      outside = yield* connect(world.db.url, { maxConnections: 1 })
      const owner = yield* account(world, "acme")
      yield* issueKey(world, owner)
      const answer = (yield* read(world, { capability: withCapability(API_ONLY) })) as ReportV3
      expect(seen).toEqual([1, 1])
      expect(answer.incomingWake.profiles["tenant-api-http-v2"]!.keys).toHaveLength(1)
    }))

  it.scoped("github-broker-events configured without connector state: a requested proof has no instance to bind (fail closed)", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld({ ingress: ["github-broker-events"] })
      const answer = (yield* read(world, { capability: withCapability(BROKER_ONLY) })) as ReportV3
      expect(answer.blockers.map((b) => (b as { code: string }).code)).toEqual(["github-connector-missing", "ingress-github-broker-events", "ingress-tenant-api-http"])
      expect(answer.incomingWake.profiles["github-broker-events-v1"]).toBeUndefined()
    }))

  it.scoped("without the profile, broken binding state is the transport's one blocker; personal MCP connections block in every version", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const by = { actor: "operator:environment", correlationId: correlationId() }
      const id = (text: string) => text as never
      yield* world.connectors.addConnection({ id: id("conn-1"), tenant: TenantId.make("acme"), kind: "broker", owner: id("acct-1") }, by)
      yield* world.connectors.startBotRegistration({ id: id("reg-1"), connection: id("conn-1"), appId: 1001 }, by)
      const v2 = yield* read(world, { version: 2 })
      expect(v2.blockers).toEqual([{ code: "ingress-github-broker-events" }, { code: "ingress-tenant-api-http" }])
      yield* world.connectors.addConnection({ id: id("mcp-1"), tenant: TenantId.make("acme"), kind: "personal-mcp", owner: id("acct-1") }, by)
      const again = yield* read(world, { version: 2 })
      expect(again.blockers).toContainEqual({ code: "github-personal-mcp", ids: ["mcp-1"], count: 1 })
      expect(yield* read(world, { version: 1 })).toMatchObject({ blockers: expect.arrayContaining(["github-personal-mcp"]) })
    }))

  it.scoped("the tenant keeps the initial proofs of the last 16 cycles: older ones are forgotten, a repeated initial read renews one", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const owner = yield* account(world, "acme")
      yield* issueKey(world, owner)
      const capability = withCapability(API_ONLY)
      const initial = (idleHold: Bytes32) => read(world, { capability, idleHold })
      const changedOnFinal = (idleHold: Bytes32) =>
        Effect.map(read(world, { capability, idleHold, phase: "final" }), (report) =>
          report.blockers.some((b) => (b as { code: string }).code === "incoming-proof-changed"))

      // 16 cycles fill the memory; the oldest is then read again, which makes it the newest.
      const renewed = newIdleHold()
      const others = Array.from({ length: 16 }, () => newIdleHold())
      yield* initial(renewed)
      for (const hold of others.slice(0, 15)) yield* initial(hold)
      yield* initial(renewed)
      // The 17th cycle pushes out the oldest: others[0], not the renewed one.
      yield* initial(others[15]!)
      yield* issueKey(world, owner, "agent")
      expect(yield* changedOnFinal(others[0]!)).toBe(false)
      expect(yield* changedOnFinal(renewed)).toBe(true)
      expect(yield* changedOnFinal(others[1]!)).toBe(true)
    }))

  it.scoped("the operator's status: conservative and capability blockers, the hold; unconfigured says so", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      expect(yield* world.drain.status()).toEqual({
        configured: true,
        stack: STACK,
        conservative: [{ code: "ingress-tenant-api-http" }],
        withCapability: [],
        hold: "none"
      })
      yield* world.gate.take("h", Duration.minutes(1))
      expect((yield* world.drain.status()).hold).toBe("held")
      // The capability side asks for both profiles: broken binding state shows in detail there.
      const by = { actor: "operator:environment", correlationId: correlationId() }
      yield* world.connectors.addConnection({ id: "conn-1" as never, tenant: TenantId.make("acme"), kind: "broker", owner: "acct-1" as never }, by)
      expect(yield* world.drain.status()).toMatchObject({
        conservative: [{ code: "ingress-github-broker-events" }, { code: "ingress-tenant-api-http" }],
        withCapability: [{ code: "github-binding-unsettled", ids: ["conn-1"], count: 1 }, { code: "github-connector-missing" }, { code: "ingress-github-broker-events" }]
      })
      const off = yield* tenantWorld({ tenant: Option.none() })
      expect(yield* off.drain.status()).toMatchObject({ configured: false, stack: null })
    }))

  it.scoped("a read whose snapshot fails is 503 and leaves no hold behind", () =>
    Effect.gen(function* () {
      const world = yield* tenantWorld()
      const idleHold = newIdleHold()
      // Fixture: the table the snapshot reads is taken away under the running process.
      yield* world.sql`ALTER TABLE identity_api_keys RENAME TO identity_api_keys_gone`
      expect(yield* refusal(world, assertion({ capability: withCapability(API_ONLY), idleHold, phase: "final" }))).toEqual({ tag: "IdleWakeUnavailable", reason: "storage-unavailable" })
      expect((yield* world.gate.admit)._tag).toBe("Admitted")
      yield* world.gate.leave
      yield* world.sql`ALTER TABLE identity_api_keys_gone RENAME TO identity_api_keys`
      expect(tenantSettings().maxHold).toEqual(Duration.minutes(2))
    }))
})
