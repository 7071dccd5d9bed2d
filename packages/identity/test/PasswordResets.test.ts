import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, Effect, Layer, Option, Redacted, Schema, TestClock, TestContext } from "effect"
import { refusalReason, refusalTag } from "./support/Refusal.ts"
import { CountingSqlLive, refusalsCounted, SqlCounter } from "@delivery/testing"
import { randomBytes } from "node:crypto"
import {
  Email,
  Identity,
  PasswordResets,
  SignInLimit,
  SignInLimitLive,
  TenantId
} from "../src/index.ts"

// Password-reset verifications (spec 002's canonical verification, owned by identity) and the sign-in limit per
// address, through their services on a database of this file's own. The reset lifetime is not the default
// (PASSWORD_RESET_TTL is read when the service is built).

const keyText = () => randomBytes(32).toString("base64")
const configOf = (env: Record<string, string>) => Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
const resetsWith = (env: Record<string, string>) => PasswordResets.Default.pipe(Layer.provide(configOf(env)))

const TestLayer = Layer.mergeAll(
  resetsWith({ PASSWORD_RESET_TOKEN_KEY: keyText(), PASSWORD_RESET_TTL: "30 minutes" }),
  Identity.Default
).pipe(Layer.provideMerge(CountingSqlLive), Layer.provideMerge(TestDatabaseLive))


const password = Redacted.make("correct horse battery staple")
/** A correlation id as the HTTP edge makes them (32 hex digits, the audit table's own check). */
const cid = () => randomBytes(16).toString("hex")
const newPassword = Redacted.make("a new and longer passphrase")

const fixture = Effect.gen(function* () {
  const identity = yield* Identity
  const resets = yield* PasswordResets
  const tenant = TenantId.make(`r-${randomBytes(4).toString("hex")}`)
  yield* identity.createTenant(tenant)
  const email = Schema.decodeSync(Email)(`ops@${tenant}.example`)
  const account = yield* identity.createAccount({ tenant, email, password })
  const begin = Effect.map(resets.begin({ tenant, email }), Option.getOrThrow)
  const tokenOf = (verificationId: string) =>
    Effect.map(resets.mailContext(verificationId), (context) => {
      if (context._tag !== "Live") throw new Error(`verification ${context._tag}`)
      return context.token
    })
  return { identity, resets, tenant, email, account, begin, tokenOf }
})

layer(TestLayer, { excludeTestServices: true })("password resets and the sign-in limit", (it) => {
  it.effect("begin: an enabled account's address gets a verification that expires after PASSWORD_RESET_TTL (30 minutes here); an unknown or disabled address gets none", () =>
    Effect.gen(function* () {
      const { identity, resets, tenant, email, account } = yield* fixture
      const begun = yield* resets.begin({ tenant, email })
      expect(Option.map(begun, ({ account: a, expiresAt, tenant: t }) => ({ a, t, expiresAt: expiresAt.getTime() })))
        .toEqual(Option.some({ a: account, t: tenant, expiresAt: 30 * 60_000 }))
      expect(yield* resets.begin({ tenant, email: Schema.decodeSync(Email)(`nobody@${tenant}.example`) })).toEqual(Option.none())
      yield* identity.setAccountEnabled(tenant, account, false)
      expect(yield* resets.begin({ tenant, email })).toEqual(Option.none())
    }).pipe(Effect.provide(TestContext.TestContext)))

  it.effect("every delivery attempt reads the verification in spec 002's order: Missing, then Expired (at its expiry), Consumed, AccountDisabled, Unreadable under another key, otherwise Live with the token", () =>
    Effect.gen(function* () {
      const { identity, resets, tenant, email, account, begin, tokenOf } = yield* fixture
      expect(yield* resets.mailContext("0b7f6a52-4a43-4d8e-9a57-0d1c2e3f4a5b")).toEqual({ _tag: "Missing" })

      const live = yield* begin
      const context = yield* resets.mailContext(live.verificationId)
      expect(context).toMatchObject({ _tag: "Live", tenant, account, email, expiresAt: live.expiresAt })
      expect(Redacted.value(yield* tokenOf(live.verificationId))).toMatch(/^reset_[A-Za-z0-9_-]{43}$/)
      // Under another PASSWORD_RESET_TOKEN_KEY the sealed token does not open.
      const elsewhere = yield* Effect.provide(PasswordResets, resetsWith({ PASSWORD_RESET_TOKEN_KEY: keyText() }))
      expect(yield* elsewhere.mailContext(live.verificationId)).toEqual({ _tag: "Unreadable" })

      const used = yield* begin
      yield* resets.complete({ token: yield* tokenOf(used.verificationId), password: newPassword, correlationId: cid() })
      expect(yield* resets.mailContext(used.verificationId)).toEqual({ _tag: "Consumed" })

      const disabled = yield* begin
      yield* identity.setAccountEnabled(tenant, account, false)
      expect(yield* resets.mailContext(disabled.verificationId)).toEqual({ _tag: "AccountDisabled" })

      // Expiry comes first: an expired verification is Expired whatever else is true of it.
      yield* TestClock.adjust("29 minutes")
      expect(yield* resets.mailContext(disabled.verificationId)).toEqual({ _tag: "AccountDisabled" })
      yield* TestClock.adjust("1 minute")
      for (const { verificationId } of [disabled, used, live]) {
        expect(yield* resets.mailContext(verificationId)).toEqual({ _tag: "Expired" })
      }
    }).pipe(Effect.provide(TestContext.TestContext)))

  it.effect("complete: a live token and a valid new password set the password, consume every live verification of the account, revoke its sessions and write one audit row, in one transaction; anything else is ResetInvalid and changes nothing", () =>
    Effect.gen(function* () {
      const { identity, resets, tenant, email, account, begin, tokenOf } = yield* fixture
      const sql = yield* SqlClient.SqlClient
      const first = yield* begin
      const second = yield* begin
      const token = yield* tokenOf(first.verificationId)
      const session = yield* identity.signIn({ tenant, email, password })
      const applied = cid()

      // The password is checked before the token is looked at; a malformed or unknown token changes nothing.
      expect(yield* refusalTag(resets.complete({ token, password: Redacted.make("short"), correlationId: cid() }))).toBe("PasswordRejected")
      const counter = yield* SqlCounter
      const before = yield* counter.count
      expect(yield* refusalTag(resets.complete({ token: Redacted.make("nope"), password: newPassword, correlationId: cid() }))).toBe("ResetInvalid")
      // A token that is not one costs no statement (and no password hash).
      expect(yield* counter.count).toBe(before)
      const unknown = Redacted.make(`reset_${randomBytes(32).toString("base64url")}`)
      expect(yield* refusalTag(resets.complete({ token: unknown, password: newPassword, correlationId: cid() }))).toBe("ResetInvalid")
      expect(yield* identity.verifyPassword({ tenant, email, password })).toEqual({ tenant, account })

      expect(yield* resets.complete({ token, password: newPassword, correlationId: applied })).toEqual({ tenant, account })
      expect(yield* identity.verifyPassword({ tenant, email, password: newPassword })).toEqual({ tenant, account })
      expect(yield* refusalReason(identity.verifyPassword({ tenant, email, password }))).toBe("unknown")
      expect(yield* resets.mailContext(second.verificationId)).toEqual({ _tag: "Consumed" })
      expect(yield* refusalReason(identity.authenticate(session.token))).toBe("revoked")
      const audit = yield* sql<{ outcome: string; actor: string; correlation_id: string }>`
        SELECT outcome, actor, correlation_id FROM identity_audit WHERE tenant = ${tenant} AND action = 'password-reset'`
      expect(audit).toEqual([{ outcome: "applied", actor: "account:reset-token", correlation_id: applied }])

      // Used once, the token is spent.
      expect(yield* refusalTag(resets.complete({ token, password: password, correlationId: cid() }))).toBe("ResetInvalid")

      // Expired, or for a disabled account: refused, and the password stays.
      const late = yield* begin
      const lateToken = yield* tokenOf(late.verificationId)
      yield* TestClock.adjust("30 minutes")
      expect(yield* refusalTag(resets.complete({ token: lateToken, password, correlationId: cid() }))).toBe("ResetInvalid")
      const off = yield* begin
      const offToken = yield* tokenOf(off.verificationId)
      yield* identity.setAccountEnabled(tenant, account, false)
      expect(yield* refusalTag(resets.complete({ token: offToken, password, correlationId: cid() }))).toBe("ResetInvalid")
      yield* identity.setAccountEnabled(tenant, account, true)
      expect(yield* identity.verifyPassword({ tenant, email, password: newPassword })).toEqual({ tenant, account })
      expect((yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM identity_audit WHERE tenant = ${tenant} AND action = 'password-reset'`)[0]!.n).toBe(1)
    }).pipe(Effect.provide(TestContext.TestContext)))

  it.effect("without PASSWORD_RESET_TOKEN_KEY no reset can be begun, read or completed here: each is PasswordResetUnavailable", () =>
    Effect.gen(function* () {
      const { tenant, email } = yield* fixture
      const off = yield* Effect.provide(PasswordResets, resetsWith({}))
      expect(off.enabled).toBe(false)
      expect(yield* refusalTag(off.begin({ tenant, email }))).toBe("PasswordResetUnavailable")
      expect(yield* refusalTag(off.mailContext("0b7f6a52-4a43-4d8e-9a57-0d1c2e3f4a5b"))).toBe("PasswordResetUnavailable")
      const token = Redacted.make(`reset_${randomBytes(32).toString("base64url")}`)
      expect(yield* refusalTag(off.complete({ token, password: newPassword, correlationId: cid() }))).toBe("PasswordResetUnavailable")
    }))

  it.effect("sign-in attempts per address of a tenant are limited by IDENTITY_SIGNIN_LIMIT per IDENTITY_SIGNIN_WINDOW from every peer together; another address or tenant has its own budget", () =>
    Effect.gen(function* () {
      const limit = yield* Effect.provide(
        SignInLimit,
        SignInLimitLive.pipe(Layer.provide(configOf({ IDENTITY_SIGNIN_LIMIT: "2", IDENTITY_SIGNIN_WINDOW: "1 minute" })))
      )
      const tenant = TenantId.make("t-signin")
      const email = Schema.decodeSync(Email)("ops@t-signin.example")
      yield* limit.admit(tenant, email)
      yield* limit.admit(tenant, email)
      const counted = yield* refusalsCounted("identity-signin")
      const refused = yield* Effect.flip(limit.admit(tenant, email))
      // Counted under its own label in `delivery_limiter_refusals_total`.
      expect(yield* refusalsCounted("identity-signin")).toBe(counted + 1)
      expect(refused).toMatchObject({ _tag: "IdentityRateLimited" })
      expect(refused._tag === "IdentityRateLimited" && refused.retryAfter > 0 && refused.retryAfter <= 60_000).toBe(true)
      yield* limit.admit(tenant, Schema.decodeSync(Email)("other@t-signin.example"))
      yield* limit.admit(TenantId.make("t-other"), email)
    }))
})
