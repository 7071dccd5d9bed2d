import { expect, it, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect } from "effect"
import { generateKeyPairSync, randomBytes } from "node:crypto"
import { CONFIG } from "../src/Config.ts"
import { backendMain, freePort, spawnBun, waitForPort } from "@delivery/testing"

const TOKEN = `op-${randomBytes(32).toString("base64url")}`

/** A raw 32-byte Ed25519 public key as the operator route takes it: unpadded base64url. */
const publicKey = () => {
  const jwk = generateKeyPairSync("ed25519").publicKey.export({ format: "jwk" })
  return jwk.x!
}

const call = (port: number, method: "GET" | "POST", path: string, options: { token?: string; body?: unknown } = {}) =>
  Effect.promise(async () => {
    const headers: Record<string, string> = { connection: "close" }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    if (options.body !== undefined) headers["content-type"] = "application/json"
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      method,
      headers,
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) })
    })
    const text = await response.text()
    return { status: response.status, headers: response.headers, body: text === "" ? undefined : JSON.parse(text) }
  })

layer(TestDatabaseLive, { excludeTestServices: true })("operator routes in a real backend process", (it) => {
  it.scoped("An operator route registers, rotates and revokes keys: with OPERATOR_TOKEN set, over HTTP, each change audited; 401 without the token", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const sql = yield* SqlClient.SqlClient
      const port = yield* freePort
      const backend = yield* spawnBun(backendMain, { DATABASE_URL: db.url, PORT: String(port), OPERATOR_TOKEN: TOKEN, PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" })
      yield* backend.waitForOutput(/listening on http:\/\/127\.0\.0\.1:\d+ \(role backend\)/)
      yield* waitForPort(port)
      const keys = "/operator/tenants/acme/signing-keys"
      const [k1, k2] = [publicKey(), publicKey()]

      // Without (or with a wrong) operator token nothing happens.
      const anonymous = yield* call(port, "POST", keys, { body: { keyId: "k1", publicKey: k1 } })
      expect(anonymous.status).toBe(401)
      expect(anonymous.headers.get("www-authenticate")).toMatch(/^Bearer\b/)
      expect((yield* call(port, "GET", keys, { token: `${TOKEN}x` })).status).toBe(401)

      const registered = yield* call(port, "POST", keys, { token: TOKEN, body: { keyId: "k1", publicKey: k1 } })
      expect(registered).toMatchObject({ status: 201, body: { outcome: "registered", key: { keyId: "k1", publicKey: k1, state: "active" } } })
      const listed = yield* call(port, "GET", keys, { token: TOKEN })
      expect(listed.status).toBe(200)
      expect(listed.body.keys.map((key: any) => [key.keyId, key.publicKey, key.state])).toEqual([["k1", k1, "active"]])

      const rotated = yield* call(port, "POST", `${keys}/rotate`, { token: TOKEN, body: { keyId: "k2", publicKey: k2 } })
      expect(rotated).toMatchObject({ status: 201, body: { outcome: "rotated", key: { keyId: "k2" }, retired: [{ keyId: "k1", state: "retired" }] } })
      const revoked = yield* call(port, "POST", `${keys}/k1/revoke`, { token: TOKEN })
      expect(revoked).toMatchObject({ status: 200, body: { outcome: "revoked", key: { keyId: "k1", state: "revoked" } } })
      expect(revoked.headers.get("x-correlation-id")).toBe(revoked.body.correlationId)
      const after = yield* call(port, "GET", keys, { token: TOKEN })
      expect(after.body.keys.map((key: any) => [key.keyId, key.state])).toEqual([["k1", "revoked"], ["k2", "active"]])

      // One audit row per change, attributed to the operator credential (never the credential itself).
      const audit = yield* sql<{ key_id: string; action: string; outcome: string; actor: string; correlation_id: string }>`
        SELECT key_id, action, outcome, actor, correlation_id FROM signer_key_audit WHERE tenant = 'acme' ORDER BY id`.withoutTransform
      expect(audit.map((row) => [row.key_id, row.action, row.outcome, row.actor])).toEqual([
        ["k1", "register", "applied", "operator:environment"],
        ["k1", "retire", "applied", "operator:environment"],
        ["k2", "rotate", "applied", "operator:environment"],
        ["k1", "revoke", "applied", "operator:environment"]
      ])
      expect(audit[3]!.correlation_id).toBe(revoked.body.correlationId)

      // The purge sweep runs as a worker of the backend role; the token is never printed.
      const output = yield* backend.output
      expect(output).toContain("worker signer-purge-revoked started")
      expect(output).not.toContain(TOKEN)
      expect(output).not.toContain("operator routes are disabled")
      yield* backend.signal("SIGTERM")
      expect(yield* backend.exitCode()).toBe(0)
    }))

  it.scoped("with OPERATOR_TOKEN unset, operator routes fail closed (403) and start-up says they are disabled", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const port = yield* freePort
      const backend = yield* spawnBun(backendMain, { DATABASE_URL: db.url, PORT: String(port), PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" })
      yield* backend.waitForOutput(/listening on/)
      yield* waitForPort(port)
      const refused = yield* call(port, "GET", "/operator/tenants/acme/signing-keys", { token: TOKEN })
      expect(refused).toMatchObject({ status: 403, body: { _tag: "OperatorAccessDisabled", reason: "operator-routes-disabled" } })
      const output = yield* backend.output
      expect(output.split("\n").filter((line) => line.includes("operator routes are disabled"))).toHaveLength(1)
      yield* backend.signal("SIGTERM")
      expect(yield* backend.exitCode()).toBe(0)
    }))
})

it.live("identity, operator and signer variables are validated with the backend's: IDENTITY_PEER_LIMIT=0 and PORT=abc are named in ONE start-up error, secrets never printed", () =>
  Effect.scoped(
    Effect.gen(function* () {
      const shortToken = "tooShort-5ecret"
      const badKeys = "acme:k1:not-a-key-5ecret"
      const backend = yield* spawnBun(backendMain, {
        PORT: "abc",
        IDENTITY_PEER_LIMIT: "0",
        OPERATOR_TOKEN: shortToken,
        SIGNER_KEYS: badKeys,
        SIGNER_PURGE_INTERVAL: "whenever"
      })
      const code = yield* backend.exitCode()
      const output = yield* backend.output
      expect(code).not.toBe(0)
      const errors = output.split("\n").filter((line) => line.includes("ConfigurationError"))
      expect(errors).toHaveLength(1)
      expect(errors[0]).toContain("PORT, IDENTITY_PEER_LIMIT, OPERATOR_TOKEN, SIGNER_KEYS, SIGNER_PURGE_INTERVAL")
      expect(output).toContain("IDENTITY_PEER_LIMIT: Expected an integer between 1 and 1000000")
      expect(output).toContain("OPERATOR_TOKEN: Expected 32 to 512 printable ASCII characters without spaces (value not shown)")
      expect(output).toContain("SIGNER_KEYS: Expected the key list documented for SIGNER_KEYS: bad-private-key at entry 0 (value not shown)")
      expect(output).not.toContain("5ecret")
      expect(output).not.toContain("starting delivery backend")
    })
  ))

it("the configuration table lists identity's, the operator's and the signer's variables, secrets marked", () => {
  const secret = new Map(CONFIG.map((entry) => [entry.name, entry.secret]))
  expect([
    "IDENTITY_PEER_LIMIT",
    "IDENTITY_PEER_WINDOW",
    "TRUSTED_PROXY_HOPS",
    "OPERATOR_TOKEN",
    "SIGNER_REPLAY_WINDOW",
    "SIGNER_KEYS",
    "SIGNER_KEYS_FILE",
    "SIGNER_PURGE_INTERVAL"
  ].map((name) => [name, secret.get(name)])).toEqual([
    ["IDENTITY_PEER_LIMIT", false],
    ["IDENTITY_PEER_WINDOW", false],
    ["TRUSTED_PROXY_HOPS", false],
    ["OPERATOR_TOKEN", true],
    ["SIGNER_REPLAY_WINDOW", false],
    ["SIGNER_KEYS", true],
    ["SIGNER_KEYS_FILE", false],
    ["SIGNER_PURGE_INTERVAL", false]
  ])
  expect(new Set(CONFIG.map((entry) => entry.name)).size).toBe(CONFIG.length)
})
