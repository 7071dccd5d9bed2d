import { expect, layer } from "@effect/vitest"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { OPERATOR_TOKEN, startBackend } from "./support/Backend.ts"
import { call } from "./support/Http.ts"

// Password sign-in (docs/operations.md, "Sign-in sessions") in a real backend process: a short-lived session
// bearer, the same refusal for a wrong password and an unknown address, the peer limit before any hashing.

const op = { token: OPERATOR_TOKEN }
const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`

const withAccount = (port: number, password: string) =>
  Effect.gen(function* () {
    const tenant = unique("s")
    yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: tenant } })
    const created = yield* call(port, "POST", `/operator/tenants/${tenant}/accounts`, { ...op, body: { email: "Alice@Example.com", password } })
    return { tenant, account: created.json.account.id as string }
  })

layer(TestDatabaseLive, { excludeTestServices: true })("password sign-in in a real backend process", (it) => {
  it.scoped("the right password gives a session bearer that authenticates as the account; a wrong password and an unknown address are the same 401 unknown; a disabled account is 401 disabled, for sign-in and for its sessions; the password is never logged", () =>
    Effect.gen(function* () {
      const { port, backend } = yield* startBackend()
      const password = `pw-${randomBytes(12).toString("base64url")}`
      const { tenant, account } = yield* withAccount(port, password)
      const signIn = (email: string, pw: string) => call(port, "POST", "/api/sessions", { body: { tenant, email, password: pw } })

      const session = yield* signIn("alice@example.com", password)
      expect(session.status).toBe(201)
      expect(session.json).toMatchObject({ tenant, account })
      expect(session.json.token).toMatch(/^session_[0-9a-f]{24}_[A-Za-z0-9_-]{43}$/)
      expect(Date.parse(session.json.expiresAt) - Date.now()).toBeGreaterThan(14 * 60_000)
      expect((yield* call(port, "GET", "/api/whoami", { token: session.json.token })).json).toEqual({ _tag: "Session", tenant, account })

      const wrong = yield* signIn("alice@example.com", `${password}x`)
      const nobody = yield* signIn("nobody@example.com", password)
      for (const refused of [wrong, nobody]) {
        expect(refused.status).toBe(401)
        expect(refused.json).toEqual({ _tag: "Unauthenticated", reason: "unknown" })
      }
      expect((yield* signIn("ALICE@example.com", password)).status).toBe(201)

      yield* call(port, "POST", `/operator/tenants/${tenant}/accounts/${account}/disable`, op)
      expect((yield* signIn("alice@example.com", password)).json).toEqual({ _tag: "Unauthenticated", reason: "disabled" })
      expect((yield* call(port, "GET", "/api/whoami", { token: session.json.token })).json).toMatchObject({ reason: "disabled" })
      expect((yield* signIn("alice@example.com", "x")).json).toEqual({ _tag: "Unauthenticated", reason: "unknown" })
      expect(yield* backend.output).not.toContain(password)
      expect(yield* backend.output).not.toContain(session.json.token)
    }))

  it.scoped("a session expires after IDENTITY_SESSION_TTL (401 expired); sign-in attempts count against the peer limit before any hashing (429 with Retry-After)", () =>
    Effect.gen(function* () {
      const { port } = yield* startBackend({ IDENTITY_SESSION_TTL: "1 second", IDENTITY_PEER_LIMIT: "4" })
      const password = `pw-${randomBytes(12).toString("base64url")}`
      // Operator calls count against the same peer budget: two here.
      const { tenant } = yield* withAccount(port, password)
      const session = yield* call(port, "POST", "/api/sessions", { body: { tenant, email: "alice@example.com", password } })
      expect(session.status).toBe(201)
      yield* Effect.sleep("1100 millis")
      expect((yield* call(port, "GET", "/api/whoami", { token: session.json.token })).json).toMatchObject({ reason: "expired" })
      const limited = yield* call(port, "POST", "/api/sessions", { body: { tenant, email: "alice@example.com", password } })
      expect(limited.status).toBe(429)
      expect(Number(limited.headers["retry-after"])).toBeGreaterThanOrEqual(1)
    }))

  it.scoped("sign-in attempts for one address are limited across peers (IDENTITY_SIGNIN_LIMIT): past it even the right password is 429 with Retry-After, while another address of the tenant still signs in", () =>
    Effect.gen(function* () {
      const { port } = yield* startBackend({ IDENTITY_SIGNIN_LIMIT: "3" })
      const password = `pw-${randomBytes(12).toString("base64url")}`
      const { tenant } = yield* withAccount(port, password)
      yield* call(port, "POST", `/operator/tenants/${tenant}/accounts`, { ...op, body: { email: "bob@example.com", password } })
      const signIn = (email: string, pw: string) => call(port, "POST", "/api/sessions", { body: { tenant, email, password: pw } })
      for (let attempt = 0; attempt < 3; attempt++) expect((yield* signIn("alice@example.com", "wrong password!")).status).toBe(401)
      // The address is counted case-insensitively, like the account's e-mail.
      const limited = yield* signIn("ALICE@example.com", password)
      expect(limited.status).toBe(429)
      expect(limited.json).toMatchObject({ _tag: "IdentityRateLimited" })
      expect(Number(limited.headers["retry-after"])).toBeGreaterThan(60)
      expect((yield* signIn("bob@example.com", password)).status).toBe(201)
    }))
})
