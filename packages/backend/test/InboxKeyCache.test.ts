import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Identity } from "@delivery/identity"
import type { AccountId, DeviceId, Email, TenantId } from "@delivery/identity"
import { freePort, spawnBunScript, TestDatabase, waitForPort } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect, Layer, Redacted } from "effect"
import { generateKeyPairSync, randomBytes, sign } from "node:crypto"

// The shipped process (`bun run start`) keeps a key id's public key bytes in memory once it has verified with them;
// the key's state is read in the transaction that commits each envelope. Driven from outside: the operator route
// registers and revokes the key, a producer posts envelopes, and the database is read directly.

const TENANT = "keycache"
const OPERATOR_TOKEN = `op-${randomBytes(32).toString("base64url")}`
const { privateKey, publicKey } = generateKeyPairSync("ed25519")
const rawPublicKey = Buffer.from(publicKey.export({ format: "jwk" }).x!, "base64url")

/** RFC 8785 for the plain values built here (objects, strings, safe integers). */
const canonicalize = (value: unknown): string =>
  typeof value === "object" && value !== null
    ? `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonicalize((value as any)[key])}`).join(",")}}`
    : JSON.stringify(value)

const envelope = (sequence: number) => {
  const unsigned = {
    type: "controlplane/v1",
    route: { tenant: TENANT, project: "web", producer: "laptop-1" },
    eventId: `evt-keycache-${String(sequence).padStart(12, "0")}`,
    idempotencyKey: `keycache:${sequence}`,
    sequence,
    keyId: "k1",
    createdAt: "2026-12-03T09:30:00.000Z",
    schemaVersion: 1,
    metadata: { kind: "task.proposed", subject: `task-${sequence}`, attributes: {} }
  }
  return { ...unsigned, signature: Buffer.from(sign(null, Buffer.from(canonicalize(unsigned), "utf8"), privateKey)).toString("base64url") }
}

const call = (port: number, method: string, path: string, options: { readonly bearer?: string; readonly body?: unknown } = {}) =>
  Effect.promise(async () => {
    const headers: Record<string, string> = {}
    if (options.bearer !== undefined) headers.authorization = `Bearer ${options.bearer}`
    if (options.body !== undefined) headers["content-type"] = "application/json"
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      method,
      headers,
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) })
    })
    const text = await response.text()
    return { status: response.status, body: text === "" ? undefined : JSON.parse(text) }
  })

const SuiteLayer = Identity.Default.pipe(Layer.provideMerge(TestDatabaseLive))

layer(SuiteLayer, { excludeTestServices: true })("the shipped process (bun run start): cached public keys", (it) => {
  it.scoped(
    "a key revoked while its public key is cached is refused at once: after the operator's revoke, the next envelope signed by that key is 403 key-revoked and commits nothing but its audit row",
    () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase
        const sql = yield* SqlClient.SqlClient
        const identity = yield* Identity
        const tenant = TENANT as TenantId
        yield* identity.createTenant(tenant)
        const account = yield* identity.createAccount({ tenant, email: "ops@keycache.example" as Email })
        const device = yield* identity.issueDeviceCredential({ tenant, account: account as AccountId, device: "laptop-1" as DeviceId })
        const deviceToken = Redacted.value(device.token)

        const port = yield* freePort
        const backend = yield* spawnBunScript("start", {
          DATABASE_URL: db.url,
          PORT: String(port),
          OPERATOR_TOKEN,
          PASSWORD_RESET_DELIVERY: "disabled",
          RECEIPT_DELIVERY: "disabled"
        })
        yield* backend.waitForOutput(/listening on http:\/\/127\.0\.0\.1:\d+ \(role backend\)/, "60 seconds")
        yield* waitForPort(port)

        const registered = yield* call(port, "POST", `/operator/tenants/${TENANT}/signing-keys`, {
          bearer: OPERATOR_TOKEN,
          body: { keyId: "k1", publicKey: rawPublicKey.toString("base64url") }
        })
        expect(registered.status).toBe(201)

        // The first envelope looks the key up and caches its bytes; the second verifies from the cache.
        for (const sequence of [1, 2]) {
          const accepted = yield* call(port, "POST", "/controlplane/v1/envelopes", { bearer: deviceToken, body: envelope(sequence) })
          expect(accepted).toMatchObject({ status: 201, body: { outcome: "accepted", sequence, cursor: sequence } })
        }

        const revoked = yield* call(port, "POST", `/operator/tenants/${TENANT}/signing-keys/k1/revoke`, { bearer: OPERATOR_TOKEN })
        expect(revoked).toMatchObject({ status: 200, body: { outcome: "revoked" } })

        // At once: the very next envelope under the revoked key, with its bytes still cached in the process.
        const refused = yield* call(port, "POST", "/controlplane/v1/envelopes", { bearer: deviceToken, body: envelope(3) })
        expect(refused).toMatchObject({ status: 403, body: { _tag: "EnvelopeForbidden", reason: "key-revoked" } })
        // And so is a resend of it (now after a lookup, the cached bytes having been dropped).
        const again = yield* call(port, "POST", "/controlplane/v1/envelopes", { bearer: deviceToken, body: envelope(3) })
        expect(again).toMatchObject({ status: 403, body: { reason: "key-revoked" } })

        const [state] = yield* sql<{ identities: number; payloads: number; cursor: string }>`
          SELECT (SELECT count(*)::int FROM inbox_identities) AS identities,
                 (SELECT count(*)::int FROM inbox_payloads) AS payloads,
                 (SELECT contiguous_cursor FROM inbox_streams WHERE tenant = ${TENANT}) AS cursor`.withoutTransform
        expect({ identities: state!.identities, payloads: state!.payloads, cursor: Number(state!.cursor) }).toEqual({ identities: 2, payloads: 2, cursor: 2 })
        const audit = yield* sql<{ outcome: string; reason: string; correlation_id: string }>`
          SELECT outcome, reason, correlation_id FROM inbox_audit WHERE tenant = ${TENANT} ORDER BY audit_id`.withoutTransform
        expect(audit.map((row) => [row.outcome, row.reason])).toEqual([
          ["accepted", "accepted"],
          ["accepted", "accepted"],
          ["refused", "key-revoked"],
          ["refused", "key-revoked"]
        ])
        expect(audit[2]!.correlation_id).toBe(refused.body.correlationId)

        yield* backend.signal("SIGTERM")
        expect(yield* backend.exitCode()).toBe(0)
      })
  )
})
