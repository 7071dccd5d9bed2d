import { connect, createDatabase, probePort } from "@delivery/testing"
import { PgClusterFromVitest, TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber, Schedule } from "effect"
import { createHmac, randomBytes } from "node:crypto"
import { ASSERTION_TYPE, DRAIN_READ_ACTION, signObject } from "@delivery/idle-wake"
import { privateKeyFromSeed } from "@delivery/signer"
import { existsSync, mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import {
  admissionOf,
  type Cloud,
  makeStack,
  op,
  registerStack,
  resettingUpstreamEntry,
  sleepStack,
  slowTenantEntry,
  stackState,
  type StackSpec,
  startCloud,
  startsOf,
  viaProxy,
  waitForHeld
} from "./support/Cloud.ts"
import { type Answer, call } from "./support/Http.ts"
import { tenantWithKey } from "./support/Receipts.ts"

/** A request that reaches the tenant without holding its API activity (no route: 404), so the stack can sleep again. */
const NO_ROUTE = "/api/no-such-route"

/** A proxy refusal: its reason, a Retry-After header matching the body, nothing of the tenant's. */
const expectRefused = (answer: Answer, status: number, reason: string) => {
  expect({ status: answer.status, tag: answer.json?._tag, reason: answer.json?.reason }).toEqual({ status, tag: "WakeRefused", reason })
  expect(answer.headers["x-correlation-id"]).toBe(answer.json.correlationId)
  if (status === 429 || status === 503) {
    expect(Number(answer.headers["retry-after"])).toBeGreaterThanOrEqual(1)
    expect(answer.json.retryAfter).toBe(Number(answer.headers["retry-after"]))
  }
}

/** A request from the given source (these clouds sit behind one trusted proxy hop: TRUSTED_PROXY_HOPS=1). */
const from = (source: string, token?: string) => ({ headers: { "x-forwarded-for": source }, ...(token === undefined ? {} : { token }) })

/** Registers, provisions a key on the tenant and puts the stack to sleep. */
const asleepWithKey = (cloud: Cloud, stack: StackSpec, host: string) =>
  Effect.gen(function* () {
    yield* registerStack(cloud, stack, host)
    const { token } = yield* tenantWithKey(stack.port, ["receipts:write"])
    expect(yield* sleepStack(cloud, stack)).toEqual({ outcome: "asleep" })
    return token
  })

// Spec 001's cloud side through the shipped process: `bun run start` with ROLE=cloud, its wake proxy and operator
// routes, and real tenant backends that its local compute provider starts and stops.

layer(TestDatabaseLive, { excludeTestServices: true, timeout: 240_000 })("idle wake, cloud side, through `bun run start` (spec 001)", (it) => {
  it.scoped("a sleeping tenant woken by a projected key receives the request exactly once; an unknown key gets a refusal and no start", () =>
    Effect.gen(function* () {
      const stack = yield* makeStack()
      const cloud = yield* startCloud({ stacks: [stack] })
      const host = `${stack.id}.tenants.test`
      yield* registerStack(cloud, stack, host)
      const { token } = yield* tenantWithKey(stack.port, ["receipts:write"])

      const slept = yield* sleepStack(cloud, stack)
      expect(slept).toEqual({ outcome: "asleep" })
      expect(yield* probePort(stack.port)).toBe("refused")
      const asleep = yield* stackState(cloud, stack)
      expect(asleep).toMatchObject({ state: "asleep", receipt: { keys: expect.any(Number) } })
      const startsBefore = startsOf(cloud, stack)

      const unknown = yield* viaProxy(cloud, host, "GET", "/api/whoami", { token: `${token.slice(0, -4)}AAAA` })
      expect(unknown.status).toBe(401)
      expect(unknown.json).toMatchObject({ _tag: "WakeRefused", reason: "wake-key-unknown" })
      expect(yield* probePort(stack.port)).toBe("refused")
      expect(startsOf(cloud, stack)).toBe(startsBefore)

      const woken = yield* viaProxy(cloud, host, "GET", "/api/whoami", { token })
      expect(woken.status).toBe(200)
      expect(startsOf(cloud, stack)).toBe(startsBefore + 1)
      const after = yield* stackState(cloud, stack)
      expect(after).toMatchObject({ state: "awake", receipt: null })
      expect(after.audit.map((entry: { action: string }) => entry.action)).toEqual(
        expect.arrayContaining(["registered", "sleep-started", "receipt-stored", "asleep", "wake-claimed", "awake"])
      )
      const admission = yield* call(cloud.port, "GET", "/operator/cloud/admission", op)
      expect(admission.json.refusals).toMatchObject({ "wake-key-unknown": 1 })

      // Awake: forwarded at once, and the tenant's own blockers decide the next sleep (its API activity now).
      expect((yield* viaProxy(cloud, host, "GET", "/api/whoami", { token })).status).toBe(200)
      const again = yield* sleepStack(cloud, stack)
      expect(again).toMatchObject({ outcome: "refused", code: "report-not-idle", blockers: [{ code: "local-api-activity" }] })
      expect((yield* stackState(cloud, stack)).state).toBe("awake")
      expect(startsOf(cloud, stack)).toBe(startsBefore + 1)
    }))

  it.scoped("100 concurrent requests to a sleeping stack cause one provider start, and each gets an answer within the bounds; routes that may not wake never start it", () =>
    Effect.gen(function* () {
      const stack = yield* makeStack()
      const cloud = yield* startCloud({ stacks: [stack], env: { TRUSTED_PROXY_HOPS: "1" } })
      const host = `${stack.id}.tenants.test`
      const token = yield* asleepWithKey(cloud, stack, host)
      const before = startsOf(cloud, stack)

      // Never a wake path: other routes, reserved protocols, upgrades, odd methods, unknown hosts.
      expectRefused(yield* viaProxy(cloud, host, "GET", "/health", from("198.51.100.1", token)), 503, "route-not-wakeable")
      expectRefused(yield* viaProxy(cloud, host, "POST", "/idle-wake/v1/drain-reads", { ...from("198.51.100.1", token), body: {} }), 503, "route-not-wakeable")
      expectRefused(yield* viaProxy(cloud, host, "GET", "/api/muse/session", from("198.51.100.2", token)), 503, "route-not-wakeable")
      expectRefused(yield* viaProxy(cloud, host, "GET", "/api/mcp", from("198.51.100.2", token)), 503, "route-not-wakeable")
      expectRefused(yield* viaProxy(cloud, host, "GET", "/api/a%2Fb", from("198.51.100.3", token)), 503, "route-not-wakeable")
      expectRefused(yield* viaProxy(cloud, host, "GET", "/api/whoami", { ...from("198.51.100.3", token), headers: { "x-forwarded-for": "198.51.100.3", upgrade: "websocket", connection: "upgrade" } }), 503, "route-not-wakeable")
      expectRefused(yield* viaProxy(cloud, host, "PROPFIND", "/api/whoami", from("198.51.100.4", token)), 503, "route-not-wakeable")
      expectRefused(yield* viaProxy(cloud, `other-${host}`, "GET", "/api/whoami", from("198.51.100.4", token)), 421, "host-unknown")
      expect(startsOf(cloud, stack)).toBe(before)
      expect(yield* probePort(stack.port)).toBe("refused")

      const started = Date.now()
      const answers = yield* Effect.all(
        Array.from({ length: 100 }, (_, i) =>
          Effect.map(viaProxy(cloud, host, "GET", NO_ROUTE, from(`203.0.113.${i}`, token)), (answer) => ({ answer, at: Date.now() - started }))),
        { concurrency: "unbounded" }
      )
      expect(startsOf(cloud, stack)).toBe(before + 1)
      const forwarded = answers.filter(({ answer }) => answer.json?._tag !== "WakeRefused")
      const refused = answers.filter(({ answer }) => answer.json?._tag === "WakeRefused")
      expect(forwarded.length).toBeGreaterThanOrEqual(1)
      for (const { answer } of forwarded) expect(answer.status).toBe(404)
      for (const { answer } of refused) {
        expect(["stack-waiting-full", "waiting-full"]).toContain(answer.json.reason)
        expectRefused(answer, 503, answer.json.reason)
      }
      // Within the readiness bound (90 s), by far.
      for (const { at } of answers) expect(at).toBeLessThan(90_000)
      expect((yield* stackState(cloud, stack)).state).toBe("awake")
      const admission = yield* admissionOf(cloud)
      expect(admission.wakesStarted).toBe(1)
      expect(admission.waiting).toBe(0)
    }))

  it.scoped("a restarted cloud process reads the stored receipt and wakes the stack with it", () =>
    Effect.gen(function* () {
      const stack = yield* makeStack()
      const first = yield* startCloud({ stacks: [stack] })
      const host = `${stack.id}.tenants.test`
      const token = yield* asleepWithKey(first, stack, host)
      // The whole group (`bun run` and the backend it started); the stacks have process groups of their own.
      process.kill(-first.process.pid, "SIGKILL")
      yield* first.process.exitCode()

      const second = yield* startCloud({ stacks: [stack], databaseUrl: first.databaseUrl, runDir: first.runDir, cloudSeed: first.cloudSeed })
      // The receipt projects every active key of the stack's database (the suite's, shared with earlier tests).
      const [active] = yield* (yield* SqlClient.SqlClient)<{ n: number }>`
        SELECT count(*)::int AS n FROM identity_api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`
      expect(yield* stackState(second, stack)).toMatchObject({ state: "asleep", receipt: { keys: active!.n } })
      const woken = yield* viaProxy(second, host, "GET", "/api/whoami", { token })
      expect(woken.status).toBe(200)
      expect((yield* stackState(second, stack)).state).toBe("awake")
    }))

  it.scoped("a key revoked after the snapshot wakes the stack, and the awakened tenant refuses it", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const stack = yield* makeStack()
      const cloud = yield* startCloud({ stacks: [stack] })
      const host = `${stack.id}.tenants.test`
      const token = yield* asleepWithKey(cloud, stack, host)
      const before = startsOf(cloud, stack)
      const lookupId = token.split("_")[1]!
      yield* sql`UPDATE identity_api_keys SET revoked_at = now() WHERE lookup_id = ${lookupId}`
      const answer = yield* viaProxy(cloud, host, "GET", "/api/whoami", { token })
      expect(answer.status).toBe(401)
      expect(answer.json).toMatchObject({ _tag: "Unauthenticated", reason: "revoked" })
      expect(startsOf(cloud, stack)).toBe(before + 1)
      expect((yield* stackState(cloud, stack)).state).toBe("awake")
    }))

  it.scoped("the source request budget and the waiting bounds (per source, per stack, in all) refuse with Retry-After before anything is forwarded", () =>
    Effect.gen(function* () {
      const slow = { SLOW_START_MS: "3000" }
      const a = yield* makeStack({ env: slow })
      const b = yield* makeStack({ env: slow })
      const cloud = yield* startCloud({
        stacks: [a, b],
        env: {
          TRUSTED_PROXY_HOPS: "1",
          IDLE_WAKE_LOCAL_ENTRY: slowTenantEntry,
          IDLE_WAKE_SOURCE_REQUESTS_PER_MINUTE: "3",
          IDLE_WAKE_WAITING_PER_SOURCE: "1",
          IDLE_WAKE_WAITING_PER_STACK: "2",
          IDLE_WAKE_WAITING_MAX: "3"
        }
      })
      const hostA = `${a.id}.tenants.test`
      const hostB = `${b.id}.tenants.test`
      const tokenA = yield* asleepWithKey(cloud, a, hostA)
      const tokenB = yield* asleepWithKey(cloud, b, hostB)

      // The request budget counts every request to a stack that is not awake, unknown keys included.
      const unknown = `${tokenA.slice(0, -4)}AAAA`
      expectRefused(yield* viaProxy(cloud, hostA, "GET", NO_ROUTE, from("192.0.2.9", unknown)), 401, "wake-key-unknown")
      expectRefused(yield* viaProxy(cloud, hostA, "GET", NO_ROUTE, from("192.0.2.9", unknown)), 401, "wake-key-unknown")
      expectRefused(yield* viaProxy(cloud, hostA, "GET", NO_ROUTE, from("192.0.2.9", unknown)), 401, "wake-key-unknown")
      const overBudget = yield* viaProxy(cloud, hostA, "GET", NO_ROUTE, from("192.0.2.9", tokenA))
      expectRefused(overBudget, 429, "source-request-budget")
      expect(Number(overBudget.headers["retry-after"])).toBeLessThanOrEqual(60)

      const held1 = yield* Effect.fork(viaProxy(cloud, hostA, "GET", NO_ROUTE, from("192.0.2.1", tokenA)))
      yield* waitForHeld(cloud, 1)
      expectRefused(yield* viaProxy(cloud, hostA, "GET", NO_ROUTE, from("192.0.2.1", tokenA)), 503, "source-waiting-full")
      const held2 = yield* Effect.fork(viaProxy(cloud, hostA, "GET", NO_ROUTE, from("192.0.2.2", tokenA)))
      yield* waitForHeld(cloud, 2)
      expectRefused(yield* viaProxy(cloud, hostA, "GET", NO_ROUTE, from("192.0.2.3", tokenA)), 503, "stack-waiting-full")
      const held3 = yield* Effect.fork(viaProxy(cloud, hostB, "GET", NO_ROUTE, from("192.0.2.4", tokenB)))
      yield* waitForHeld(cloud, 3)
      expectRefused(yield* viaProxy(cloud, hostB, "GET", NO_ROUTE, from("192.0.2.5", tokenB)), 503, "waiting-full")

      // The held requests are forwarded once their stacks are ready.
      for (const fiber of [held1, held2, held3]) expect((yield* Fiber.join(fiber)).status).toBe(404)
      const admission = yield* admissionOf(cloud)
      expect(admission).toMatchObject({ waiting: 0, wakesStarted: 2 })
      expect(admission.refusals).toMatchObject({
        "wake-key-unknown": 3,
        "source-request-budget": 1,
        "source-waiting-full": 1,
        "stack-waiting-full": 1,
        "waiting-full": 1
      })
    }))

  it.scoped("the pending-preparation bound and the stack, source and aggregate wake budgets refuse with Retry-After; capacity refusals spend no budget", () =>
    Effect.gen(function* () {
      const stacks = [
        yield* makeStack({ env: { SLOW_START_MS: "3000" } }),
        yield* makeStack(),
        yield* makeStack(),
        yield* makeStack()
      ]
      const [a, b, c, d] = stacks as [StackSpec, StackSpec, StackSpec, StackSpec]
      const cloud = yield* startCloud({
        stacks,
        env: {
          TRUSTED_PROXY_HOPS: "1",
          IDLE_WAKE_LOCAL_ENTRY: slowTenantEntry,
          IDLE_WAKE_PREPARATIONS_MAX: "1",
          IDLE_WAKE_STACK_WAKES_PER_HOUR: "1",
          IDLE_WAKE_SOURCE_WAKES_PER_10_MINUTES: "1",
          IDLE_WAKE_WAKES_PER_MINUTE: "2"
        }
      })
      const host = (stack: StackSpec) => `${stack.id}.tenants.test`
      const tokens = []
      for (const stack of stacks) tokens.push(yield* asleepWithKey(cloud, stack, host(stack)))
      const [ta, tb, tc, td] = tokens as [string, string, string, string]

      // A's wake holds the only preparation slot for its slow start.
      const wakeA = yield* Effect.fork(viaProxy(cloud, host(a), "GET", NO_ROUTE, from("192.0.2.1", ta)))
      yield* waitForHeld(cloud, 1)
      expectRefused(yield* viaProxy(cloud, host(b), "GET", NO_ROUTE, from("192.0.2.2", tb)), 503, "preparations-full")
      expect((yield* Fiber.join(wakeA)).status).toBe(404)

      // Source 192.0.2.1 spent its one wake on A.
      expectRefused(yield* viaProxy(cloud, host(c), "GET", NO_ROUTE, from("192.0.2.1", tc)), 429, "source-wake-budget")
      // The preparations-full refusal spent none of B's budget: B wakes (the aggregate's second wake).
      expect((yield* viaProxy(cloud, host(b), "GET", NO_ROUTE, from("192.0.2.3", tb))).status).toBe(404)
      // The aggregate budget (2 a minute) is spent.
      expectRefused(yield* viaProxy(cloud, host(d), "GET", NO_ROUTE, from("192.0.2.4", td)), 429, "wake-budget")
      // A again, after another sleep: its stack budget (1 an hour) is spent.
      expect(yield* sleepStack(cloud, a)).toEqual({ outcome: "asleep" })
      const stackBudget = yield* viaProxy(cloud, host(a), "GET", NO_ROUTE, from("192.0.2.5", ta))
      expectRefused(stackBudget, 429, "stack-wake-budget")
      expect(Number(stackBudget.headers["retry-after"])).toBeGreaterThan(60)
      expect((yield* admissionOf(cloud)).wakesStarted).toBe(2)
      for (const stack of [c, d]) expect((yield* stackState(cloud, stack)).state).toBe("asleep")
    }))

  it.scoped("a streamed mutation is forwarded once and never replayed after the upstream resets mid-request", () =>
    Effect.gen(function* () {
      const stack = yield* makeStack()
      const dir = mkdtempSync(join(tmpdir(), "reset-upstream-"))
      const log = join(dir, "requests.log")
      const cloud = yield* startCloud({
        stacks: [{ ...stack, env: { RESET_LOG: log } }],
        env: { IDLE_WAKE_LOCAL_ENTRY: resettingUpstreamEntry }
      })
      const host = `${stack.id}.tenants.test`
      const registered = yield* call(cloud.port, "POST", "/operator/cloud/stacks", {
        ...op,
        body: { stack: stack.id, audience: stack.audience, reportKey: `r-1:${"A".repeat(42)}A`, profiles: ["tenant-api-http-v2"] }
      })
      expect(registered.status).toBe(201)
      expect((yield* call(cloud.port, "POST", `/operator/cloud/stacks/${stack.id}/hosts`, { ...op, body: { host } })).status).toBe(201)

      const chunks = ["{\"commandId\":\"c-1\",", "\"amount\":1}"]
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          const next = chunks.shift()
          if (next === undefined) return controller.close()
          controller.enqueue(new TextEncoder().encode(next))
          await new Promise((resolve) => setTimeout(resolve, 100))
        }
      })
      const answer = yield* viaProxy(cloud, host, "POST", "/api/receipts", { body })
      expectRefused(answer, 502, "upstream-ambiguous")
      // Give a replay, if there were one, time to arrive.
      yield* Effect.sleep("500 millis")
      expect(existsSync(log) ? readFileSync(log, "utf8").trim().split("\n") : []).toEqual(["POST /api/receipts HTTP/1.1"])
    }))

  it.scoped("manual suspension, a recovery hold and archiving answer non-success without forwarding or starting compute; an uncertain stop keeps the receipt and recovery asks the provider", () =>
    Effect.gen(function* () {
      const stack = yield* makeStack()
      const cloud = yield* startCloud({ stacks: [stack] })
      const host = `${stack.id}.tenants.test`
      const token = yield* asleepWithKey(cloud, stack, host)
      const before = startsOf(cloud, stack)
      const stackRoute = (action: string, body?: unknown) =>
        call(cloud.port, "POST", `/operator/cloud/stacks/${stack.id}/${action}`, { ...op, ...(body === undefined ? {} : { body }) })

      expect((yield* stackRoute("recovery-hold", { hold: true })).json).toMatchObject({ state: "asleep", recoveryHold: true })
      expectRefused(yield* viaProxy(cloud, host, "GET", NO_ROUTE, { token }), 503, "recovery-hold")
      expect(startsOf(cloud, stack)).toBe(before)
      expect((yield* stackRoute("recovery-hold", { hold: false })).json.recoveryHold).toBe(false)
      expect((yield* viaProxy(cloud, host, "GET", NO_ROUTE, { token })).status).toBe(404)
      expect(startsOf(cloud, stack)).toBe(before + 1)

      const suspended = yield* stackRoute("suspend")
      expect(suspended.json).toMatchObject({ state: "suspended", receipt: null, stop: "Stopped" })
      expectRefused(yield* viaProxy(cloud, host, "GET", NO_ROUTE, { token }), 503, "stack-suspended")
      expect(yield* probePort(stack.port)).toBe("refused")
      expect((yield* stackRoute("wake")).status).toBe(409)
      expect((yield* stackRoute("resume")).json.state).toBe("awake")
      expect((yield* viaProxy(cloud, host, "GET", NO_ROUTE, { token })).status).toBe(404)

      const archived = yield* stackRoute("archive")
      expect(archived.json).toMatchObject({ state: "archived", stop: "Stopped" })
      expectRefused(yield* viaProxy(cloud, host, "GET", NO_ROUTE, { token }), 421, "host-unknown")
      expect((yield* stackRoute("resume")).json).toMatchObject({ _tag: "CloudConflict", reason: "stack-archived" })
      expect(yield* probePort(stack.port)).toBe("refused")

      // A provider that cannot confirm the stop in time (1 ms): the receipt stays; recovery finds compute down.
      const other = yield* makeStack()
      const hasty = yield* startCloud({ stacks: [other], env: { IDLE_WAKE_LOCAL_STOP_TIMEOUT: "1 millis" } })
      const otherHost = `${other.id}.tenants.test`
      yield* registerStack(hasty, other, otherHost)
      const { token: otherToken } = yield* tenantWithKey(other.port)
      expect(yield* sleepStack(hasty, other)).toEqual({ outcome: "stop-uncertain", code: "compute-stop-timeout" })
      expect(yield* stackState(hasty, other)).toMatchObject({ state: "stop-uncertain", receipt: { keys: expect.any(Number) } })
      yield* Effect.sleep("2 seconds")
      const recovered = yield* call(hasty.port, "POST", `/operator/cloud/stacks/${other.id}/recover`, op)
      expect(recovered.json).toMatchObject({ state: "asleep", receipt: { keys: expect.any(Number) } })
      expect((yield* viaProxy(hasty, otherHost, "GET", "/api/whoami", { token: otherToken })).status).toBe(200)
    }))

  it.scoped("a request that races a tenant drain gets the tenant's real 503 with Retry-After, passed through unchanged", () =>
    Effect.gen(function* () {
      const stack = yield* makeStack()
      const cloud = yield* startCloud({ stacks: [stack] })
      const host = `${stack.id}.tenants.test`
      yield* registerStack(cloud, stack, host)
      const { token } = yield* tenantWithKey(stack.port)
      // Another cycle's final read holds the tenant (signed by the cloud's key) while this cloud still routes to it.
      const idleHold = randomBytes(32).toString("base64url")
      const read = (phase: "final" | "release") => {
        const now = Date.now()
        return call(stack.port, "POST", "/idle-wake/v1/drain-reads", {
          body: signObject({
            type: ASSERTION_TYPE,
            version: 2,
            action: DRAIN_READ_ACTION,
            stack: stack.id,
            audience: stack.audience,
            requestId: randomBytes(18).toString("base64url"),
            issuedAt: new Date(now).toISOString(),
            expiresAt: new Date(now + 60_000).toISOString(),
            keyId: "cloud-1",
            cycle: { idleHold, phase, holdSeconds: 20 },
            idleCapabilities: { incomingWake: { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: ["api"] }] } }
          }, privateKeyFromSeed(cloud.cloudSeed))
        })
      }
      expect((yield* read("final")).json.hold).toBe("held")
      const raced = yield* viaProxy(cloud, host, "GET", "/api/whoami", { token })
      expect(raced.status).toBe(503)
      expect(raced.json).toMatchObject({ _tag: "TenantDraining", reason: "tenant-draining" })
      expect(Number(raced.headers["retry-after"])).toBeGreaterThanOrEqual(1)
      expect((yield* read("release")).json.hold).toBe("released")
      expect((yield* viaProxy(cloud, host, "GET", "/api/whoami", { token })).status).toBe(200)
    }))

  it.scoped("quiet cycles: an idle stack awake for a whole interval is put to sleep on its own; a stack in use stays awake", () =>
    Effect.gen(function* () {
      const idle = yield* makeStack()
      const busy = yield* makeStack()
      const cloud = yield* startCloud({ stacks: [idle, busy], env: { IDLE_WAKE_SLEEP_EVERY: "2 seconds" } })
      yield* registerStack(cloud, idle, `${idle.id}.tenants.test`)
      yield* registerStack(cloud, busy, `${busy.id}.tenants.test`)
      const { token } = yield* tenantWithKey(busy.port)
      // A successful request with a key: the tenant holds ten minutes of API activity.
      expect((yield* viaProxy(cloud, `${busy.id}.tenants.test`, "GET", "/api/whoami", { token })).status).toBe(200)
      yield* stackState(cloud, idle).pipe(
        Effect.repeat({ until: (state) => state.state === "asleep", schedule: Schedule.spaced("200 millis") }),
        Effect.timeout("20 seconds")
      )
      expect(yield* probePort(idle.port)).toBe("refused")
      // The busy one was offered cycles too, and refused them.
      yield* stackState(cloud, busy).pipe(
        Effect.repeat({
          until: (state: { readonly audit: ReadonlyArray<{ readonly action: string }> }) =>
            state.audit.some((entry) => entry.action === "sleep-aborted"),
          schedule: Schedule.spaced("200 millis")
        }),
        Effect.timeout("20 seconds")
      )
      expect((yield* stackState(cloud, busy)).state).toBe("awake")
      expect(yield* probePort(busy.port)).toBe("open")
    }))

  it.scoped("broker events (github-broker-events-v1) survive a killed cloud process and a lost wake hint; the lease's acknowledgement settles them once; duplicates are absorbed", () =>
    Effect.gen(function* () {
      const tenantDb = yield* Effect.provide(createDatabase, PgClusterFromVitest)
      const secret = `gh-${randomBytes(16).toString("hex")}`
      const brokerToken = `broker-${randomBytes(24).toString("base64url")}`
      const stack = yield* makeStack({ databaseUrl: tenantDb.url, env: { SLOW_START_MS: "2500", IDLE_WAKE_GITHUB_WEBHOOK_SECRET: secret } })
      const env = {
        IDLE_WAKE_LOCAL_ENTRY: slowTenantEntry,
        IDLE_WAKE_CONNECTOR_TOKEN: brokerToken,
        IDLE_WAKE_READINESS_WAIT: "8 seconds",
        IDLE_WAKE_EVENT_LEASE: "3 seconds",
        IDLE_WAKE_EVENT_RETRY_BASE: "200 millis",
        IDLE_WAKE_EVENT_RETRY_CAP: "1 second"
      }
      const first = yield* startCloud({ stacks: [stack], env })
      const host = `${stack.id}.tenants.test`
      yield* registerStack(first, stack, host, ["tenant-api-http-v2", "github-broker-events-v1"])
      const suffix = randomBytes(3).toString("hex")
      const connectors = "/operator/idle-wake/connectors"
      const { tenant, account } = yield* tenantWithKey(stack.port)
      const instance = `connector-${suffix}`
      const endpoint = `endpoint-${suffix}`
      expect((yield* call(stack.port, "POST", `${connectors}/instances`, { ...op, body: { id: instance } })).status).toBe(201)
      expect((yield* call(stack.port, "POST", `${connectors}/connections`, { ...op, body: { id: `conn-${suffix}`, tenant, kind: "broker", owner: account } })).status).toBe(201)
      expect((yield* call(stack.port, "POST", `${connectors}/connections/conn-${suffix}/registrations`, { ...op, body: { id: `reg-${suffix}`, appId: 1001 } })).status).toBe(201)
      expect((yield* call(stack.port, "POST", `${connectors}/registrations/reg-${suffix}/complete`, { ...op, body: { installationId: 2002 } })).status).toBe(200)
      expect((yield* call(stack.port, "POST", `${connectors}/endpoints`, {
        ...op,
        body: { id: endpoint, channel: `channel-${suffix}`, connection: `conn-${suffix}`, registration: `reg-${suffix}` }
      })).status).toBe(201)
      expect(yield* sleepStack(first, stack)).toEqual({ outcome: "asleep" })
      expect((yield* stackState(first, stack)).receipt).toMatchObject({ connectorBindings: 1 })

      const event = (deliveryId: string, body: string, signatureSecret = secret) => ({
        stack: stack.id,
        connectorInstance: instance,
        endpoint,
        deliveryId,
        event: "issues",
        payload: Buffer.from(body).toString("base64url"),
        githubSignature: `sha256=${createHmac("sha256", signatureSecret).update(body).digest("hex")}`
      })
      const post = (cloud: Cloud, body: unknown, token = brokerToken) =>
        call(cloud.port, "POST", "/cloud/v1/connector-events", { token, body })
      const deliveryId = `d-${randomBytes(8).toString("hex")}`
      const queued = yield* post(first, event(deliveryId, "{\"action\":\"opened\"}"))
      expect(queued.status).toBe(202)
      expect(queued.json.outcome).toBe("queued")
      // The stack is waking for the event (a slow start); the cloud dies before anything is acknowledged.
      yield* Effect.sleep("300 millis")
      process.kill(-first.process.pid, "SIGKILL")
      yield* first.process.exitCode()

      const second = yield* startCloud({ stacks: [stack], databaseUrl: first.databaseUrl, runDir: first.runDir, cloudSeed: first.cloudSeed, env })
      const again = yield* post(second, event(deliveryId, "{\"action\":\"opened\"}"))
      expect(again.json).toEqual({ outcome: "duplicate", eventId: queued.json.eventId })
      expectRefusedIntake(yield* post(second, event("d-x", "{}"), "broker-wrong-token-000000000000000000"), "connector-unauthenticated")
      const delivered = (cloud: Cloud, count: number) =>
        call(cloud.port, "GET", "/operator/cloud/connector-events", op).pipe(
          Effect.repeat({
            until: (answer) => answer.json.states.find((row: { state: string }) => row.state === "delivered")?.events === count,
            schedule: Schedule.spaced("200 millis")
          }),
          Effect.timeout("45 seconds")
        )
      yield* delivered(second, 1)
      expect((yield* stackState(second, stack)).state).toBe("awake")

      const tenantSql = yield* connect(tenantDb.url)
      const recorded = yield* tenantSql<{ event_id: string; cloud_attempt: number }>`
        SELECT event_id::text, cloud_attempt FROM idle_wake_connector_events WHERE delivery_id = ${deliveryId}`
      expect(recorded.map((row) => row.event_id)).toEqual([queued.json.eventId])
      const cloudSql = yield* connect(first.databaseUrl)
      const [row] = yield* cloudSql<{ state: string; attempt: number; last_code: string }>`
        SELECT state, attempt, last_code FROM idle_wake_cloud_connector_events WHERE delivery_id = ${deliveryId}`
      expect(row).toMatchObject({ state: "delivered", last_code: "recorded" })
      // The first claim's lease (the killed cloud's) ended before the acknowledged one.
      expect(row!.attempt).toBeGreaterThanOrEqual(2)

      // Awake now: a second event goes straight through; one with a forged GitHub signature is refused for good.
      expect((yield* post(second, event(`d-${suffix}-2`, "{\"action\":\"closed\"}"))).json.outcome).toBe("queued")
      expect((yield* post(second, event(`d-${suffix}-3`, "{}", "not-the-webhook-secret"))).json.outcome).toBe("queued")
      yield* delivered(second, 2)
      const forgedRow = cloudSql<{ state: string; last_code: string | null }>`
        SELECT state, last_code FROM idle_wake_cloud_connector_events WHERE delivery_id = ${`d-${suffix}-3`}`
      yield* forgedRow.pipe(
        Effect.repeat({ until: (rows) => rows[0]?.state !== "pending", schedule: Schedule.spaced("200 millis") }),
        Effect.timeout("20 seconds")
      )
      const forged = yield* forgedRow
      expect(forged).toEqual([{ state: "dead", last_code: "github-signature-invalid" }])
      expect((yield* tenantSql`SELECT count(*)::int AS n FROM idle_wake_connector_events`)[0]).toEqual({ n: 2 })
    }))
})

const expectRefusedIntake = (answer: Answer, reason: string) => {
  expect(answer.status).toBe(401)
  expect(answer.json).toMatchObject({ _tag: "ConnectorIntakeRefused", reason })
}
