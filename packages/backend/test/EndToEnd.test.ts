import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Identity, Permission } from "@delivery/identity"
import type { AccountId, ApiKeyName, DeviceId, Email, TenantId } from "@delivery/identity"
import { freePort, LoopbackProvider, spawnBunScript, TestDatabase, waitForPort } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Duration, Effect, Layer, Redacted, Schedule } from "effect"
import { createPrivateKey, createPublicKey, randomBytes, sign, verify } from "node:crypto"
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"

// The shipped process, driven from outside: `bun run start` (the README's command) with DATABASE_URL, provisioned
// through the product's own interfaces (the Identity service for accounts and credentials, the operator routes for
// signing keys and delivery targets), then used as a producer and a tenant would use it. Removing the inbox or
// outbox routes, or the outbox or retention worker, from the backend's composition fails this test.

const TENANT = "e2e"
const PROJECT = "web"
const OPERATOR_TOKEN = `op-${randomBytes(32).toString("base64url")}`
const seed = randomBytes(32)
// PKCS#8 DER of an Ed25519 key is a fixed 16-byte prefix and the 32-byte seed.
const privateKey = createPrivateKey({
  key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]),
  format: "der",
  type: "pkcs8"
})
const publicKey = createPublicKey(privateKey)
const rawPublicKey = Buffer.from(publicKey.export({ format: "jwk" }).x!, "base64url")

const b64url = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64url")

/**
 * RFC 8785 for the plain values this test builds (objects, strings, safe integers): members sorted by UTF-16 code
 * units, no whitespace. Written here, not imported, so the check does not lean on the product's own canonicalizer.
 */
const canonicalize = (value: unknown): string =>
  typeof value === "object" && value !== null
    ? `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonicalize((value as any)[key])}`).join(",")}}`
    : JSON.stringify(value)

/** RFC 8785 bytes of the envelope without `signature`, signed with Ed25519: what a producer does by hand. */
const signEnvelope = (unsigned: Record<string, unknown>) => ({
  ...unsigned,
  signature: b64url(sign(null, Buffer.from(canonicalize(unsigned), "utf8"), privateKey))
})

const verifyEnvelope = (envelope: Record<string, unknown>) => {
  const { signature, ...unsigned } = envelope
  return verify(null, Buffer.from(canonicalize(unsigned), "utf8"), publicKey, Buffer.from(String(signature), "base64url"))
}

/** Standard Webhooks v1a, checked from the specification's text alone: Ed25519 over `id.timestamp.body`. */
const verifyWebhook = (headers: Readonly<Record<string, string>>, body: string) =>
  (headers["webhook-signature"] ?? "").split(" ").some((entry) => {
    const [scheme, value] = entry.split(",", 2)
    return scheme === "v1a" && value !== undefined &&
      verify(null, Buffer.from(`${headers["webhook-id"]}.${headers["webhook-timestamp"]}.${body}`), publicKey, Buffer.from(value, "base64"))
  })

const envelope = (sequence: number) => ({
  type: "controlplane/v1",
  route: { tenant: TENANT, project: PROJECT, producer: "laptop-1" },
  eventId: `evt-e2e-${String(sequence).padStart(16, "0")}`,
  idempotencyKey: `e2e:${sequence}`,
  sequence,
  keyId: "k1",
  createdAt: "2026-11-30T09:30:00.000Z",
  schemaVersion: 1,
  metadata: { kind: "task.proposed", subject: `task-${sequence}`, attributes: { title: "Réviser le plan" } }
})

interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly body: any
}

const call = (port: number, method: string, path: string, options: { readonly bearer?: string; readonly body?: unknown } = {}) =>
  Effect.promise(async (): Promise<Answer> => {
    const headers: Record<string, string> = {}
    if (options.bearer !== undefined) headers.authorization = `Bearer ${options.bearer}`
    if (options.body !== undefined) headers["content-type"] = "application/json"
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      method,
      headers,
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) })
    })
    const text = await response.text()
    return { status: response.status, headers: response.headers, body: text === "" ? undefined : JSON.parse(text) }
  })

/** Polls `check` until it holds, within a generous bound: the backend's workers run on their own schedule. */
const eventually = <A, E>(what: string, probe: Effect.Effect<A, E>, check: (a: A) => boolean) =>
  probe.pipe(
    Effect.filterOrFail(check, () => what),
    Effect.retry(Schedule.spaced("100 millis")),
    Effect.timeoutFail({ duration: Duration.seconds(30), onTimeout: () => `timed out: ${what}` }),
    Effect.orDie
  )

const SuiteLayer = Layer.mergeAll(Identity.Default, LoopbackProvider.Default).pipe(Layer.provideMerge(TestDatabaseLive))

layer(SuiteLayer, { excludeTestServices: true })("the shipped process (bun run start), end to end", (it) => {
  it.scoped(
    "spec 000 inbound and outbound through the real backend: a signed envelope is accepted once and acknowledged only after commit, its payload expires by retention while its identity stays, and an enqueued message reaches the receiver with valid envelope and Standard Webhooks signatures",
    () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase
        const sql = yield* SqlClient.SqlClient
        const identity = yield* Identity
        const receiver = yield* LoopbackProvider

        // Provisioning through the Identity service: tenant, account, a producer device credential, a board key.
        const tenant = TENANT as TenantId
        yield* identity.createTenant(tenant)
        const account = yield* identity.createAccount({ tenant, email: "ops@e2e.example" as Email })
        const device = yield* identity.issueDeviceCredential({ tenant, account: account as AccountId, device: "laptop-1" as DeviceId })
        const apiKey = yield* identity.issueApiKey({
          tenant,
          account: account as AccountId,
          kind: "board",
          name: "e2e" as ApiKeyName,
          permissions: [Permission.make("outbox:enqueue")]
        })

        const port = yield* freePort
        const backend = yield* spawnBunScript("start", {
          DATABASE_URL: db.url,
          PORT: String(port),
          OPERATOR_TOKEN,
          PASSWORD_RESET_DELIVERY: "disabled",
          RECEIPT_DELIVERY: "disabled",
          SIGNER_KEYS: `${TENANT}:k1:${b64url(seed)}`,
          OUTBOX_POLL_INTERVAL: "100 millis",
          INBOX_PAYLOAD_RETENTION: "3 seconds",
          INBOX_RETENTION_INTERVAL: "200 millis"
        })
        yield* backend.waitForOutput(/listening on http:\/\/127\.0\.0\.1:\d+ \(role backend\)/, "60 seconds")
        yield* waitForPort(port)

        const ready = yield* call(port, "GET", "/ready")
        expect(ready.status).toBe(200)
        expect([...ready.body.checks.workers.running].sort()).toEqual(["inbox-retention", "outbox-delivery", "signer-purge-revoked"])

        // Operator: the tenant's public key, then the project's delivery target.
        const registered = yield* call(port, "POST", `/operator/tenants/${TENANT}/signing-keys`, {
          bearer: OPERATOR_TOKEN,
          body: { keyId: "k1", publicKey: b64url(rawPublicKey) }
        })
        expect(registered).toMatchObject({ status: 201, body: { outcome: "registered" } })
        const target = yield* call(port, "PUT", `/operator/outbox/targets/${TENANT}/${PROJECT}`, {
          bearer: OPERATOR_TOKEN,
          body: { endpoint: receiver.urlFor("/hooks/e2e") }
        })
        expect(target.status).toBe(200)

        // Producer: a signed envelope is accepted once, then acknowledged as a duplicate.
        const signed = signEnvelope(envelope(1))
        const deviceToken = Redacted.value(device.token)
        const accepted = yield* call(port, "POST", "/controlplane/v1/envelopes", { bearer: deviceToken, body: signed })
        expect(accepted).toMatchObject({ status: 201, body: { outcome: "accepted", sequence: 1, cursor: 1 } })
        expect(accepted.headers.get("x-correlation-id")).toBe(accepted.body.correlationId)
        const duplicate = yield* call(port, "POST", "/controlplane/v1/envelopes", { bearer: deviceToken, body: signed })
        expect(duplicate).toMatchObject({ status: 200, body: { outcome: "duplicate", eventIdentity: accepted.body.eventIdentity } })
        const stored = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM inbox_payloads`.withoutTransform
        expect(stored[0]!.n).toBe(1)
        // A forged signature is refused and commits nothing new.
        const forged = { ...signEnvelope(envelope(2)), signature: signed.signature }
        const refused = yield* call(port, "POST", "/controlplane/v1/envelopes", { bearer: deviceToken, body: forged })
        expect(refused).toMatchObject({ status: 403, body: { reason: "signature-invalid" } })

        // Tenant: an enqueued message is signed by the backend and delivered to the receiver.
        const unsigned = envelope(7) as Record<string, unknown>
        delete unsigned.keyId
        const enqueued = yield* call(port, "POST", "/api/outbox/messages", {
          bearer: Redacted.value(apiKey.token),
          body: { envelope: { ...unsigned, route: { tenant: TENANT, project: PROJECT, producer: "scheduler" } } }
        })
        expect(enqueued).toMatchObject({ status: 201, body: { replayed: false, message: { state: "pending" } } })
        const id: string = enqueued.body.message.id
        const [delivery] = yield* receiver.awaitRequests(1).pipe(Effect.timeout("30 seconds"), Effect.orDie)
        expect(delivery!.path).toBe("/hooks/e2e")
        expect(delivery!.headers["webhook-id"]).toBe(id)
        expect(delivery!.idempotencyKey).toBe(id)
        expect(verifyWebhook(delivery!.headers, delivery!.bodyText)).toBe(true)
        const body = JSON.parse(delivery!.bodyText)
        expect(body).toMatchObject({ keyId: "k1", route: { tenant: TENANT, project: PROJECT } })
        expect(verifyEnvelope(body)).toBe(true)
        // A tampered body no longer verifies (the checks above can fail).
        expect(verifyWebhook(delivery!.headers, delivery!.bodyText.replace("Réviser", "Reviser"))).toBe(false)
        const message = yield* eventually(
          "the message is recorded as delivered",
          call(port, "GET", `/operator/outbox/messages/${TENANT}/${PROJECT}/${id}`, { bearer: OPERATOR_TOKEN }),
          (answer) => answer.body?.state === "delivered"
        )
        expect(message.body).toMatchObject({ state: "delivered", attempt: 1 })

        // Retention (spec 000): the expired payload is deleted by the backend's worker; the identity stays, so a
        // resend is still a duplicate and never a new event.
        yield* eventually(
          "the expired payload is deleted",
          sql<{ n: number }>`SELECT count(*)::int AS n FROM inbox_payloads`.withoutTransform,
          (rows) => rows[0]!.n === 0
        )
        const resent = yield* call(port, "POST", "/controlplane/v1/envelopes", { bearer: deviceToken, body: signed })
        expect(resent).toMatchObject({ status: 200, body: { outcome: "duplicate" } })

        const output = yield* backend.output
        for (const secret of [OPERATOR_TOKEN, deviceToken, Redacted.value(apiKey.token), b64url(seed)]) {
          expect(output).not.toContain(secret)
        }
        yield* backend.signal("SIGTERM")
        expect(yield* backend.exitCode()).toBe(0)
      })
  )

  it.scoped(
    "bun run start runs main.ts as one bundle under .build/<hash of the sources>/ with its source map, built once and reused while the sources stay the same; what it reads at run time (the console's stylesheet and htmx, the migrations) is found from the repository's root",
    () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase
        const root = new URL("../../../", import.meta.url).pathname
        const build = join(root, ".build")
        const startOnce = Effect.gen(function*() {
          const startedAt = Date.now()
          const port = yield* freePort
          const backend = yield* spawnBunScript("start", {
            DATABASE_URL: db.url,
            PORT: String(port),
            PASSWORD_RESET_DELIVERY: "disabled",
            RECEIPT_DELIVERY: "disabled"
          })
          yield* backend.waitForOutput(/listening on http:\/\/127\.0\.0\.1:\d+ \(role backend\)/, "60 seconds")
          const asset = (name: string) =>
            Effect.promise(() => fetch(`http://127.0.0.1:${port}/console/assets/${name}`).then(async (r) => ({ status: r.status, text: await r.text() })))
          expect(yield* asset("console.css")).toEqual({ status: 200, text: readFileSync(join(root, "packages/console/assets/console.css"), "utf8") })
          const htmx = yield* asset("htmx.min.js")
          expect(htmx.status).toBe(200)
          expect(htmx.text).toContain("htmx")
          yield* backend.signal("SIGTERM")
          expect(yield* backend.exitCode()).toBe(0)
          // The bundle this start ran: its folder was made or touched since the start (other starts share it).
          return readdirSync(build).filter((name) => /^[0-9a-f]{24}$/.test(name) && statSync(join(build, name)).mtimeMs >= startedAt - 1000)
        })
        const first = yield* startOnce
        expect(first).toHaveLength(1)
        expect(existsSync(join(build, first[0]!, "main.js"))).toBe(true)
        expect(readFileSync(join(build, first[0]!, "main.js"), "utf8")).toMatch(/\/\/# sourceMappingURL=main\.js\.map\s*$/)
        expect(existsSync(join(build, first[0]!, "main.js.map"))).toBe(true)
        expect(yield* startOnce).toEqual(first)
        // The migrations ran from the repository's folder: every file there is recorded as applied.
        const sql = yield* SqlClient.SqlClient
        const applied = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM effect_sql_migrations`.withoutTransform
        expect(applied[0]!.n).toBe(readdirSync(join(root, "migrations")).filter((name) => name.endsWith(".sql")).length)
      }),
    { timeout: 120_000 }
  )
})
