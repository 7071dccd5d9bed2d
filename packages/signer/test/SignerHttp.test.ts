import { expect, layer } from "@effect/vitest"
import {
  HttpApi,
  HttpApiBuilder,
  HttpBody,
  HttpClient,
  type HttpClientResponse,
  OpenApi
} from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { OperatorAuthenticationLive } from "@delivery/identity"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { encodeBase64Url, KeySource, Signer, SignerApi, SignerHttpLive } from "../src/index.ts"
import { keyPair } from "./fixtures.ts"

// Exactly what the backend does: the group added to the one HttpApi named "delivery".
const DeliveryApi = HttpApi.make("delivery").add(SignerApi)
const ApiLive = HttpApiBuilder.api(DeliveryApi).pipe(
  Layer.provide(SignerHttpLive),
  Layer.provide(OperatorAuthenticationLive)
)

const TOKEN = `op-${randomBytes(32).toString("base64url")}`

const serve = (env: Record<string, string>) =>
  HttpApiBuilder.serve().pipe(
    Layer.provide(ApiLive),
    Layer.provideMerge(BunHttpServer.layerTest),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
  )
const withToken = serve({ OPERATOR_TOKEN: TOKEN })

const SuiteLayer = Signer.Default.pipe(Layer.provide(KeySource.layerNone), Layer.provideMerge(TestDatabaseLive))

const auth = { authorization: `Bearer ${TOKEN}` }
const keysPath = (tenant: string) => `/operator/tenants/${tenant}/signing-keys`
const newTenant = (label: string) => `${label}-${randomBytes(3).toString("hex")}`
const pk = (n: number) => encodeBase64Url(keyPair(n).publicKey)

const post = (path: string, body?: unknown, headers: Record<string, string> = auth) =>
  Effect.flatMap(HttpClient.HttpClient, (client) =>
    client.post(path, {
      headers,
      body: body === undefined ? HttpBody.empty : typeof body === "string" ? HttpBody.text(body, "application/json") : HttpBody.unsafeJson(body)
    }))
const get = (path: string, headers: Record<string, string> = auth) =>
  Effect.flatMap(HttpClient.HttpClient, (client) => client.get(path, { headers }))

const answer = (response: HttpClientResponse.HttpClientResponse) =>
  Effect.map(response.json, (body) => ({ status: response.status, body: body as any }))

interface AuditRow {
  readonly key_id: string
  readonly action: string
  readonly outcome: string
  readonly actor: string
  readonly correlation_id: string
}
const auditOf = (tenant: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<AuditRow>`SELECT key_id, action, outcome, actor, correlation_id FROM signer_key_audit
      WHERE tenant = ${tenant} ORDER BY id`.withoutTransform)

layer(SuiteLayer, { excludeTestServices: true })("signing keys over HTTP (operator)", (it) => {
  it.effect("an operator registers, lists, rotates and revokes a tenant's keys; each change writes its audit row as operator:environment", () =>
    Effect.gen(function* () {
      const tenant = newTenant("ops")
      // The server's correlation id, never the caller's own.
      const registered = yield* post(keysPath(tenant), { keyId: "k1", publicKey: pk(1) }, { ...auth, "x-correlation-id": "ticket-4711" })
      expect(registered.status).toBe(201)
      const correlationId = registered.headers["x-correlation-id"]
      expect(correlationId).toMatch(/^[0-9a-f]{32}$/)
      expect(yield* registered.json).toMatchObject({
        outcome: "registered",
        correlationId,
        retired: [],
        key: { keyId: "k1", publicKey: pk(1), state: "active", retiredAt: null, revokedAt: null, verifyUntil: null }
      })

      const rotated = yield* answer(yield* post(`${keysPath(tenant)}/rotate`, { keyId: "k2", publicKey: pk(2) }))
      expect(rotated.status).toBe(201)
      expect(rotated.body).toMatchObject({ outcome: "rotated", key: { keyId: "k2", state: "active" }, retired: [{ keyId: "k1", state: "retired" }] })
      expect(Date.parse(rotated.body.retired[0].verifyUntil)).toBeGreaterThan(Date.now() + 89 * 86_400_000)

      const revoked = yield* answer(yield* post(`${keysPath(tenant)}/k1/revoke`))
      expect(revoked).toMatchObject({ status: 200, body: { outcome: "revoked", key: { keyId: "k1", state: "revoked" } } })

      const list = yield* answer(yield* get(keysPath(tenant)))
      expect(list.status).toBe(200)
      expect(list.body.tenant).toBe(tenant)
      expect(list.body.keys.map((key: any) => [key.keyId, key.publicKey, key.state])).toEqual([
        ["k1", pk(1), "revoked"],
        ["k2", pk(2), "active"]
      ])

      const audit = yield* auditOf(tenant)
      expect(audit.map((row) => [row.key_id, row.action, row.outcome, row.actor])).toEqual([
        ["k1", "register", "applied", "operator:environment"],
        ["k1", "retire", "applied", "operator:environment"],
        ["k2", "rotate", "applied", "operator:environment"],
        ["k1", "revoke", "applied", "operator:environment"]
      ])
      expect(audit[0]!.correlation_id).toBe(correlationId)
      // The retirement and the rotation that caused it share the rotation's correlation id.
      expect(audit[1]!.correlation_id).toBe(rotated.body.correlationId)
      expect(audit[2]!.correlation_id).toBe(rotated.body.correlationId)
      // Never key material: the audit table has no column that could hold any.
      const sql = yield* SqlClient.SqlClient
      const columns = yield* sql<{ column_name: string }>`
        SELECT column_name FROM information_schema.columns WHERE table_name = 'signer_key_audit' ORDER BY ordinal_position`
      expect(columns.map((c) => c.column_name)).toEqual(["id", "tenant", "key_id", "action", "outcome", "actor", "at", "correlation_id"])
    }).pipe(Effect.provide(withToken)))

  it.effect("repeats are idempotent: 200 unchanged, audited as unchanged; conflicts are 409 key-conflict and write no audit row", () =>
    Effect.gen(function* () {
      const tenant = newTenant("idem")
      expect((yield* post(keysPath(tenant), { keyId: "k1", publicKey: pk(1) })).status).toBe(201)
      expect(yield* answer(yield* post(keysPath(tenant), { keyId: "k1", publicKey: pk(1) })))
        .toMatchObject({ status: 200, body: { outcome: "unchanged", key: { keyId: "k1" } } })
      const conflicts: Array<[string, unknown, string]> = [
        [keysPath(tenant), { keyId: "k1", publicKey: pk(2) }, "public-key-differs"],
        [keysPath(tenant), { keyId: "k2", publicKey: pk(2) }, "tenant-has-active-key"]
      ]
      for (const [path, body, detail] of conflicts) {
        expect(yield* answer(yield* post(path, body)))
          .toEqual({ status: 409, body: { _tag: "KeyConflict", reason: "key-conflict", tenant, keyId: (body as any).keyId, detail } })
      }
      expect((yield* post(`${keysPath(tenant)}/rotate`, { keyId: "k2", publicKey: pk(2) })).status).toBe(201)
      expect((yield* answer(yield* post(`${keysPath(tenant)}/rotate`, { keyId: "k2", publicKey: pk(2) }))).body.outcome).toBe("unchanged")
      expect((yield* answer(yield* post(`${keysPath(tenant)}/rotate`, { keyId: "k1", publicKey: pk(1) }))).body)
        .toMatchObject({ _tag: "KeyConflict", detail: "key-not-active" })
      expect((yield* post(`${keysPath(tenant)}/k1/revoke`)).status).toBe(200)
      expect((yield* answer(yield* post(`${keysPath(tenant)}/k1/revoke`))).body.outcome).toBe("unchanged")
      expect((yield* auditOf(tenant)).map((row) => `${row.key_id}:${row.action}:${row.outcome}`)).toEqual([
        "k1:register:applied",
        "k1:register:unchanged",
        "k1:retire:applied",
        "k2:rotate:applied",
        "k2:rotate:unchanged",
        "k1:revoke:applied",
        "k1:revoke:unchanged"
      ])
    }).pipe(Effect.provide(withToken)))

  it.effect("revoking a key id the tenant does not have (another tenant's included) is 404 key-unknown", () =>
    Effect.gen(function* () {
      const [mine, theirs] = [newTenant("mine"), newTenant("theirs")]
      expect((yield* post(keysPath(theirs), { keyId: "only-theirs", publicKey: pk(3) })).status).toBe(201)
      expect(yield* answer(yield* post(`${keysPath(mine)}/only-theirs/revoke`))).toEqual({
        status: 404,
        body: { _tag: "SigningKeyNotFound", reason: "key-unknown", tenant: mine, keyId: "only-theirs" }
      })
      expect((yield* answer(yield* get(keysPath(theirs)))).body.keys[0].state).toBe("active")
      expect(yield* auditOf(mine)).toEqual([])
    }).pipe(Effect.provide(withToken)))

  it.effect("invalid requests are 422 with stable fields and problems, never echoing the values, and change nothing", () =>
    Effect.gen(function* () {
      const tenant = newTenant("bad")
      const cases: Array<[string, unknown, ReadonlyArray<{ field: string; problem: string }>]> = [
        [keysPath(tenant), "{\"keyId\": \"k1\",", [{ field: "body", problem: "not-json" }]],
        [keysPath(tenant), undefined, [{ field: "body", problem: "not-json" }]],
        [keysPath(tenant), [1, 2], [{ field: "body", problem: "invalid" }]],
        [keysPath(tenant), { keyId: "k1", publicKey: pk(1), privateKey: "c2VjcmV0LXNlZWQ" }, [{ field: "body", problem: "unknown-member" }]],
        [keysPath(tenant), { keyId: "k1" }, [{ field: "publicKey", problem: "missing" }]],
        [keysPath(tenant), { keyId: "K 1", publicKey: `${pk(1)}=` }, [{ field: "keyId", problem: "invalid" }, { field: "publicKey", problem: "invalid" }]],
        [keysPath(tenant), { keyId: "k1", publicKey: pk(1).slice(0, 42) }, [{ field: "publicKey", problem: "invalid" }]],
        [`${keysPath(tenant)}/rotate`, { keyId: "k1", publicKey: 42 }, [{ field: "publicKey", problem: "invalid" }]],
        [keysPath("Not_A_Tenant"), { keyId: "k1", publicKey: pk(1) }, [{ field: "tenant", problem: "invalid" }]],
        [`${keysPath(tenant)}/${"k".repeat(65)}/revoke`, undefined, [{ field: "keyId", problem: "invalid" }]]
      ]
      for (const [path, body, issues] of cases) {
        const response = yield* post(path, body)
        const text = yield* response.text
        expect({ status: response.status, body: JSON.parse(text) })
          .toEqual({ status: 422, body: { _tag: "SigningKeyRequestInvalid", reason: "request-invalid", issues } })
        expect(text).not.toContain("c2VjcmV0LXNlZWQ")
        expect(text).not.toContain(pk(1).slice(0, 20))
      }
      expect((yield* answer(yield* get(keysPath("Not_A_Tenant")))).status).toBe(422)
      expect((yield* answer(yield* get(keysPath(tenant)))).body.keys).toEqual([])
      expect(yield* auditOf(tenant)).toEqual([])
    }).pipe(Effect.provide(withToken)))

  it.effect("without the operator token every route is 401 (403 while OPERATOR_TOKEN is unset), before any body is read", () =>
    Effect.gen(function* () {
      const tenant = newTenant("anon")
      for (const headers of [{}, { authorization: "Bearer not-the-operator-token-at-all-000000" }]) {
        const response = yield* post(keysPath(tenant), { keyId: "k1", publicKey: pk(1) }, headers)
        expect(response.status).toBe(401)
        expect(response.headers["www-authenticate"]).toMatch(/^Bearer\b/)
        // Authentication comes first: even a malformed body gets 401, not 422.
        expect((yield* post(keysPath(tenant), "{", headers)).status).toBe(401)
        expect((yield* get(keysPath(tenant), headers)).status).toBe(401)
      }
      const disabled = yield* Effect.provide(post(`${keysPath(tenant)}/rotate`, { keyId: "k1", publicKey: pk(1) }), serve({}))
      expect(disabled.status).toBe(403)
      expect((yield* answer(yield* get(keysPath(tenant)))).body.keys).toEqual([])
      expect(yield* auditOf(tenant)).toEqual([])
    }).pipe(Effect.provide(withToken)))

  it.effect("the OpenAPI document lists the operator routes with operator bearer security and their statuses", () =>
    Effect.sync(() => {
      const spec = OpenApi.fromApi(DeliveryApi)
      const base = "/operator/tenants/{tenant}/signing-keys"
      const statuses = (operation: any) => Object.keys(operation?.responses ?? {}).sort()
      const refusals = ["400", "401", "403", "422", "429", "503"]
      expect(statuses(spec.paths[base]?.get)).toEqual(["200", ...refusals].sort())
      expect(statuses(spec.paths[base]?.post)).toEqual(["200", "201", "409", ...refusals].sort())
      expect(statuses(spec.paths[`${base}/rotate`]?.post)).toEqual(["200", "201", "409", ...refusals].sort())
      expect(statuses(spec.paths[`${base}/{keyId}/revoke`]?.post)).toEqual(["200", "404", ...refusals].sort())
      expect(spec.paths[base]?.post?.security).toEqual([{ operatorBearer: [] }])
      // The documented body is closed, as the handler enforces.
      expect(spec.components.schemas.SigningKeyRequest).toMatchObject({
        required: ["keyId", "publicKey"],
        additionalProperties: false
      })
      expect(spec.paths[`${base}/{keyId}/revoke`]?.post?.parameters?.map((p: any) => [p.name, p.schema.pattern]))
        .toEqual([["tenant", "^[a-z0-9][a-z0-9_-]{0,63}$"], ["keyId", "^[a-z0-9][a-z0-9_-]{0,63}$"]])
    }))
})
