import { expect, layer } from "@effect/vitest"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, type Duration, Effect, Exit, Layer, Option, Redacted, Schema, TestClock, TestContext } from "effect"
import { randomBytes } from "node:crypto"
import { HttpServerRequest } from "@effect/platform"
import {
  ApiKeyName,
  AuthenticatedRequest,
  Authentication,
  AuthenticationLive,
  DeviceId,
  Email,
  Identity,
  Permission,
  TenantId,
  type VerifiedIdentity
} from "../src/index.ts"
import { passwordMaxLength } from "../src/Password.ts"
import { CountingSqlLive, SqlCounter } from "@delivery/testing"
import { refusalReason } from "./support/Refusal.ts"

// Sign-in sessions and the reads idle wake makes of identity, on a database of this file's own, with a session
// lifetime that is not the default (IDENTITY_SESSION_TTL is read when the service is built).

const TestLayer = Identity.Default.pipe(
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["IDENTITY_SESSION_TTL", "2 minutes"]])))),
  Layer.provideMerge(CountingSqlLive),
  Layer.provideMerge(TestDatabaseLive)
)

const password = Redacted.make("correct horse battery staple")

const fixture = (secret: Redacted.Redacted<string> = password) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    const tenant = TenantId.make(`s-${randomBytes(4).toString("hex")}`)
    yield* identity.createTenant(tenant)
    const email = Schema.decodeSync(Email)(`ops@${tenant}.example`)
    const account = yield* identity.createAccount({ tenant, email, password: secret })
    return { identity, tenant, email, account }
  })

layer(TestLayer, { excludeTestServices: true })("Identity sign-in and idle wake's reads", (it) => {
  it.effect("sign-in gives a session token that authenticates as the account's Session until IDENTITY_SESSION_TTL (2 minutes here) has passed, then is refused expired; an unknown session is unknown", () =>
    Effect.gen(function* () {
      const { identity, tenant, email, account } = yield* fixture()
      const session = yield* identity.signIn({ tenant, email, password })
      expect(session).toMatchObject({ tenant, account })
      expect(session.expiresAt.getTime()).toBe(2 * 60_000)
      expect(Redacted.value(session.token)).toMatch(/^session_[0-9a-f]{24}_[A-Za-z0-9_-]{43}$/)
      expect(yield* identity.authenticate(session.token)).toEqual({ _tag: "Session", tenant, account })
      yield* TestClock.adjust("119 seconds")
      expect(yield* identity.authenticate(session.token)).toEqual({ _tag: "Session", tenant, account })
      yield* TestClock.adjust("1 second")
      expect(yield* refusalReason(identity.authenticate(session.token))).toBe("expired")
      const unknown = `session_${randomBytes(12).toString("hex")}_${randomBytes(32).toString("base64url")}`
      expect(yield* refusalReason(identity.authenticate(Redacted.make(unknown)))).toBe("unknown")
      // A wrong password signs nobody in.
      expect(yield* refusalReason(identity.signIn({ tenant, email, password: Redacted.make("not the password at all") }))).toBe("unknown")
    }).pipe(Effect.provide(TestContext.TestContext)))

  it.effect("a password is checked within its bounds: empty is missing and one over 1,024 characters is unknown, both without a query or a hash; a password of exactly 1,024 characters signs in", () =>
    Effect.gen(function* () {
      const longest = Redacted.make("p".repeat(passwordMaxLength))
      const { identity, tenant, email, account } = yield* fixture(longest)
      expect(yield* identity.verifyPassword({ tenant, email, password: longest })).toEqual({ tenant, account })
      const counter = yield* SqlCounter
      const before = yield* counter.count
      expect(yield* refusalReason(identity.verifyPassword({ tenant, email, password: Redacted.make("") }))).toBe("missing")
      const tooLong = Redacted.make("p".repeat(passwordMaxLength + 1))
      expect(yield* refusalReason(identity.verifyPassword({ tenant, email, password: tooLong }))).toBe("unknown")
      expect(yield* counter.count).toBe(before)
    }))

  it.effect("idle wake's reads: the active board and agent keys (not revoked, not expired at the Clock's now, account enabled) ordered by lookup id, at most `limit`; whether any device credential could still authenticate", () =>
    Effect.gen(function* () {
      const identity = yield* Identity
      expect(yield* identity.activeApiKeyMaterial(100)).toEqual([])
      expect(yield* identity.hasActiveDeviceCredential()).toBe(false)
      const { account, tenant } = yield* fixture()
      const issue = (kind: "board" | "agent", expiresIn?: Duration.DurationInput) =>
        identity.issueApiKey({ tenant, account, kind, name: ApiKeyName.make(kind), permissions: [Permission.make("receipts:read")], expiresIn })
      const board = yield* issue("board")
      const agent = yield* issue("agent", "1 hour")
      const revoked = yield* issue("board")
      yield* identity.revokeApiKey(tenant, revoked.id)
      const active = yield* identity.activeApiKeyMaterial(100)
      expect(active.map((m) => m.lookupId)).toEqual([board.id, agent.id].sort())
      expect(active.map((m) => m.kind).sort()).toEqual(["agent", "board"])
      expect(Option.isSome(Option.fromNullable(active.find((m) => m.lookupId === agent.id)?.expiresAt))).toBe(true)
      expect(yield* identity.activeApiKeyMaterial(1)).toHaveLength(1)
      yield* TestClock.adjust("1 hour")
      expect((yield* identity.activeApiKeyMaterial(100)).map((m) => m.lookupId)).toEqual([board.id])
      yield* identity.setAccountEnabled(tenant, account, false)
      expect(yield* identity.activeApiKeyMaterial(100)).toEqual([])
      yield* identity.setAccountEnabled(tenant, account, true)

      const device = yield* identity.issueDeviceCredential({ tenant, account, device: DeviceId.make("d-1") })
      expect(yield* identity.hasActiveDeviceCredential()).toBe(true)
      yield* identity.revokeDeviceCredential(tenant, device.id)
      expect(yield* identity.hasActiveDeviceCredential()).toBe(false)
    }).pipe(Effect.provide(TestContext.TestContext)))

  it.effect("the bearer middleware writes the identity it verified into the request's AuthenticatedRequest note (idle wake reads it without a second lookup), and leaves it empty when it refuses", () =>
    Effect.gen(function* () {
      const { identity, tenant, email, account } = yield* fixture()
      const session = yield* identity.signIn({ tenant, email, password })
      const authentication = yield* Effect.provide(Authentication, AuthenticationLive)
      const attempt = (token: Redacted.Redacted<string>) =>
        Effect.gen(function* () {
          const note: { identity: VerifiedIdentity | undefined } = { identity: undefined }
          const request = HttpServerRequest.fromWeb(
            new Request("http://127.0.0.1/api/whoami", { headers: { authorization: `Bearer ${Redacted.value(token)}` } })
          )
          // The middleware reads the request alone; the route's context and search parameters are HttpApi's.
          const bearer = authentication.bearer(token) as Effect.Effect<VerifiedIdentity, unknown, HttpServerRequest.HttpServerRequest>
          const exit = yield* Effect.exit(bearer.pipe(
            Effect.provideService(HttpServerRequest.HttpServerRequest, request),
            Effect.provideService(AuthenticatedRequest, note)
          ))
          return { exit, note: note.identity }
        })
      const ok = yield* attempt(session.token)
      expect(ok.exit).toEqual(Exit.succeed({ _tag: "Session", tenant, account }))
      expect(ok.note).toEqual({ _tag: "Session", tenant, account })
      const refused = yield* attempt(Redacted.make(`session_${randomBytes(12).toString("hex")}_${randomBytes(32).toString("base64url")}`))
      expect(Exit.isFailure(refused.exit)).toBe(true)
      expect(refused.note).toBeUndefined()
    }))
})
