import { expect, layer } from "@effect/vitest"
import { backendMain, freePort, get, LoopbackProvider, LoopbackReply, spawnBun, spawnBunScript, TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { OPERATOR_TOKEN } from "./support/Backend.ts"
import { call } from "./support/Http.ts"

// Password-reset mail through real backend processes (docs/reset-mail.md): the whole path from a reset request
// to signing in with the new password, and spec 002's start and stop rules for the reset worker (SIGTERM mid-call,
// SIGKILL mid-call, a database failure during that cleanup, the ingress role, the delivery mode).

const op = { token: OPERATOR_TOKEN }
const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`
const TOKEN_KEY = randomBytes(32).toString("base64")
const MAIL_TOKEN = `mail-${randomBytes(24).toString("base64url")}`

const enabledEnv = (provider: LoopbackProvider, extra: Record<string, string> = {}): Record<string, string> => ({
  PASSWORD_RESET_DELIVERY: "enabled",
  PASSWORD_RESET_TOKEN_KEY: TOKEN_KEY,
  PASSWORD_RESET_FROM: "no-reply@acme.example",
  PASSWORD_RESET_FROM_NAME: "Acme",
  PASSWORD_RESET_ORIGIN: "https://app.acme.example",
  PASSWORD_RESET_POLL_INTERVAL: "100 millis",
  PASSWORD_RESET_RESPONSE_FLOOR_MS: "0",
  MAIL_PROVIDER_URL: provider.urlFor("/emails"),
  MAIL_PROVIDER_TOKEN: MAIL_TOKEN,
  MAIL_PROVIDER_TIMEOUT: "2 seconds",
  ...extra
})

/** The real backend on the suite's database, started as given (`bun run start` when `script`). */
const start = (env: Record<string, string>, options: { readonly script?: boolean } = {}) =>
  Effect.gen(function* () {
    const db = yield* TestDatabase
    const port = yield* freePort
    const full = { DATABASE_URL: db.url, PORT: String(port), OPERATOR_TOKEN, IDENTITY_PEER_LIMIT: "1000000", RECEIPT_DELIVERY: "disabled", ...env }
    const backend = yield* (options.script === true ? spawnBunScript("start", full) : spawnBun(backendMain, full))
    yield* backend.waitForOutput(/listening on http:/)
    return { port, backend }
  })

const withAccount = (port: number, password: string) =>
  Effect.gen(function* () {
    const tenant = unique("r")
    const email = `${unique("user")}@example.com`
    expect((yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: tenant } })).status).toBe(201)
    const created = yield* call(port, "POST", `/operator/tenants/${tenant}/accounts`, { ...op, body: { email, password } })
    expect(created.status).toBe(201)
    return { tenant, email, account: created.json.account.id as string }
  })

const requestReset = (port: number, tenant: string, email: string) =>
  Effect.gen(function* () {
    const answer = yield* call(port, "POST", "/api/password-resets", { body: { tenant, email } })
    expect([answer.status, answer.json.status]).toEqual([202, "accepted"])
  })

const outboxRows = (tenant: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly id: string; readonly state: string; readonly reason: string | null; readonly attempt: number; readonly fingerprint: string | null }>`
      SELECT id::text AS id, state, reason, attempt, fingerprint FROM reset_mail_outbox WHERE tenant_id = ${tenant}`.withoutTransform)

const waitForRow = (tenant: string, done: (row: { readonly state: string }) => boolean) =>
  Effect.gen(function* () {
    for (let i = 0; i < 200; i++) {
      const rows = yield* outboxRows(tenant)
      if (rows.length > 0 && rows.every(done)) return rows
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.dieMessage(`reset-mail rows of ${tenant} never reached the expected state: ${JSON.stringify(yield* outboxRows(tenant))}`)
  })

const tokenIn = (bodyText: string) => {
  const text = JSON.parse(bodyText).text as string
  const match = /#token=(reset_[A-Za-z0-9_-]{43})/.exec(text)
  expect(match).not.toBeNull()
  return match![1]!
}

const Suite = Layer.merge(TestDatabaseLive, LoopbackProvider.Default)

layer(Suite, { excludeTestServices: true, timeout: 120_000 })("password-reset mail through real backend processes", (it) => {
  it.scoped("end to end through `bun run start`: a reset request commits its work, the worker mails the token (Idempotency-Key = the row, fingerprint stored), the token sets a new password: the old one is refused and the new one signs in; SIGTERM exits 0", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const { backend, port } = yield* start(enabledEnv(provider), { script: true })
      const oldPassword = `old-${randomBytes(12).toString("base64url")}`
      const newPassword = `new-${randomBytes(12).toString("base64url")}`
      const { email, tenant } = yield* withAccount(port, oldPassword)
      const signIn = (password: string) => call(port, "POST", "/api/sessions", { body: { tenant, email, password } })
      expect((yield* signIn(oldPassword)).status).toBe(201)

      yield* requestReset(port, tenant, email)
      const [row] = yield* waitForRow(tenant, (r) => r.state === "delivered")
      const [mail] = yield* provider.awaitRequests(1)
      expect(mail!.idempotencyKey).toBe(row!.id)
      expect(mail!.headers["authorization"]).toBe(`Bearer ${MAIL_TOKEN}`)
      const body = JSON.parse(mail!.bodyText)
      expect(body).toMatchObject({ from: "\"Acme\" <no-reply@acme.example>", to: [email], subject: "Reset your password" })
      expect(row!.fingerprint).toBe(new Bun.CryptoHasher("sha256").update(mail!.body).digest("hex"))
      const token = tokenIn(mail!.bodyText)
      expect(body.text).toContain(`https://app.acme.example/reset-password#token=${token}`)

      const ready = yield* get(port, "/ready")
      expect(JSON.parse(ready.body).checks.workers.running).toContain("reset-mail")

      const completed = yield* call(port, "POST", "/api/password-resets/complete", { body: { token, password: newPassword } })
      expect([completed.status, completed.json]).toEqual([200, { status: "completed" }])
      expect((yield* signIn(oldPassword)).status).toBe(401)
      expect((yield* signIn(newPassword)).status).toBe(201)
      const again = yield* call(port, "POST", "/api/password-resets/complete", { body: { token, password: `${newPassword}2` } })
      expect([again.status, again.json.reason]).toEqual([400, "reset-invalid"])

      const summary = yield* call(port, "GET", "/operator/reset-mail/summary", op)
      expect(summary.json.counts).toContainEqual({ state: "delivered", reason: null, count: 1 })

      yield* backend.signal("SIGTERM")
      expect(yield* backend.exitCode()).toBe(0)
      const output = yield* backend.output
      for (const secret of [token, oldPassword, newPassword, MAIL_TOKEN, TOKEN_KEY, email]) expect(output).not.toContain(secret)
    }))

  it.scoped("SIGTERM mid-call: the provider call is aborted and a fenced ambiguous-outcome quarantine (provider-interrupted) is recorded before the pool closes; exit 0", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ reply: LoopbackReply.hang({ accept: true }) })
      const { backend, port } = yield* start(enabledEnv(provider, { MAIL_PROVIDER_TIMEOUT: "30 seconds" }))
      const { email, tenant } = yield* withAccount(port, `pw-${randomBytes(12).toString("base64url")}`)
      yield* requestReset(port, tenant, email)
      yield* provider.awaitRequests(1)
      yield* backend.signal("SIGTERM")
      expect(yield* backend.exitCode()).toBe(0)
      yield* provider.awaitAborts(1)
      const [row] = yield* outboxRows(tenant)
      expect([row!.state, row!.reason, row!.attempt]).toEqual(["quarantined", "provider-interrupted", 1])
      expect((yield* provider.requests).length).toBe(1)
    }))

  it.scoped("A database failure during this cleanup produces a nonzero exit: SIGTERM mid-call while the reset-mail table cannot be written", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      const sql = yield* SqlClient.SqlClient
      yield* provider.reset
      yield* provider.script({ reply: LoopbackReply.hang({ accept: true }) })
      const { backend, port } = yield* start(enabledEnv(provider, { MAIL_PROVIDER_TIMEOUT: "30 seconds" }))
      const { email, tenant } = yield* withAccount(port, `pw-${randomBytes(12).toString("base64url")}`)
      yield* requestReset(port, tenant, email)
      yield* provider.awaitRequests(1)
      // The cleanup's fenced write has nowhere to go.
      yield* sql`ALTER TABLE reset_mail_outbox RENAME TO reset_mail_outbox_away`
      yield* Effect.addFinalizer(() => Effect.orDie(sql`ALTER TABLE IF EXISTS reset_mail_outbox_away RENAME TO reset_mail_outbox`))
      yield* backend.signal("SIGTERM")
      const code = yield* backend.exitCode()
      expect(code).not.toBe(0)
      expect(yield* backend.output).toContain("worker reset-mail did not stop cleanly")
      yield* sql`ALTER TABLE reset_mail_outbox_away RENAME TO reset_mail_outbox`
      const [row] = yield* outboxRows(tenant)
      // Still claimed: the next process's stale-claim rule quarantines it.
      expect([row!.state, row!.attempt]).toEqual(["sending", 1])
    }))

  it.scoped("SIGKILL mid-call cannot run cleanup: the next process quarantines the claim as stale (stale-claim) and never sends it again", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.hang({ accept: true }) })
      const env = enabledEnv(provider, { MAIL_PROVIDER_TIMEOUT: "1 second", PASSWORD_RESET_STALE_CLAIM: "3 seconds" })
      const first = yield* start(env)
      const { email, tenant } = yield* withAccount(first.port, `pw-${randomBytes(12).toString("base64url")}`)
      yield* requestReset(first.port, tenant, email)
      yield* provider.awaitRequests(1)
      yield* first.backend.signal("SIGKILL")
      yield* first.backend.exitCode()
      expect((yield* outboxRows(tenant))[0]!.state).toBe("sending")

      const next = yield* start(env)
      const [row] = yield* waitForRow(tenant, (r) => r.state === "quarantined")
      expect([row!.reason, row!.attempt]).toEqual(["stale-claim", 1])
      yield* Effect.sleep("500 millis")
      expect((yield* provider.requests).length).toBe(1)
      expect((yield* call(next.port, "GET", "/operator/reset-mail/ended?state=quarantined&reason=stale-claim", op)).json.rows)
        .toContainEqual(expect.objectContaining({ id: row!.id, tenant, reason: "stale-claim" }))
    }))

  it.scoped("The internal ingress never starts the worker and `disabled` stops it without removing durable work: the row waits until a backend runs enabled", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const ingress = yield* start({ ...enabledEnv(provider), ROLE: "ingress" })
      const { email, tenant } = yield* withAccount(ingress.port, `pw-${randomBytes(12).toString("base64url")}`)
      yield* requestReset(ingress.port, tenant, email)
      const disabled = yield* start({ PASSWORD_RESET_DELIVERY: "disabled", PASSWORD_RESET_TOKEN_KEY: TOKEN_KEY })
      yield* Effect.sleep("1 second")
      expect((yield* outboxRows(tenant)).map((r) => [r.state, r.attempt])).toEqual([["pending", 0]])
      expect((yield* provider.requests).length).toBe(0)
      expect(JSON.parse((yield* get(ingress.port, "/ready")).body).checks.workers).toMatchObject({ enabled: false, running: [] })
      expect(yield* disabled.backend.output).toContain("password-reset delivery disabled")
      yield* ingress.backend.signal("SIGTERM")
      yield* disabled.backend.signal("SIGTERM")

      yield* start(enabledEnv(provider))
      yield* waitForRow(tenant, (r) => r.state === "delivered")
      expect((yield* provider.requests).length).toBe(1)
    }))

  it.scoped("PASSWORD_RESET_DELIVERY missing, or enabled with incomplete provider configuration, stops start-up before the listener: non-zero exit, the variables named, nothing listening", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      for (const env of [{}, { ROLE: "ingress" }, { PASSWORD_RESET_DELIVERY: "enabled", MAIL_PROVIDER_TOKEN: MAIL_TOKEN }]) {
        const port = yield* freePort
        const backend = yield* spawnBun(backendMain, { DATABASE_URL: db.url, PORT: String(port), RECEIPT_DELIVERY: "disabled", ...env })
        expect(yield* backend.exitCode()).not.toBe(0)
        const output = yield* backend.output
        expect(output).not.toContain("listening on")
        expect(output).not.toContain(MAIL_TOKEN)
        if ("PASSWORD_RESET_DELIVERY" in env) {
          expect(output).toContain("PASSWORD_RESET_TOKEN_KEY, PASSWORD_RESET_FROM, PASSWORD_RESET_ORIGIN, MAIL_PROVIDER_URL")
        } else expect(output).toContain("PASSWORD_RESET_DELIVERY: Expected enabled or disabled")
      }
    }))
})
