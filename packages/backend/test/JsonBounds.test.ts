import { expect, layer } from "@effect/vitest"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { OPERATOR_TOKEN, startBackend, tenantWithCredentials } from "./support/Backend.ts"
import { call } from "./support/Http.ts"

const deep = (depth: number) => "[".repeat(depth) + "]".repeat(depth)
const wide = (count: number) => `[${Array.from({ length: count }, () => "0").join(",")}]`

/** The body of the attack as it was seen: an envelope whose metadata nests arrays 20,000 deep (about 40 KB). */
const deepEnvelope = (tenant: string) =>
  `{"type":"controlplane/v1","route":{"tenant":"${tenant}","project":"web","producer":"p"},"metadata":{"kind":"task.proposed","subject":"s","attributes":{"x":${deep(20_000)}}}}`

const rssMegabytes = (pid: number) => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))!
  return Number(/(\d+)/.exec(line)![1]) / 1024
}

layer(TestDatabaseLive, { excludeTestServices: true })("JSON bodies are bounded at parse time", (it) => {
  it.scoped("Bound nesting depth and element counts at parse time, before any other work, with a 422 and a stable reason on every JSON route; authentication comes first, and the inbox keeps its own order and its own audited reasons", () =>
    Effect.gen(function* () {
      const { tenant, apiKey, device } = yield* tenantWithCredentials("deep")
      const { port } = yield* startBackend()
      const operator = { token: OPERATOR_TOKEN }
      const refused = (answer: { status: number; headers: Record<string, string>; json: any }, reason: string) => {
        expect([answer.status, answer.json?.reason]).toEqual([422, reason])
        expect(answer.headers["x-correlation-id"]).toMatch(/^[0-9a-f]{32}$/)
        expect(answer.json.correlationId).toBe(answer.headers["x-correlation-id"])
      }

      // Every JSON route the framework decodes: enqueue (tenant API key) and the operator routes.
      refused(yield* call(port, "POST", "/api/outbox/messages", { token: apiKey, body: deepEnvelope(tenant) }), "json-too-deep")
      refused(
        yield* call(port, "POST", "/api/outbox/messages", { token: apiKey, body: `{"envelope":${deepEnvelope(tenant)}}` }),
        "json-too-deep"
      )
      refused(yield* call(port, "PUT", "/operator/outbox/targets/deep/web", { ...operator, body: `{"endpoint":${deep(20_000)}}` }), "json-too-deep")
      refused(yield* call(port, "PUT", "/operator/outbox/targets/deep/web", { ...operator, body: `{"endpoint":${wide(20_000)}}` }), "json-too-many-values")
      refused(yield* call(port, "PUT", "/operator/outbox/targets/deep/web", { ...operator, body: `{"endpoint":` }), "json-malformed")
      refused(
        yield* call(port, "POST", "/operator/outbox/dead-letters/deep/web/00000000-0000-4000-8000-000000000000/redrive", {
          ...operator,
          body: `{"maxAttempts":${deep(5_000)}}`
        }),
        "json-too-deep"
      )
      // The signer's routes read their own body, through the same bound.
      refused(
        yield* call(port, "POST", "/operator/tenants/deep/signing-keys", { ...operator, body: `{"keyId":"k1","publicKey":${deep(20_000)}}` }),
        "json-too-deep"
      )
      // The inbox reads its own body (route limit, then authentication) and refuses a deep envelope with its own
      // stable, audited reason (docs/controlplane-inbound.md), in linear time.
      const inbox = yield* call(port, "POST", "/controlplane/v1/envelopes", { token: device, body: deepEnvelope(tenant) })
      expect([inbox.status, inbox.json.reason, inbox.json.correlationId]).toEqual([422, "envelope-invalid", inbox.headers["x-correlation-id"]])
      expect((yield* call(port, "POST", "/controlplane/v1/envelopes", { body: deepEnvelope(tenant) })).status).toBe(401)
      // Authentication comes before the bound on the other routes too: nothing is read for an anonymous caller.
      expect((yield* call(port, "POST", "/api/outbox/messages", { body: deepEnvelope(tenant) })).status).toBe(401)
      expect((yield* call(port, "PUT", "/operator/outbox/targets/deep/web", { body: `{"endpoint":${deep(20_000)}}` })).status).toBe(401)
      // Nothing was registered by any of this.
      expect((yield* call(port, "GET", "/operator/outbox/targets/deep/web", operator)).status).toBe(404)
      expect((yield* call(port, "GET", "/operator/tenants/deep/signing-keys", operator)).json).toMatchObject({ keys: [] })
      expect((yield* call(port, "GET", "/health")).status).toBe(200)
    }))

  it.scoped("memory per request stays a small multiple of the body limit: bodies of MAX_REQUEST_BODY_BYTES (and of the inbox's limit) nested as deep as they go are refused without growing the process", () =>
    Effect.gen(function* () {
      const { device, tenant } = yield* tenantWithCredentials("mem")
      const { backend, port } = yield* startBackend()
      const body = `{"endpoint":${deep(500_000)}}`
      expect(body.length).toBeLessThanOrEqual(1024 * 1024)
      const envelope = deepEnvelope(tenant).replace(deep(20_000), deep(30_000))
      expect(envelope.length).toBeLessThanOrEqual(64 * 1024)
      const send = Effect.gen(function* () {
        const answer = yield* call(port, "PUT", "/operator/outbox/targets/deep/web", { token: OPERATOR_TOKEN, body })
        expect([answer.status, answer.json?.reason]).toEqual([422, "json-too-deep"])
        expect((yield* call(port, "POST", "/controlplane/v1/envelopes", { token: device, body: envelope })).status).toBe(422)
      })
      // Warm up first, so the figure compares steady states.
      yield* send
      const before = rssMegabytes(backend.pid)
      for (let i = 0; i < 10; i++) yield* send
      // 10 bodies of 1 MiB: the process grows by far less than one copy of each.
      expect(rssMegabytes(backend.pid) - before).toBeLessThan(64)
      expect((yield* call(port, "GET", "/health")).status).toBe(200)
    }))
})
