import { presentedKeyMaterial } from "@delivery/identity"
import {
  API_ACTIVITY_HOLD,
  ASSERTION_TYPE,
  challengeOf,
  DRAIN_READ_ACTION,
  presentedFingerprint,
  signObject,
  type StackId,
  verifyObject
} from "@delivery/idle-wake"
import { freePort, spawnBunScript, TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { expect, layer } from "@effect/vitest"
import { Duration, Effect, Option } from "effect"
import { encodeBase64Url, privateKeyFromSeed, rawPublicKey } from "@delivery/signer"
import { createPublicKey, generateKeyPairSync, type KeyObject, randomBytes, randomUUID } from "node:crypto"
import { OPERATOR_TOKEN } from "./support/Backend.ts"
import { call } from "./support/Http.ts"
import { tenantWithKey } from "./support/Receipts.ts"
import { application, expectRefusal, submit } from "./support/TeamApplications.ts"

// Spec 001's tenant side through the shipped process: `bun run start` with the idle-wake variables, on the suite's
// PostgreSQL, driven over HTTP only (provisioning and connector state through the operator routes). Drain reads
// signed with a cloud key the test holds; reports checked with the report key's public half. The suite's database is
// shared by its tests, which run in order: the first ones find it without pending work or connector state.

const op = { token: OPERATOR_TOKEN }
const cloud = generateKeyPairSync("ed25519")
const reportSeed = randomBytes(32)
const raw = (key: KeyObject) => encodeBase64Url(rawPublicKey(key))

const stack = `stack-${randomBytes(3).toString("hex")}` as StackId
const audience = `tenant:${stack}`

const idleWakeEnv = {
  IDLE_WAKE_STACK: stack,
  IDLE_WAKE_AUDIENCE: audience,
  IDLE_WAKE_CLOUD_KEYS: `cloud-1:${raw(cloud.publicKey)}`,
  IDLE_WAKE_REPORT_KEY: `report-1:${reportSeed.toString("base64url")}`,
  RECEIPT_DELIVERY: "disabled",
  TEAM_APPLICATION_FROM: "teams@club.example"
}

const reportPublicKey = createPublicKey(privateKeyFromSeed(reportSeed))

const capability = (profiles: ReadonlyArray<"tenant-api-http-v2" | "github-broker-events-v1">) => ({
  incomingWake: {
    version: 1,
    profiles: profiles.map((profile) => ({ profile, routes: [profile === "tenant-api-http-v2" ? "api" : "connector-events"] }))
  }
})

const assertion = (options: { phase?: "initial" | "final" | "release"; idleHold?: string; capability?: unknown; holdSeconds?: number } = {}) => {
  const now = Date.now()
  return signObject({
    type: ASSERTION_TYPE,
    version: 2,
    action: DRAIN_READ_ACTION,
    stack,
    audience,
    requestId: randomUUID().replaceAll("-", ""),
    issuedAt: new Date(now).toISOString(),
    expiresAt: new Date(now + 60_000).toISOString(),
    keyId: "cloud-1",
    cycle: { idleHold: options.idleHold ?? randomBytes(32).toString("base64url"), phase: options.phase ?? "initial", holdSeconds: options.holdSeconds ?? 30 },
    ...(options.capability === undefined ? {} : { idleCapabilities: options.capability })
  }, cloud.privateKey)
}

const drainRead = (port: number, body: unknown, headers: Record<string, string> = {}, path = "/idle-wake/v1/drain-reads") =>
  call(port, "POST", path, { body, headers })

const codes = (report: { blockers: ReadonlyArray<{ code: string }> }) => report.blockers.map((blocker) => blocker.code)

/** `bun run start` itself, on the suite's database. */
const startShipped = (env: Record<string, string>) =>
  Effect.gen(function* () {
    const db = yield* TestDatabase
    const port = yield* freePort
    const backend = yield* spawnBunScript("start", {
      DATABASE_URL: db.url,
      PORT: String(port),
      OPERATOR_TOKEN,
      IDENTITY_PEER_LIMIT: "1000000",
      PASSWORD_RESET_DELIVERY: "disabled",
      ...env
    })
    yield* backend.waitForOutput(/listening on http:/)
    return { port, backend }
  })

layer(TestDatabaseLive, { excludeTestServices: true, timeout: 180_000 })("idle wake, tenant side, through `bun run start` (spec 001)", (it) => {
  it.scoped("a signed drain read with the capability is answered by a signed version 3 report projecting the tenant's keys", () =>
    Effect.gen(function* () {
      const { port } = yield* startShipped(idleWakeEnv)
      const { token } = yield* tenantWithKey(port, ["receipts:write"])
      const idleHold = randomBytes(32).toString("base64url")
      const answer = yield* drainRead(port, assertion({ capability: capability(["tenant-api-http-v2"]), idleHold }))
      expect(answer.status).toBe(200)
      expect(verifyObject(answer.json, reportPublicKey)).toBe(true)
      expect(answer.json).toMatchObject({ type: "idle-wake/drain-report", version: 3, stack, idle: true, blockers: [], hold: "none" })
      const challenge = challengeOf(stack, idleHold as never)
      const fingerprint = presentedFingerprint(challenge, Option.getOrThrow(presentedKeyMaterial(token)))
      expect(answer.json.incomingWake.profiles["tenant-api-http-v2"].keys).toEqual([{ fingerprint, kind: "agent", expiresAt: null }])
      // The secret is what follows the second `_` (it may itself contain `_`).
      expect(answer.text).not.toContain(token.split("_").slice(2).join("_"))
    }))

  it.scoped("a capability smuggled through a query, a header, an API key or forwarded identity headers is never installed", () =>
    Effect.gen(function* () {
      const { port } = yield* startShipped(idleWakeEnv)
      const { token } = yield* tenantWithKey(port)
      const smuggled = encodeURIComponent(JSON.stringify(capability(["tenant-api-http-v2"])))
      const attempts: ReadonlyArray<[string, Record<string, string>]> = [
        [`/idle-wake/v1/drain-reads?idleCapabilities=${smuggled}`, {}],
        ["/idle-wake/v1/drain-reads", { "x-idle-capabilities": JSON.stringify(capability(["tenant-api-http-v2"])) }],
        ["/idle-wake/v1/drain-reads", { authorization: `Bearer ${token}` }],
        ["/idle-wake/v1/drain-reads", { "x-forwarded-for": "10.0.0.1", forwarded: "for=10.0.0.1;by=cloud", "x-forwarded-user": "cloud" }]
      ]
      for (const [path, headers] of attempts) {
        const answer = yield* drainRead(port, assertion(), headers, path)
        expect(answer.status).toBe(200)
        expect(answer.json.version).toBe(2)
        expect(answer.json.incomingWake).toBeUndefined()
        expect(codes(answer.json)).toContain("ingress-tenant-api-http")
      }
      // In the body, but not signed: refused.
      const unsigned = { ...assertion(), idleCapabilities: capability(["tenant-api-http-v2"]) }
      expectRefusal(yield* drainRead(port, unsigned), 401, "AssertionUnauthenticated", "assertion-signature-invalid")
    }))

  it.scoped("refusals in the documented shape: replay, malformed, wrong audience, bad capability; the edge's body bounds still apply", () =>
    Effect.gen(function* () {
      const { port } = yield* startShipped(idleWakeEnv)
      const once = assertion()
      expect((yield* drainRead(port, once)).status).toBe(200)
      expectRefusal(yield* drainRead(port, once), 409, "AssertionReplayed", "assertion-replayed")
      expectRefusal(yield* drainRead(port, { ...once, extra: true }), 422, "AssertionInvalid", "assertion-malformed")
      expectRefusal(yield* drainRead(port, "not json at all"), 422, "JsonBodyRefused", "json-malformed")
      expectRefusal(yield* drainRead(port, assertion({ capability: { incomingWake: { version: 9, profiles: [] } } })), 422, "AssertionInvalid", "capability-version-unknown")
      const deep = JSON.stringify(Array.from({ length: 40 }).reduce<unknown>((inner) => [inner], 1))
      expectRefusal(yield* drainRead(port, deep), 422, "JsonBodyRefused", "json-too-deep")
    }))

  it.scoped("local API activity: only a successful board or agent key request holds it; failures, drain refusals and sessions do not", () =>
    Effect.gen(function* () {
      const { port } = yield* startShipped(idleWakeEnv)
      const { tenant, token } = yield* tenantWithKey(port)
      const quiet = () => Effect.map(drainRead(port, assertion({ capability: capability(["tenant-api-http-v2"]) })), (answer) => codes(answer.json))

      expect((yield* call(port, "GET", "/api/whoami", { token: `${token.slice(0, -2)}xx` })).status).toBe(401)
      expect((yield* call(port, "GET", "/api/receipts/00000000-0000-4000-8000-000000000000", { token })).status).toBe(404)
      expect((yield* call(port, "GET", "/api/team-applications/00000000-0000-4000-8000-000000000000", { token })).status).toBe(403)
      // A browser-style session is not a board or agent key: its successes do not count.
      const email = `user-${randomBytes(3).toString("hex")}@${tenant}.example`
      const password = `pw-${randomBytes(12).toString("base64url")}`
      expect((yield* call(port, "POST", `/operator/tenants/${tenant}/accounts`, { ...op, body: { email, password } })).status).toBe(201)
      const session = yield* call(port, "POST", "/api/sessions", { body: { tenant, email, password } })
      expect(session.status).toBe(201)
      expect((yield* call(port, "GET", "/api/whoami", { token: session.json.token })).status).toBe(200)
      expect(yield* quiet()).not.toContain("local-api-activity")

      // The idle hold: while it lasts, an API request is the tenant's real 503 with Retry-After, before routing.
      const idleHold = randomBytes(32).toString("base64url")
      const final = yield* drainRead(port, assertion({ capability: capability(["tenant-api-http-v2"]), idleHold, phase: "final", holdSeconds: 30 }))
      expect(final.json).toMatchObject({ idle: true, hold: "held" })
      const refused = yield* call(port, "GET", "/api/whoami", { token })
      expectRefusal(refused, 503, "TenantDraining", "tenant-draining")
      expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1)
      expect(Number(refused.headers["retry-after"])).toBeLessThanOrEqual(30)
      expect(refused.json.retryAfter).toBe(Number(refused.headers["retry-after"]))
      expect((yield* call(port, "GET", "/health")).status).toBe(200)
      expect((yield* call(port, "GET", "/operator/idle-wake/status", op)).json.hold).toBe("held")
      const released = yield* drainRead(port, assertion({ idleHold, phase: "release" }))
      expect(released.json.hold).toBe("released")
      // The refused request did not count as activity.
      expect(yield* quiet()).not.toContain("local-api-activity")

      expect((yield* call(port, "GET", "/api/whoami", { token })).status).toBe(200)
      expect(yield* quiet()).toContain("local-api-activity")
      const status = yield* call(port, "GET", "/operator/idle-wake/status", op)
      expect(status.status).toBe(200)
      expect(status.json).toMatchObject({ configured: true, stack, hold: "none" })
      expect(status.json.withCapability.map((b: { code: string }) => b.code)).toContain("local-api-activity")
      expect(Duration.toMinutes(API_ACTIVITY_HOLD)).toBe(10)
      expect(tenant).toBeDefined()
    }))

  it.scoped("unfinished team-application notifications (delivery disabled) block sleep as pending work", () =>
    Effect.gen(function* () {
      const { port } = yield* startShipped({ ...idleWakeEnv, TEAM_APPLICATION_DELIVERY: "disabled" })
      const { token } = yield* tenantWithKey(port, ["team-applications:write"])
      expect((yield* submit(port, token, application())).status).toBe(201)
      const answer = yield* drainRead(port, assertion({ capability: capability(["tenant-api-http-v2"]) }))
      expect(answer.json.blockers).toContainEqual({ code: "work-pending", ids: ["team-applications"], count: 1 })
    }))

  it.scoped("github-broker-events-v1 through the operator routes: a complete binding is proven; its removal is retained history", () =>
    Effect.gen(function* () {
      const { port } = yield* startShipped({ ...idleWakeEnv, IDLE_WAKE_INGRESS: "github-broker-events" })
      const suffix = randomBytes(3).toString("hex")
      const connectors = "/operator/idle-wake/connectors"
      const { tenant, account } = yield* tenantWithKey(port)
      expect((yield* call(port, "POST", `${connectors}/instances`, { ...op, body: { id: `connector-${suffix}` } })).status).toBe(201)
      expect((yield* call(port, "POST", `${connectors}/connections`, { ...op, body: { id: `conn-${suffix}`, tenant, kind: "broker", owner: account } })).status).toBe(201)
      expect((yield* call(port, "POST", `${connectors}/connections/conn-${suffix}/registrations`, { ...op, body: { id: `reg-${suffix}`, appId: 1001 } })).status).toBe(201)
      const pending = yield* drainRead(port, assertion({ capability: capability(["github-broker-events-v1"]) }))
      expect(codes(pending.json)).toContain("github-binding-unsettled")
      expect((yield* call(port, "POST", `${connectors}/registrations/reg-${suffix}/complete`, { ...op, body: { installationId: 2002 } })).status).toBe(200)
      const added = yield* call(port, "POST", `${connectors}/endpoints`, {
        ...op,
        body: { id: `endpoint-${suffix}`, channel: `channel-${suffix}`, connection: `conn-${suffix}`, registration: `reg-${suffix}` }
      })
      expect(added.status).toBe(201)
      expect(added.text).not.toContain("vault:")

      const proven = yield* drainRead(port, assertion({ capability: capability(["github-broker-events-v1"]) }))
      expect(proven.json.incomingWake.profiles["github-broker-events-v1"]).toMatchObject({ connectorInstance: `connector-${suffix}`, bindingCount: 1 })
      expect(codes(proven.json)).not.toContain("ingress-github-broker-events")
      // Without the profile the transport blocks.
      expect(codes((yield* drainRead(port, assertion())).json)).toContain("ingress-github-broker-events")

      expect((yield* call(port, "DELETE", `${connectors}/endpoints/endpoint-${suffix}`, op)).status).toBe(200)
      const state = yield* call(port, "GET", `${connectors}/state`, op)
      expect(state.status).toBe(200)
      expect(state.json.blockers.map((b: { code: string }) => b.code)).not.toContain("github-removal-incomplete")
      expect((yield* call(port, "POST", `${connectors}/instances`, { ...op, body: { id: "Not An Id" } })).status).toBe(400)
      expect((yield* call(port, "POST", `${connectors}/instances`, { body: { id: `x-${suffix}` } })).status).toBe(401)
    }))

  it.scoped("start-up refuses a half-configured stack, unknown transports and a bad report key, naming each variable", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const port = yield* freePort
      const run = (env: Record<string, string>) =>
        Effect.gen(function* () {
          const backend = yield* spawnBunScript("start", { DATABASE_URL: db.url, PORT: String(port), PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled", ...env })
          const code = yield* backend.exitCode("30 seconds")
          return { code, output: yield* backend.output }
        })
      const missing = yield* run({ IDLE_WAKE_STACK: stack })
      expect(missing.code).not.toBe(0)
      for (const name of ["IDLE_WAKE_AUDIENCE", "IDLE_WAKE_CLOUD_KEYS", "IDLE_WAKE_REPORT_KEY"]) expect(missing.output).toContain(name)
      const stray = yield* run({ IDLE_WAKE_AUDIENCE: audience, IDLE_WAKE_INGRESS: "carrier-pigeon" })
      expect(stray.code).not.toBe(0)
      expect(stray.output).toMatch(/IDLE_WAKE_AUDIENCE: Set only together with IDLE_WAKE_STACK/)
      expect(stray.output).toMatch(/IDLE_WAKE_INGRESS: Unknown transport\(s\): carrier-pigeon/)
      const secret = randomBytes(20).toString("base64url")
      const badKey = yield* run({ ...idleWakeEnv, IDLE_WAKE_REPORT_KEY: `report-1:${secret}` })
      expect(badKey.code).not.toBe(0)
      expect(badKey.output).toContain("IDLE_WAKE_REPORT_KEY")
      expect(badKey.output).not.toContain(secret)
      expect(yield* Effect.promise(() => fetch(`http://127.0.0.1:${port}/health`).then(() => "listening", () => "nothing listening"))).toBe("nothing listening")
    }))
})
