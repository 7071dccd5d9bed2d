import { encodeBase64Url, privateKeyFromSeed, rawPublicKey } from "@delivery/signer"
import { killStacks, probePort } from "@delivery/testing"
import { Effect } from "effect"
import { createHmac, createPublicKey, randomBytes } from "node:crypto"
import { mkdirSync } from "node:fs"
import { join } from "node:path"
import { readPool } from "./faults/Support.ts"
import { call, pollUntil } from "./primary/Http.ts"
import type { Scenario } from "./Scenario.ts"

// Spec 001's github-broker-events-v1 in the recovery proof: "the existing queue target survives a lost wake hint,
// failed wake, process restart and lease expiry. A 202 hint does not settle delivery. Only the current event lease
// acknowledgment does." A cloud process (ROLE=cloud) puts a tenant stack to sleep with a proof of its GitHub
// binding; the broker posts events; the cloud is killed (SIGKILL) right after acknowledging them with 202, while the
// wake they asked for is starting; a new cloud process starts on the same database. With no SQL written and no
// operator call between the kill and the end, every event reaches the tenant exactly once and is settled delivered.

const EVENTS = 3

export const brokerEvents: Scenario = {
  name: "broker-events",
  run: (world, evidence) =>
    Effect.gen(function* () {
      const name = "broker-events"
      const stack = `stack-${randomBytes(3).toString("hex")}`
      const stackPort = yield* world.reservePort
      const proxyPort = yield* world.reservePort
      const runDir = join(world.root, "stacks")
      mkdirSync(runDir, { mode: 0o700 })
      const cloudSeed = randomBytes(32)
      const reportSeed = randomBytes(32)
      const githubSecret = `gh-${randomBytes(24).toString("base64url")}`
      const brokerToken = `broker-${randomBytes(32).toString("base64url")}`
      const publicOf = (seed: Buffer) => encodeBase64Url(rawPublicKey(createPublicKey(privateKeyFromSeed(seed))))
      const tenantEnv = {
        ...world.baseEnv,
        IDLE_WAKE_STACK: stack,
        IDLE_WAKE_AUDIENCE: `tenant:${stack}`,
        IDLE_WAKE_CLOUD_KEYS: `cloud-1:${publicOf(cloudSeed)}`,
        IDLE_WAKE_REPORT_KEY: `report-1:${reportSeed.toString("base64url")}`,
        IDLE_WAKE_GITHUB_WEBHOOK_SECRET: githubSecret
      }
      const cloudEnv = {
        ROLE: "cloud",
        IDLE_WAKE_CLOUD_SIGNING_KEY: `cloud-1:${cloudSeed.toString("base64url")}`,
        IDLE_WAKE_PROXY_PORT: String(proxyPort),
        IDLE_WAKE_LOCAL_STACKS: JSON.stringify({ [stack]: { port: stackPort, env: tenantEnv } }),
        IDLE_WAKE_LOCAL_RUN_DIR: runDir,
        IDLE_WAKE_CONNECTOR_TOKEN: brokerToken,
        IDLE_WAKE_READINESS_WAIT: "5 seconds",
        IDLE_WAKE_EVENT_LEASE: "3 seconds",
        IDLE_WAKE_EVENT_RETRY_BASE: "200 millis",
        IDLE_WAKE_EVENT_RETRY_CAP: "1 second"
      }
      // The stacks the cloud starts live in process groups of their own: they are stopped here, whatever happens.
      const stopStacks = killStacks(runDir, { remove: false })

      return yield* Effect.gen(function* () {
        const op = { token: world.operatorToken }
        const first = yield* world.start("cloud-a", { env: cloudEnv })
        const stackUrl = `http://127.0.0.1:${stackPort}`
        const registered = yield* call(first.url, "POST", "/operator/cloud/stacks", {
          ...op,
          body: { stack, audience: `tenant:${stack}`, reportKey: `report-1:${publicOf(reportSeed)}`, profiles: ["tenant-api-http-v2", "github-broker-events-v1"] }
        })
        evidence.check(name, "the cloud registers the stack and starts its compute", registered.status === 201, `status ${registered.status}`)

        // The tenant's GitHub binding, through its own operator routes.
        const tenant = `t-${randomBytes(3).toString("hex")}`
        yield* call(stackUrl, "POST", "/operator/tenants", { ...op, body: { id: tenant } })
        const account = yield* call(stackUrl, "POST", `/operator/tenants/${tenant}/accounts`, { ...op, body: { email: `ops@${tenant}.example` } })
        const connectors = "/operator/idle-wake/connectors"
        const steps = [
          yield* call(stackUrl, "POST", `${connectors}/instances`, { ...op, body: { id: "connector-1" } }),
          yield* call(stackUrl, "POST", `${connectors}/connections`, { ...op, body: { id: "conn-1", tenant, kind: "broker", owner: account.json?.account?.id } }),
          yield* call(stackUrl, "POST", `${connectors}/connections/conn-1/registrations`, { ...op, body: { id: "reg-1", appId: 1001 } }),
          yield* call(stackUrl, "POST", `${connectors}/registrations/reg-1/complete`, { ...op, body: { installationId: 2002 } }),
          yield* call(stackUrl, "POST", `${connectors}/endpoints`, { ...op, body: { id: "endpoint-1", channel: "channel-1", connection: "conn-1", registration: "reg-1" } })
        ]
        evidence.check(name, "the tenant's GitHub binding is set up through its operator routes", steps.every((step) => step.status === 201 || step.status === 200))

        const slept = yield* call(first.url, "POST", `/operator/cloud/stacks/${stack}/sleep`, op)
        evidence.check(name, "the stack sleeps with a proof of its GitHub binding", slept.json?.outcome === "asleep", JSON.stringify(slept.json?.outcome))
        evidence.check(name, "its compute is stopped", (yield* probePort(stackPort)) === "refused")

        const deliveries = Array.from({ length: EVENTS }, (_, i) => `proof-${i}-${randomBytes(6).toString("hex")}`)
        const intake = (url: string, deliveryId: string) => {
          const body = JSON.stringify({ action: "opened", number: deliveryId.length })
          return call(url, "POST", "/cloud/v1/connector-events", {
            token: brokerToken,
            body: {
              stack,
              connectorInstance: "connector-1",
              endpoint: "endpoint-1",
              deliveryId,
              event: "issues",
              payload: Buffer.from(body).toString("base64url"),
              githubSignature: `sha256=${createHmac("sha256", githubSecret).update(body).digest("hex")}`
            }
          })
        }
        const queued = []
        for (const deliveryId of deliveries) queued.push(yield* intake(first.url, deliveryId))
        evidence.check(name, "the broker's events are acknowledged 202 (queued, not delivered)", queued.every((answer) => answer.status === 202 && answer.json?.outcome === "queued"))

        // The fault: the cloud dies right after its 202s, while the wake the events asked for is starting.
        const killedAt = Date.now()
        process.kill(-first.process.pid, "SIGKILL")
        yield* first.process.exitCode("30 seconds").pipe(Effect.ignore)
        const pool = yield* readPool(world)
        const settledAtKill = yield* pool<{ n: number }>`
          SELECT count(*)::int AS n FROM idle_wake_cloud_connector_events WHERE state <> 'pending'`
        evidence.notes[`${name}.eventsSettledBeforeTheKill`] = settledAtKill[0]?.n ?? 0

        // Unattended from here: a new cloud process on the same database, no SQL written, no operator call.
        const second = yield* world.start("cloud-b", { env: cloudEnv })
        const restartedAt = Date.now()
        const settled = yield* pollUntil(
          pool<{ state: string; n: number }>`SELECT state, count(*)::int AS n FROM idle_wake_cloud_connector_events GROUP BY state`,
          (rows) => rows.length === 1 && rows[0]!.state === "delivered" && rows[0]!.n === EVENTS,
          { timeoutMs: 60_000, everyMs: 200 }
        )
        evidence.check(name, "every acknowledged event is settled delivered by the current lease's acknowledgement", settled.ok, JSON.stringify(settled.value))
        const recorded = yield* pool<{ delivery_id: string; n: number }>`
          SELECT delivery_id, count(*)::int AS n FROM idle_wake_connector_events GROUP BY delivery_id`
        const once = deliveries.every((id) => recorded.some((row) => row.delivery_id === id && row.n === 1))
        evidence.check(name, "the tenant recorded each event exactly once, and nothing else", once && recorded.length === EVENTS, `${recorded.length} recorded`)
        const attempts = yield* pool<{ attempt: number }>`SELECT attempt FROM idle_wake_cloud_connector_events`
        evidence.notes[`${name}.deliveryAttempts`] = attempts.map((row) => row.attempt).sort()
        const again = yield* intake(second.url, deliveries[0]!)
        evidence.check(name, "a repeated GitHub delivery is absorbed as a duplicate", again.status === 202 && again.json?.outcome === "duplicate")
        evidence.notes[`${name}.killToRestartMs`] = restartedAt - killedAt
        return { recoverySeconds: Math.round((settled.at - restartedAt) / 100) / 10 }
      }).pipe(Effect.scoped, Effect.ensuring(stopStacks))
    })
}
