import { expect, layer } from "@effect/vitest"
import { HttpApi, HttpApiBuilder, HttpClient, HttpClientRequest } from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import {
  ApiKeyName,
  AuthenticationLive,
  Email,
  Identity,
  OperatorAuthenticationLive,
  Permission,
  TenantId
} from "@delivery/identity"
import { KeyId, ProjectId, Signer } from "@delivery/signer"
import { LoopbackProvider, LoopbackReply } from "@delivery/testing"
import { ConfigProvider, Effect, Layer, Redacted, Schema } from "effect"
import { randomBytes } from "node:crypto"
import {
  ENQUEUE_PERMISSION,
  Outbox,
  OutboxApi,
  OutboxHttpLive,
  OutboxOperatorApi,
  OutboxOperatorHttpLive
} from "../src/index.ts"
import { deliveryWith, publicKeyOf, request, resetOutbox, rowOf, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

// Exactly what the backend serves: one HttpApi named "delivery" with the outbox groups.
const DeliveryApi = HttpApi.make("delivery").add(OutboxOperatorApi).add(OutboxApi)
const ApiLive = HttpApiBuilder.api(DeliveryApi).pipe(
  Layer.provide([OutboxOperatorHttpLive, OutboxHttpLive]),
  Layer.provide([AuthenticationLive, OperatorAuthenticationLive])
)
const OPERATOR = `op-${randomBytes(32).toString("base64url")}`
const serve = HttpApiBuilder.serve().pipe(
  Layer.provide(ApiLive),
  Layer.provideMerge(BunHttpServer.layerTest),
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["OPERATOR_TOKEN", OPERATOR]]))))
)

const call = (method: "GET" | "PUT" | "POST", path: string, options: { body?: unknown; token?: string } = {}) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    let req = HttpClientRequest.make(method)(path)
    if (options.token !== undefined) req = HttpClientRequest.bearerToken(req, options.token)
    if (options.body !== undefined) req = HttpClientRequest.bodyUnsafeJson(req, options.body)
    const response = yield* client.execute(req)
    return { status: response.status, json: (yield* response.json) as any }
  })
const asOperator = (method: "GET" | "PUT" | "POST", path: string, body?: unknown) =>
  call(method, path, body === undefined ? { token: OPERATOR } : { token: OPERATOR, body })

layer(Identity.Default.pipe(Layer.provideMerge(SuiteLayer)), { excludeTestServices: true })("Outbox service and HTTP routes (spec 000)", (it) => {
  it.effect("Enqueue: a signed envelope enters the outbox under its idempotency key in one transaction; reusing the key returns the original immutable envelope, also after a key rotation", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      yield* setupTenant("beta", "web", "https://receiver.example/hooks")
      const outbox = yield* Outbox
      const sent = request("beta", "web", { key: "task-7:proposal:1" })
      const first = yield* outbox.enqueue(sent)
      expect(first).toMatchObject({ replayed: false, envelope: { keyId: "k1" }, message: { state: "pending", attempt: 0 } })
      yield* (yield* Signer).rotate(TenantId.make("beta"), KeyId.make("k2"), publicKeyOf(2))
      const again = yield* outbox.enqueue(sent)
      expect(again.replayed).toBe(true)
      expect(again.envelope).toEqual(first.envelope)
      expect(again.message.id).toBe(first.message.id)
      const sql = yield* SqlClient.SqlClient
      expect(yield* sql`SELECT count(*)::int AS n FROM outbox_messages`).toEqual([{ n: 1 }])
      // Without a registered target nothing is signed or stored.
      const missing = yield* Effect.flip(outbox.enqueue(request("beta", "nowhere")))
      expect(missing).toMatchObject({ _tag: "DeliveryTargetMissing", reason: "delivery-target-missing" })
    }))

  it.effect("same key with different content is refused with the stable reason idempotency-key-conflict (409); the enqueue route takes API keys with outbox:enqueue for their own tenant only", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      yield* setupTenant("gamma", "web", "https://receiver.example/hooks")
      const identity = yield* Identity
      const tenant = TenantId.make("gamma")
      yield* Effect.ignore(identity.createTenant(tenant))
      const account = yield* identity.createAccount({
        tenant, email: Schema.decodeSync(Email)(`ops-${randomBytes(3).toString("hex")}@gamma.example`)
      })
      const issue = (permissions: ReadonlyArray<string>) =>
        identity.issueApiKey({ tenant, account, kind: "agent", name: ApiKeyName.make("scheduler"), permissions: permissions.map((p) => Permission.make(p)) })
      const key = Redacted.value((yield* issue([ENQUEUE_PERMISSION])).token)
      const weak = Redacted.value((yield* issue(["receipts:read"])).token)
      const body = request("gamma", "web", { key: "task-9:proposal:1", title: "first" })
      const created = yield* call("POST", "/api/outbox/messages", { token: key, body })
      expect(created.status).toBe(201)
      expect(created.json).toMatchObject({ replayed: false, message: { tenant: "gamma", project: "web", idempotencyKey: "task-9:proposal:1" } })
      const replayed = yield* call("POST", "/api/outbox/messages", { token: key, body })
      expect(replayed.status).toBe(200)
      expect(replayed.json.envelope).toEqual(created.json.envelope)
      const conflict = yield* call("POST", "/api/outbox/messages", {
        token: key, body: { ...body, envelope: { ...body.envelope, metadata: { ...body.envelope.metadata, attributes: { title: "second" } } } }
      })
      expect(conflict.status).toBe(409)
      expect(conflict.json).toMatchObject({ _tag: "IdempotencyKeyConflict", reason: "idempotency-key-conflict" })
      const otherMax = yield* call("POST", "/api/outbox/messages", { token: key, body: { ...body, maxAttempts: 3 } })
      expect(otherMax.status).toBe(409)
      expect((yield* call("POST", "/api/outbox/messages", { token: weak, body })).status).toBe(403)
      const foreign = request("beta", "web")
      expect((yield* call("POST", "/api/outbox/messages", { token: key, body: foreign })).json).toMatchObject({ reason: "tenant-mismatch" })
      expect((yield* call("POST", "/api/outbox/messages", { body })).status).toBe(401)
    }).pipe(Effect.provide(serve)))

  it.effect("the stored envelope and identity are immutable and attempts never move backwards: the schema refuses both", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      yield* setupTenant("beta", "web", "https://receiver.example/hooks")
      const { message } = yield* (yield* Outbox).enqueue(request("beta", "web"))
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE outbox_messages SET attempt = 2 WHERE id = ${message.id}`
      for (const statement of [
        sql`UPDATE outbox_envelopes SET envelope = '{}' WHERE id = ${message.id}`,
        sql`UPDATE outbox_envelopes SET idempotency_key = 'other' WHERE id = ${message.id}`,
        sql`UPDATE outbox_envelopes SET created_at = created_at - interval '1 day' WHERE id = ${message.id}`,
        sql`UPDATE outbox_messages SET tenant = 'other' WHERE id = ${message.id}`,
        sql`UPDATE outbox_messages SET attempt = 0 WHERE id = ${message.id}`
      ]) {
        expect(String(yield* Effect.flip(statement))).toMatch(/SqlError/)
      }
      expect(yield* rowOf(message.id)).toMatchObject({ attempt: 2 })
    }))

  it.effect("the state rows carry only the primary key, the claim index and the dead-letter index (any other index is written by every claim and outcome); the console's list walks the envelopes' scope index, which keeps each message's enqueue time", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const sql = yield* SqlClient.SqlClient
      const indexes = (table: string) =>
        Effect.map(
          sql<{ name: string }>`SELECT indexname AS name FROM pg_indexes WHERE tablename = ${table} ORDER BY 1`,
          (rows) => rows.map((r) => r.name)
        )
      expect(yield* indexes("outbox_messages")).toEqual(["outbox_messages_dead", "outbox_messages_due", "outbox_messages_pkey"])
      expect(yield* indexes("outbox_envelopes")).toContain("outbox_envelopes_scope")
      yield* setupTenant("beta", "web", "https://receiver.example/hooks")
      const outbox = yield* Outbox
      const enqueued: Array<{ id: string; createdAt: Date }> = []
      for (let i = 0; i < 3; i++) enqueued.push((yield* outbox.enqueue(request("beta", "web"))).message)
      const first = yield* outbox.messages(TenantId.make("beta"), ProjectId.make("web"), { limit: 2 })
      const second = yield* outbox.messages(TenantId.make("beta"), ProjectId.make("web"), { cursor: first.nextCursor! })
      expect([...first.items, ...second.items].map((m) => [m.id, m.createdAt])).toEqual(enqueued.map((m) => [m.id, m.createdAt]))
      expect(second.nextCursor).toBeNull()
      const stored = yield* sql<{ same: boolean }>`
        SELECT e.created_at = m.created_at AS same FROM outbox_envelopes e JOIN outbox_messages m USING (id)`
      expect(stored).toEqual(enqueued.map(() => ({ same: true })))
    }))

  it.effect("Dead letters: queryable only by explicit tenant and project, cursor-paged, never more than 100 per page (larger sizes are clamped), never crossing tenants; diagnostics keep only a stable code", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const sql = yield* SqlClient.SqlClient
      // Three rows share each dead_at, so the keyset must break ties on id.
      const seed = (tenant: string, project: string, n: number) => sql`
        WITH e AS (
          INSERT INTO outbox_envelopes (id, tenant, project, idempotency_key, request_sha256, event_identity, envelope,
            created_at)
          SELECT gen_random_uuid(), ${tenant}, ${project}, 'k-' || g, encode(sha256(g::text::bytea), 'hex'),
            encode(sha256(g::text::bytea), 'hex'), '{"secret":"payload"}', timestamptz '2030-01-01'
          FROM generate_series(1, ${n}) g
          RETURNING id, idempotency_key
        )
        INSERT INTO outbox_messages (id, tenant, project, max_attempts, attempt_ceiling, state, attempt, last_error,
          dead_reason, created_at, dead_at)
        SELECT id, ${tenant}, ${project}, 3, 3, 'dead', 3, 'provider-5xx', 'attempts-exhausted', timestamptz '2030-01-01',
          timestamptz '2030-01-01' + (substr(idempotency_key, 3)::int / 3) * interval '1 second'
        FROM e`
      yield* seed("acme", "web", 230)
      yield* seed("beta", "web", 7)
      yield* seed("acme", "other", 3)
      const seen: Array<any> = []
      let cursor: string | null = null
      const sizes: Array<number> = []
      do {
        const page: { status: number; json: any } = yield* asOperator(
          "GET", `/operator/outbox/dead-letters/acme/web?limit=500${cursor === null ? "" : `&cursor=${cursor}`}`
        )
        expect(page.status).toBe(200)
        sizes.push(page.json.items.length)
        seen.push(...page.json.items)
        cursor = page.json.nextCursor
      } while (cursor !== null)
      expect(sizes).toEqual([100, 100, 30])
      expect(new Set(seen.map((m) => m.id)).size).toBe(230)
      expect(seen.every((m) => m.tenant === "acme" && m.project === "web" && m.lastError === "provider-5xx")).toBe(true)
      expect(JSON.stringify(seen)).not.toContain("secret")
      const small = yield* asOperator("GET", "/operator/outbox/dead-letters/beta/web?limit=5")
      expect(small.json.items.length).toBe(5)
      expect((yield* asOperator("GET", "/operator/outbox/dead-letters/beta/web?cursor=bm9wZQ")).json).toMatchObject({ reason: "cursor-invalid" })
      expect((yield* asOperator("GET", "/operator/outbox/dead-letters/beta/web?limit=0")).status).toBe(400)
      expect((yield* call("GET", "/operator/outbox/dead-letters/beta/web")).status).toBe(401)
    }).pipe(Effect.provide(serve)))

  it.effect("Operator redrive: new attempts with the same identity and envelope, recorded in the audit table in the same transaction; the worker then delivers under the same Idempotency-Key", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const receiver = yield* LoopbackProvider
      yield* receiver.reset
      yield* setupTenant("acme", "web", receiver.urlFor("/hooks/acme"))
      const outbox = yield* Outbox
      const { message } = yield* outbox.enqueue(request("acme", "web", { maxAttempts: 2 }))
      yield* receiver.script({ key: message.id, times: 1, reply: LoopbackReply.status(400) })
      const delivery = yield* deliveryWith("http")
      yield* delivery.tick("w1")
      expect(yield* rowOf(message.id)).toMatchObject({ state: "dead", attempt: 1, dead_reason: "rejected" })
      // The audit row and the redrive share one transaction: an audit row that cannot be written undoes it.
      yield* Effect.flip(outbox.redrive(TenantId.make("acme"), message.project, message.id, "Not A Valid Actor!"))
      expect(yield* rowOf(message.id)).toMatchObject({ state: "dead" })
      expect((yield* asOperator("POST", `/operator/outbox/dead-letters/beta/web/${message.id}/redrive`, {})).status).toBe(404)
      const redriven = yield* asOperator("POST", `/operator/outbox/dead-letters/acme/web/${message.id}/redrive`, {})
      expect(redriven.status).toBe(200)
      expect(redriven.json).toMatchObject({ id: message.id, state: "pending", attempt: 1, attemptCeiling: 3, deadReason: null })
      const again = yield* asOperator("POST", `/operator/outbox/dead-letters/acme/web/${message.id}/redrive`, {})
      expect(again).toMatchObject({ status: 409, json: { reason: "message-not-dead" } })
      const sql = yield* SqlClient.SqlClient
      expect(yield* sql`SELECT action, actor, attempt, detail FROM outbox_audit WHERE message_id = ${message.id}`)
        .toEqual([{ action: "redrive", actor: "operator:environment", attempt: 1, detail: "provider-4xx" }])
      yield* delivery.tick("w1")
      expect(yield* rowOf(message.id)).toMatchObject({ state: "delivered", attempt: 2 })
      const sent = yield* receiver.requests
      expect(sent.map((r) => r.idempotencyKey)).toEqual([message.id, message.id])
      expect(sent[1]!.bodyText).toBe(sent[0]!.bodyText)
    }).pipe(Effect.provide(serve)))

  it.effect("Delivery targets: registered or replaced through the operator route, validated like every provider endpoint, audited without the URL", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const put = (endpoint: string) => asOperator("PUT", "/operator/outbox/targets/acme/web", { endpoint })
      for (const [endpoint, code] of [
        ["http://receiver.example/hooks", "endpoint-insecure-scheme"],
        ["https://receiver.example/hooks?token=1", "endpoint-has-query"],
        ["https://user:pw@receiver.example/hooks", "endpoint-has-credentials"],
        ["ftp://receiver.example/hooks", "endpoint-unsupported-scheme"]
      ] as const) {
        expect(yield* put(endpoint)).toMatchObject({ status: 422, json: { reason: "delivery-target-invalid", code } })
      }
      expect((yield* put("https://receiver.example/a")).status).toBe(200)
      expect((yield* put("https://receiver.example/b")).json).toMatchObject({ endpoint: "https://receiver.example/b" })
      expect((yield* asOperator("GET", "/operator/outbox/targets/acme/web")).json).toMatchObject({ endpoint: "https://receiver.example/b" })
      expect((yield* asOperator("GET", "/operator/outbox/targets/acme/none")).status).toBe(404)
      const sql = yield* SqlClient.SqlClient
      expect(yield* sql`SELECT action, actor, detail FROM outbox_audit ORDER BY audit_id`).toEqual([
        { action: "target-registered", actor: "operator:environment", detail: null },
        { action: "target-replaced", actor: "operator:environment", detail: null }
      ])
      expect((yield* call("PUT", "/operator/outbox/targets/acme/web", { body: { endpoint: "https://x.example/" } })).status).toBe(401)
    }).pipe(Effect.provide(serve)))
})
