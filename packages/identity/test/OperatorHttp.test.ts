import { describe, expect, it, layer } from "@effect/vitest"
import { vi } from "vitest"
import {
  HttpApi,
  HttpApiBuilder,
  HttpApiClient,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpClient,
  HttpClientRequest,
  OpenApi
} from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, Effect, Either, Layer, Logger, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import {
  AuthenticationLive,
  CurrentOperator,
  Identity,
  IdentityApi,
  IdentityHttpLive,
  OperatorAuthentication,
  OperatorAuthenticationLive,
  OperatorCredential,
  OperatorCredentialLive,
  OperatorIdentity,
  OperatorTokenConfig
} from "../src/index.ts"

// Counts every SHA-256 the package computes, so "no verification work" is observed, not inferred.
const hashing = vi.hoisted(() => ({ calls: 0 }))
vi.mock("node:crypto", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:crypto")>()
  const createHash = ((...args: Parameters<typeof actual.createHash>) => {
    hashing.calls++
    return actual.createHash(...args)
  }) as typeof actual.createHash
  return { ...actual, default: { ...actual, createHash }, createHash }
})

// A stand-in operator group: the real ones (signing keys, ...) live in their packages.
class OperatorProbeApi extends HttpApiGroup.make("operatorProbe")
  .add(HttpApiEndpoint.get("whoami", "/operator/whoami").addSuccess(OperatorIdentity))
  .middleware(OperatorAuthentication)
{}

const DeliveryApi = HttpApi.make("delivery").add(IdentityApi).add(OperatorProbeApi)

const ProbeLive = HttpApiBuilder.group(DeliveryApi, "operatorProbe", (handlers) => handlers.handle("whoami", () => CurrentOperator))

const ApiLive = HttpApiBuilder.api(DeliveryApi).pipe(
  Layer.provide([IdentityHttpLive, ProbeLive]),
  Layer.provide([AuthenticationLive, OperatorAuthenticationLive])
)

const TOKEN = `op-${randomBytes(32).toString("base64url")}`
const logged: Array<string> = []

const serve = (env: Record<string, string>) =>
  HttpApiBuilder.serve().pipe(
    Layer.provide(ApiLive),
    Layer.provideMerge(BunHttpServer.layerTest),
    Layer.provide(Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => void logged.push(String(message))))),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
  )

const get = (path: string, headers: Record<string, string> = {}) =>
  Effect.flatMap(HttpClient.HttpClient, (client) => client.get(path, { headers }))

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

/** Hashes computed while `effect` runs. */
const hashes = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const before = hashing.calls
    const result = yield* effect
    return { result, hashes: hashing.calls - before }
  })

layer(Identity.Default.pipe(Layer.provideMerge(TestDatabaseLive)), { excludeTestServices: true })("OperatorAuthentication over HTTP", (it) => {
  it.effect("a valid OPERATOR_TOKEN answers 200 with the closed operator identity, for one SHA-256 (typed client included)", () =>
    Effect.gen(function* () {
      const { result, hashes: work } = yield* hashes(get("/operator/whoami", bearer(TOKEN)))
      expect(result.status).toBe(200)
      expect(yield* result.json).toEqual({ kind: "operator", via: "environment" })
      expect(work).toBe(1)
      const client = yield* HttpApiClient.make(DeliveryApi, {
        transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(TOKEN))
      })
      expect(yield* client.operatorProbe.whoami()).toEqual({ kind: "operator", via: "environment" })
    }).pipe(Effect.provide(serve({ OPERATOR_TOKEN: TOKEN }))))

  it.effect("a missing, malformed or wrong operator token gets 401 with `WWW-Authenticate: Bearer` and a stable reason", () =>
    Effect.gen(function* () {
      const cases: Array<[Record<string, string>, string]> = [
        [{}, "missing"],
        [{ authorization: `Basic ${Buffer.from(`op:${TOKEN}`).toString("base64")}` }, "malformed"],
        [bearer("x".repeat(513)), "malformed"],
        [bearer(TOKEN.slice(0, -1)), "unknown"],
        [bearer(`${TOKEN}x`), "unknown"],
        [bearer(TOKEN.toUpperCase()), "unknown"],
        // A tenant's API key is not an operator credential, whatever its permissions.
        [bearer(`board_${randomBytes(12).toString("hex")}_${randomBytes(32).toString("base64url")}`), "unknown"]
      ]
      for (const [headers, reason] of cases) {
        const response = yield* get("/operator/whoami", headers)
        expect(response.status).toBe(401)
        expect(response.headers["www-authenticate"]).toMatch(/^Bearer\b/)
        const body = yield* response.text
        expect(JSON.parse(body)).toEqual({ _tag: "Unauthenticated", reason })
        expect(body).not.toContain(TOKEN.slice(3, 20))
      }
    }).pipe(Effect.provide(serve({ OPERATOR_TOKEN: TOKEN }))))

  it.effect("with OPERATOR_TOKEN unset every operator route is refused (403, fail closed) without hashing, and start-up says so once", () =>
    Effect.gen(function* () {
      for (const headers of [{}, bearer(TOKEN), bearer("x".repeat(40))]) {
        const { result, hashes: work } = yield* hashes(get("/operator/whoami", headers))
        expect(result.status).toBe(403)
        expect(yield* result.json).toEqual({ _tag: "OperatorAccessDisabled", reason: "operator-routes-disabled" })
        expect(work).toBe(0)
      }
      expect(logged.filter((line) => line.includes("operator routes are disabled"))).toHaveLength(1)
    }).pipe(Effect.provide(serve({}))))

  it.effect("the peer-keyed identity limit runs first: past it, 429 with Retry-After and no hashing", () =>
    Effect.gen(function* () {
      for (let i = 0; i < 3; i++) expect((yield* get("/operator/whoami", bearer(TOKEN))).status).toBe(200)
      for (const headers of [bearer(TOKEN), bearer("wrong".repeat(8)), {}]) {
        const { result, hashes: work } = yield* hashes(get("/operator/whoami", headers))
        expect(result.status).toBe(429)
        const retryAfter = Number(result.headers["retry-after"])
        expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60).toBe(true)
        expect(((yield* result.json) as { _tag: string })._tag).toBe("IdentityRateLimited")
        expect(work).toBe(0)
      }
    }).pipe(Effect.provide(serve({ OPERATOR_TOKEN: TOKEN, IDENTITY_PEER_LIMIT: "3" }))))

  it.effect("operator and tenant bearers count against ONE peer budget: guessing cannot switch credentials to get another", () =>
    Effect.gen(function* () {
      expect((yield* get("/api/whoami")).status).toBe(401)
      expect((yield* get("/operator/whoami", bearer("wrong".repeat(8)))).status).toBe(401)
      expect((yield* get("/operator/whoami", bearer(TOKEN))).status).toBe(429)
      expect((yield* get("/api/whoami")).status).toBe(429)
    }).pipe(Effect.provide(serve({ OPERATOR_TOKEN: TOKEN, IDENTITY_PEER_LIMIT: "2" }))))

  it.effect("the OpenAPI document declares the operator bearer apart from the tenant bearer, with 401/403/429/503", () =>
    Effect.sync(() => {
      const spec = OpenApi.fromApi(DeliveryApi)
      const operation = spec.paths["/operator/whoami"]?.get
      expect(operation?.security).toEqual([{ operatorBearer: [] }])
      expect(Object.keys(operation?.responses ?? {}).sort()).toEqual(["200", "400", "401", "403", "429", "503"])
      expect(spec.paths["/api/whoami"]?.get?.security).toEqual([{ bearer: [] }])
    }))
})

describe("OPERATOR_TOKEN", () => {
  const load = (env: Record<string, string>) =>
    Effect.either(Effect.withConfigProvider(OperatorTokenConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))

  it.effect("optional and secret: unset is none; a short, empty or spaced value is refused under its name without echoing it", () =>
    Effect.gen(function* () {
      expect(Either.getOrThrow(yield* load({}))._tag).toBe("None")
      const set = Either.getOrThrow(yield* load({ OPERATOR_TOKEN: TOKEN }))
      expect(set._tag === "Some" && Redacted.value(set.value)).toBe(TOKEN)
      expect(String(set)).not.toContain(TOKEN)
      for (const value of ["", "short-secret-value", `${"a".repeat(20)} ${"b".repeat(20)}`]) {
        const error = yield* Effect.flip(Effect.flatten(load({ OPERATOR_TOKEN: value })))
        expect(JSON.stringify(error)).toContain("OPERATOR_TOKEN")
        expect(error.toString()).toContain("(value not shown)")
        if (value !== "") expect(JSON.stringify(error)).not.toContain(value)
      }
    }))

  it.effect("the credential itself: unset, every presented token is refused as operator-routes-disabled (fail closed); set, an empty token or one over 512 characters is malformed before any hash, a token of exactly 512 characters is compared, and only the configured one passes", () =>
    Effect.gen(function* () {
      const credentialWith = (env: Record<string, string>) =>
        Effect.provide(OperatorCredential, OperatorCredentialLive.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))))
      const off = yield* credentialWith({})
      expect(off.enabled).toBe(false)
      for (const presented of ["", TOKEN]) {
        expect(yield* Effect.flip(off.verify(presented))).toMatchObject({ _tag: "OperatorAccessDisabled", reason: "operator-routes-disabled" })
      }
      const longest = "t".repeat(512)
      const on = yield* credentialWith({ OPERATOR_TOKEN: longest })
      expect(on.enabled).toBe(true)
      expect(yield* on.verify(longest)).toEqual({ kind: "operator", via: "environment" })
      const before = hashing.calls
      expect(yield* Effect.flip(on.verify(""))).toMatchObject({ _tag: "Unauthenticated", reason: "malformed" })
      expect(yield* Effect.flip(on.verify(`${longest}t`))).toMatchObject({ _tag: "Unauthenticated", reason: "malformed" })
      expect(hashing.calls).toBe(before)
      expect(yield* Effect.flip(on.verify("u".repeat(512)))).toMatchObject({ _tag: "Unauthenticated", reason: "unknown" })
    }))
})
