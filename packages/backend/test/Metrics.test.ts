import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Identity } from "@delivery/identity"
import { LoopbackProvider, LoopbackReply, OPERATOR_TOKEN, startBackend } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { eventually, outboxTenant, signingKey } from "./support/Console.ts"
import { call } from "./support/Http.ts"
import { op, startCloud } from "./support/Cloud.ts"
import { readScrape } from "./support/Scrape.ts"

// GET /metrics through the real backend process (`packages/backend/src/main.ts`), after work whose every outcome
// the test knows: outbox deliveries to a loopback receiver that refuses, fails and accepts; requests that are
// answered, refused by the routes and by the edge; one limiter refusal. The scrape is read with a Prometheus text
// parser and compared with that work.

const TENANT = `metrics-${randomBytes(3).toString("hex")}`
const METRICS_TOKEN = `mt-${randomBytes(32).toString("base64url")}`
const key = signingKey()

const SuiteLayer = Layer.mergeAll(Identity.Default, LoopbackProvider.Default).pipe(Layer.provideMerge(TestDatabaseLive))

layer(SuiteLayer, { excludeTestServices: true })("Prometheus metrics of a real backend process", (it) => {
  it.scoped(
    "GET /metrics requires METRICS_TOKEN when set (401 with a stable reason and the correlation id); the scrape counts each recorded delivery outcome, each answer by route template and status (never a tenant name), times every provider call and request, counts limiter refusals, and reports queue depth per family and state, the workers and the pool",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const receiver = yield* LoopbackProvider
        yield* receiver.reset
        // The first attempt to arrive is refused for good (dead letter), the second fails (retried, then delivered).
        yield* receiver.script({ times: 1, reply: LoopbackReply.status(400) })
        yield* receiver.script({ times: 1, reply: LoopbackReply.status(503) })

        const { baseUrl, port } = yield* startBackend({
          SIGNER_KEYS: `${TENANT}:k1:${key.seed}`,
          OUTBOX_POLL_INTERVAL: "100 millis",
          OUTBOX_BACKOFF_BASE: "100 millis",
          OUTBOX_BACKOFF_CAP: "200 millis",
          IDENTITY_SIGNIN_LIMIT: "1",
          METRICS_TOKEN
        })
        const world = yield* outboxTenant(baseUrl, TENANT, key, receiver.urlFor("/hooks/metrics"))
        for (const sequence of [1, 2, 3]) {
          const enqueued = yield* call(port, "POST", "/api/outbox/messages", {
            token: world.apiKey,
            body: {
              envelope: {
                type: "controlplane/v1",
                route: { tenant: TENANT, project: "web", producer: "scheduler" },
                eventId: `evt-metrics-${String(sequence).padStart(6, "0")}`,
                idempotencyKey: `metrics:${sequence}`,
                sequence,
                createdAt: "2026-12-03T12:00:00Z",
                schemaVersion: 1,
                metadata: { kind: "task.proposed", subject: `metrics-${sequence}`, attributes: {} }
              },
              maxAttempts: 3
            }
          })
          expect(enqueued.status).toBe(201)
        }
        const states = sql<{ state: string; n: number }>`
          SELECT state, count(*)::int AS n FROM outbox_messages WHERE tenant = ${TENANT} GROUP BY state ORDER BY state`.withoutTransform
        yield* eventually(states, (rows) => JSON.stringify(rows) === JSON.stringify([{ state: "dead", n: 1 }, { state: "delivered", n: 2 }]))
        expect((yield* receiver.requests).length).toBe(4)

        // Answers of known routes and statuses, and of no route at all.
        const deadLetters = `/operator/outbox/dead-letters/${TENANT}/web`
        expect((yield* call(port, "GET", deadLetters, { token: OPERATOR_TOKEN })).status).toBe(200)
        expect((yield* call(port, "GET", deadLetters)).status).toBe(401)
        expect((yield* call(port, "GET", `/no/such/${TENANT}`)).status).toBe(404)
        expect((yield* call(port, "POST", "/controlplane/v1/envelopes", { body: { type: "controlplane/v1" } })).status).toBe(401)
        // IDENTITY_SIGNIN_LIMIT=1: the second sign-in for one address is refused by the limit.
        const signIn = { tenant: TENANT, email: `ops@${TENANT}.example`, password: "not-the-password-1" }
        expect((yield* call(port, "POST", "/api/sessions", { body: signIn })).status).toBe(401)
        expect((yield* call(port, "POST", "/api/sessions", { body: signIn })).status).toBe(429)

        // The token: missing, wrong, right.
        const missing = yield* call(port, "GET", "/metrics")
        expect(missing.status).toBe(401)
        expect(missing.json).toEqual({ _tag: "Unauthenticated", reason: "metrics-token-missing", correlationId: missing.headers["x-correlation-id"] })
        expect(missing.headers["www-authenticate"]).toBe("Bearer")
        const wrong = yield* call(port, "GET", "/metrics", { token: `${METRICS_TOKEN}x` })
        expect(wrong.status).toBe(401)
        expect(wrong.json).toMatchObject({ reason: "metrics-token-invalid", correlationId: wrong.headers["x-correlation-id"] })
        const answer = yield* call(port, "GET", "/metrics", { token: METRICS_TOKEN })
        expect(answer.status).toBe(200)
        expect(answer.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/)
        const scrape = readScrape(answer.text)

        // Deliveries: the fenced writes that landed, by outcome; one provider call timed per attempt.
        expect(scrape.value("delivery_outcomes_total", { family: "outbox", outcome: "delivered" })).toBe(2)
        expect(scrape.value("delivery_outcomes_total", { family: "outbox", outcome: "retry" })).toBe(1)
        expect(scrape.value("delivery_outcomes_total", { family: "outbox", outcome: "dead" })).toBe(1)
        expect(scrape.families.find((family) => family.name === "delivery_provider_call_duration_seconds")?.type).toBe("HISTOGRAM")
        expect(scrape.sample("delivery_provider_call_duration_seconds_count", { family: "outbox" })).toBe(4)
        expect(scrape.sample("delivery_provider_call_duration_seconds_bucket", { family: "outbox", le: "+Inf" })).toBe(4)

        // Requests by route template and status; the histogram counts the same requests.
        const requests = (method: string, route: string, status: number) =>
          scrape.value("delivery_http_requests_total", { method, route, status: String(status) })
        expect(requests("POST", "/api/outbox/messages", 201)).toBe(3)
        expect(requests("GET", "/operator/outbox/dead-letters/:tenant/:project", 200)).toBe(1)
        expect(requests("GET", "/operator/outbox/dead-letters/:tenant/:project", 401)).toBe(1)
        expect(requests("GET", "unmatched", 404)).toBe(1)
        expect(requests("POST", "/api/sessions", 401)).toBe(1)
        expect(requests("POST", "/api/sessions", 429)).toBe(1)
        expect(requests("GET", "/metrics", 401)).toBe(2)
        expect(scrape.sample("delivery_http_request_duration_seconds_count", { method: "POST", route: "/api/outbox/messages" })).toBe(3)
        expect(scrape.sample("delivery_http_request_duration_seconds_count", { method: "GET", route: "/operator/outbox/dead-letters/:tenant/:project" })).toBe(2)
        // Ingest: from arrival to the answer, by outcome (an unauthenticated envelope is refused).
        expect(requests("POST", "/controlplane/v1/envelopes", 401)).toBe(1)
        expect(scrape.sample("delivery_ingest_duration_seconds_count", { outcome: "refused" })).toBe(1)

        expect(scrape.value("delivery_limiter_refusals_total", { reason: "identity-signin" })).toBe(1)

        // State read at scrape time.
        const depth = (state: string) => scrape.value("delivery_queue_depth", { family: "outbox", state })
        expect([depth("pending"), depth("delivering"), depth("delivered"), depth("dead")]).toEqual([0, 0, 2, 1])
        expect(scrape.value("delivery_queue_oldest_due_age_seconds", { family: "outbox" })).toBe(0)
        expect(scrape.value("delivery_queue_view_up", { family: "outbox" })).toBe(1)
        expect(scrape.value("delivery_worker_running", { worker: "outbox-delivery" })).toBe(1)
        expect(scrape.value("delivery_db_pool_max_connections")).toBe(10)
        expect(scrape.value("delivery_db_pool_connections", { state: "idle" })).toBeGreaterThanOrEqual(0)

        // Bounded labels: no tenant, no raw path, no token anywhere in the scrape.
        expect(answer.text).not.toContain(TENANT)
        expect(answer.text).not.toContain(METRICS_TOKEN)
        expect(answer.text).not.toContain(OPERATOR_TOKEN)
        for (const value of scrape.labelValues) expect(value).not.toMatch(/metrics-[0-9a-f]{6}|\/no\/such/)
      })
  )

  it.scoped("the cloud role serves GET /metrics too (its requests by route template, its queue families, its role), and writes LOG_FORMAT=json", () =>
    Effect.gen(function* () {
      const cloud = yield* startCloud({ stacks: [], env: { METRICS_TOKEN, LOG_FORMAT: "json" } })
      expect((yield* call(cloud.port, "GET", "/operator/cloud/stacks/stack-unknown", op)).status).toBe(404)
      expect((yield* call(cloud.port, "GET", "/metrics")).json).toMatchObject({ reason: "metrics-token-missing" })
      const answer = yield* call(cloud.port, "GET", "/metrics", { token: METRICS_TOKEN })
      expect(answer.status).toBe(200)
      const scrape = readScrape(answer.text)
      expect(scrape.value("delivery_http_requests_total", { method: "GET", route: "/operator/cloud/stacks/:stack", status: "404" })).toBe(1)
      expect(scrape.value("delivery_queue_view_up", { family: "cloud-stacks" })).toBe(1)
      expect(scrape.value("delivery_queue_view_up", { family: "cloud-connector-events" })).toBe(1)
      expect(scrape.families.find((family) => family.name === "target_info")?.metrics[0]?.labels).toMatchObject({ delivery_role: "cloud" })
      expect(answer.text).not.toContain("stack-unknown")
      // `bun run` echoes the script it runs (`$ bun …`) before the process writes anything.
      const lines = (yield* cloud.process.output).split("\n").filter((line) => line.trim() !== "" && !line.startsWith("$ "))
      expect(lines.length).toBeGreaterThan(3)
      for (const line of lines) expect(JSON.parse(line)).toMatchObject({ logLevel: expect.any(String) })
    }))

  it.scoped("without METRICS_TOKEN GET /metrics is open: it carries counts and durations, no secrets", () =>
    Effect.gen(function* () {
      const { port } = yield* startBackend()
      const answer = yield* call(port, "GET", "/metrics")
      expect(answer.status).toBe(200)
      const scrape = readScrape(answer.text)
      expect(scrape.value("target_info", { service_name: "delivery-backend", delivery_role: "backend", telemetry_sdk_name: "@effect/opentelemetry", telemetry_sdk_language: "nodejs" })).toBe(1)
      expect(answer.text).not.toContain(OPERATOR_TOKEN)
    }))
})
