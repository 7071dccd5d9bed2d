import { expect, layer } from "@effect/vitest"
import { vi } from "vitest"
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiClient,
  HttpClient,
  HttpClientRequest,
  type HttpClientResponse,
  OpenApi
} from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, Effect, Layer, Redacted, Schema } from "effect"
import { randomBytes } from "node:crypto"
import {
  ApiKeyName,
  AuthenticationLive,
  DeviceId,
  Email,
  Identity,
  IdentityApi,
  IdentityHttpLive,
  Permission,
  TenantId
} from "../src/index.ts"
import { CountingSqlLive, SqlCounter } from "@delivery/testing"

// Counts every SHA-256 the package's own modules compute (Token.ts hashes with node:crypto),
// so "no hashing" is observed rather than inferred from the code's order.
const hashing = vi.hoisted(() => ({ calls: 0 }))
vi.mock("node:crypto", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:crypto")>()
  const createHash = ((...args: Parameters<typeof actual.createHash>) => {
    hashing.calls++
    return actual.createHash(...args)
  }) as typeof actual.createHash
  return { ...actual, default: { ...actual, createHash }, createHash }
})

// Exactly what the backend does: one HttpApi named "delivery" that adds the identity group.
const DeliveryApi = HttpApi.make("delivery").add(IdentityApi)

const ApiLive = HttpApiBuilder.api(DeliveryApi).pipe(
  Layer.provide(IdentityHttpLive),
  Layer.provide(AuthenticationLive)
)

/** A real Bun server on a free port, configured from `env` as the backend's environment would. */
const serve = (env: Record<string, string>) =>
  HttpApiBuilder.serve().pipe(
    Layer.provide(ApiLive),
    Layer.provideMerge(BunHttpServer.layerTest),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
  )

const SuiteLayer = Identity.Default.pipe(Layer.provideMerge(CountingSqlLive), Layer.provideMerge(TestDatabaseLive))

const fixture = Effect.gen(function* () {
  const identity = yield* Identity
  const tenant = TenantId.make(`h-${randomBytes(4).toString("hex")}`)
  yield* identity.createTenant(tenant)
  const account = yield* identity.createAccount({ tenant, email: Schema.decodeSync(Email)(`ops@${tenant}.example`) })
  const key = yield* identity.issueApiKey({
    tenant,
    account,
    kind: "board",
    name: ApiKeyName.make("board"),
    permissions: [Permission.make("receipts:read")]
  })
  const device = yield* identity.issueDeviceCredential({ tenant, account, device: DeviceId.make("d-1") })
  return { identity, tenant, account, key, device }
})

const get = (headers: Record<string, string> = {}) =>
  Effect.flatMap(HttpClient.HttpClient, (client) => client.get("/api/whoami", { headers }))

const bearer = (token: Redacted.Redacted<string>) => ({ authorization: `Bearer ${Redacted.value(token)}` })

const body = (response: HttpClientResponse.HttpClientResponse) => response.json

/** Database statements and hashes performed while `effect` runs. */
const work = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const counter = yield* SqlCounter
    const statements = yield* counter.count
    const hashes = hashing.calls
    const result = yield* effect
    return { result, statements: (yield* counter.count) - statements, hashes: hashing.calls - hashes }
  })

layer(SuiteLayer, { excludeTestServices: true })("Identity over HTTP", (it) => {
  it.effect("GET /api/whoami answers 200 with the VerifiedIdentity for a valid bearer (typed client included)", () =>
    Effect.gen(function* () {
      const { tenant, account, key, device } = yield* fixture
      const ok = yield* get(bearer(key.token))
      expect(ok.status).toBe(200)
      expect(yield* body(ok)).toEqual({
        _tag: "ApiKey", tenant, account, keyId: key.id, kind: "board", permissions: ["receipts:read"]
      })
      const client = yield* HttpApiClient.make(DeliveryApi, {
        transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(Redacted.value(device.token)))
      })
      expect(yield* client.identity.whoami()).toEqual({ _tag: "Device", tenant, account, device: "d-1" })
    }).pipe(Effect.provide(serve({}))))

  it.effect("unauthenticated requests get 401 with `WWW-Authenticate: Bearer` and a stable reason", () =>
    Effect.gen(function* () {
      const { identity, tenant, key } = yield* fixture
      const cases: Array<[Record<string, string>, string]> = [
        [{}, "missing"],
        [{ authorization: "Bearer not-a-token" }, "malformed"],
        [{ authorization: `Basic ${Buffer.from("a:b").toString("base64")}` }, "malformed"],
        [{ authorization: `Bearer board_${randomBytes(12).toString("hex")}_${randomBytes(32).toString("base64url")}` }, "unknown"]
      ]
      yield* identity.revokeApiKey(tenant, key.id)
      cases.push([bearer(key.token), "revoked"])
      for (const [headers, reason] of cases) {
        const response = yield* get(headers)
        expect(response.status).toBe(401)
        expect(response.headers["www-authenticate"]).toMatch(/^Bearer\b/)
        expect(yield* body(response)).toEqual({ _tag: "Unauthenticated", reason })
      }
    }).pipe(Effect.provide(serve({}))))

  it.effect("a missing or malformed credential is refused with no database statement and no hashing", () =>
    Effect.gen(function* () {
      const refused = [{}, { authorization: "Bearer nope" }, { authorization: `Bearer device_${"x".repeat(70)}` }]
      for (const headers of refused) {
        const { result, statements, hashes } = yield* work(get(headers))
        expect(result.status).toBe(401)
        expect({ statements, hashes }).toEqual({ statements: 0, hashes: 0 })
      }
      // The counters do see real work: a valid token costs one indexed read and one SHA-256.
      const { key } = yield* fixture
      const { result, statements, hashes } = yield* work(get(bearer(key.token)))
      expect(result.status).toBe(200)
      expect({ statements, hashes }).toEqual({ statements: 1, hashes: 1 })
    }).pipe(Effect.provide(serve({}))))

  it.effect("the peer-keyed identity limit runs before credential verification: past it, 429 with Retry-After and no database work or hashing", () =>
    Effect.gen(function* () {
      const { key } = yield* fixture
      for (let i = 0; i < 3; i++) expect((yield* get(bearer(key.token))).status).toBe(200)
      for (let i = 0; i < 3; i++) {
        const { result, statements, hashes } = yield* work(get(bearer(key.token)))
        expect(result.status).toBe(429)
        const retryAfter = Number(result.headers["retry-after"])
        expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60).toBe(true)
        const refusal = (yield* body(result)) as { _tag: string; retryAfter: number }
        expect(refusal._tag).toBe("IdentityRateLimited")
        expect(Math.ceil(refusal.retryAfter / 1000)).toBe(retryAfter)
        expect({ statements, hashes }).toEqual({ statements: 0, hashes: 0 })
      }
    }).pipe(Effect.provide(serve({ IDENTITY_PEER_LIMIT: "3", IDENTITY_PEER_WINDOW: "1 minute" }))))

  it.effect("TRUSTED_PROXY_HOPS=0 ignores X-Forwarded-For: a spoofed header does not escape the peer limit", () =>
    Effect.gen(function* () {
      for (let i = 0; i < 2; i++) expect((yield* get({ "x-forwarded-for": `203.0.113.${i}` })).status).toBe(401)
      expect((yield* get({ "x-forwarded-for": "198.51.100.7" })).status).toBe(429)
      expect((yield* get({})).status).toBe(429)
    }).pipe(Effect.provide(serve({ IDENTITY_PEER_LIMIT: "2" }))))

  it.effect("TRUSTED_PROXY_HOPS=1 keys the limit by the right-most X-Forwarded-For address", () =>
    Effect.gen(function* () {
      const via = (xff: string) => Effect.map(get({ "x-forwarded-for": xff }), (r) => r.status)
      expect(yield* via("203.0.113.9, 198.51.100.1")).toBe(401)
      expect(yield* via("203.0.113.10, 198.51.100.1")).toBe(401)
      // The entries left of the last hop are the client's to write: changing them does not help.
      expect(yield* via("192.0.2.1, 198.51.100.1")).toBe(429)
      expect(yield* via("198.51.100.2")).toBe(401)
      // Without the header there is no forwarded peer: the socket address (the proxy) is the key.
      expect((yield* get({})).status).toBe(401)
    }).pipe(Effect.provide(serve({ IDENTITY_PEER_LIMIT: "2", TRUSTED_PROXY_HOPS: "1" }))))

  it.effect("the composed OpenAPI document declares bearer security and the 401/429/503 refusals", () =>
    Effect.sync(() => {
      const spec = OpenApi.fromApi(DeliveryApi)
      const operation = spec.paths["/api/whoami"]?.get
      expect(operation?.security).toEqual([{ bearer: [] }])
      expect(Object.keys(operation?.responses ?? {}).sort()).toEqual(["200", "400", "401", "429", "503"])
      expect(spec.components.securitySchemes?.bearer).toMatchObject({ type: "http", scheme: "bearer" })
    }))
})
