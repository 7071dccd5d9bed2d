import { expect, layer } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Deferred, Duration, Effect, Either, Fiber, Layer, Redacted, Schedule, Schema, TestClock, TestContext } from "effect"
import { createHash, randomBytes } from "node:crypto"
import {
  ApiKeyName,
  decodeVerifiedIdentity,
  DeviceId,
  Email,
  Identity,
  Permission,
  TenantId,
  type UnauthenticatedReason,
  VerifiedIdentity
} from "../src/index.ts"
import { CountingSqlLive, SqlCounter, UnreachableSqlLive } from "@delivery/testing"
import { refusal } from "./support/Refusal.ts"

const TestLayer = Identity.Default.pipe(Layer.provideMerge(CountingSqlLive), Layer.provideMerge(TestDatabaseLive))

const password = Redacted.make("correct horse battery staple")

/** A tenant with one account (with a password) of its own, so tests never share rows. */
const fixture = Effect.gen(function* () {
  const identity = yield* Identity
  const tenant = TenantId.make(`t-${randomBytes(4).toString("hex")}`)
  yield* identity.createTenant(tenant)
  const email = Schema.decodeSync(Email)(`Alice.${tenant}@Example.COM`)
  const account = yield* identity.createAccount({ tenant, email, password })
  const key = (kind: "board" | "agent", expiresIn?: Duration.DurationInput) =>
    identity.issueApiKey({
      tenant,
      account,
      kind,
      name: ApiKeyName.make(`${kind} key`),
      permissions: [Permission.make("receipts:write")],
      expiresIn
    })
  const device = (expiresIn?: Duration.DurationInput) =>
    identity.issueDeviceCredential({ tenant, account, device: DeviceId.make("dev-1"), expiresIn })
  return { identity, tenant, email, account, key, device }
})

const reasonOf = (reason: UnauthenticatedReason) => expect.objectContaining({ _tag: "Unauthenticated", reason })

layer(TestLayer, { excludeTestServices: true })("Identity", (it) => {
  it.effect("every credential is stored only as a hash: no plaintext token or password in any row", () =>
    Effect.gen(function* () {
      const { key, device } = yield* fixture
      const board = yield* key("board")
      const dev = yield* device()
      const pg = yield* PgClient.PgClient
      const rows = yield* pg<{ row: string }>`
        SELECT row_to_json(t)::text AS row FROM identity_tenants t
        UNION ALL SELECT row_to_json(a)::text FROM identity_accounts a
        UNION ALL SELECT row_to_json(k)::text FROM identity_api_keys k
        UNION ALL SELECT row_to_json(d)::text FROM identity_device_credentials d`
      const text = rows.map((r) => r.row).join("\n")
      for (const token of [Redacted.value(board.token), Redacted.value(dev.token)]) {
        const secret = token.split("_").slice(2).join("_")
        expect(text).not.toContain(token)
        expect(text).not.toContain(secret)
        expect(text).not.toContain(Buffer.from(secret).toString("hex"))
        expect(text).not.toContain(Buffer.from(secret, "base64url").toString("hex"))
      }
      expect(text).not.toContain(Redacted.value(password))
      // What is stored is SHA-256 of the secret, indexed by the public lookup id.
      const [stored] = yield* pg<{ secret_hash: Uint8Array }>`
        SELECT secret_hash FROM identity_api_keys WHERE lookup_id = ${board.id}`
      const secret = Redacted.value(board.token).split("_").slice(2).join("_")
      expect(Buffer.from(stored!.secret_hash)).toEqual(createHash("sha256").update(secret).digest())
    }))

  it.effect("passwords are hashed with argon2id (`$argon2id$`) and verified case-insensitively by e-mail", () =>
    Effect.gen(function* () {
      const { identity, tenant, email, account } = yield* fixture
      const pg = yield* PgClient.PgClient
      const [row] = yield* pg<{ password_hash: string; email: string }>`
        SELECT password_hash, email FROM identity_accounts WHERE tenant_id = ${tenant} AND id = ${account}`
      expect(row!.password_hash.startsWith("$argon2id$")).toBe(true)
      expect(row!.email).toBe(row!.email.toLowerCase())
      const upper = Schema.decodeSync(Email)(email.toUpperCase())
      expect(yield* identity.verifyPassword({ tenant, email: upper, password })).toEqual({ tenant, account })
      expect(yield* refusal(identity.verifyPassword({ tenant, email, password: Redacted.make("wrong password!") })))
        .toEqual(reasonOf("unknown"))
      const nobody = Schema.decodeSync(Email)("nobody@example.com")
      expect(yield* refusal(identity.verifyPassword({ tenant, email: nobody, password }))).toEqual(reasonOf("unknown"))
      yield* identity.setAccountEnabled(tenant, account, false)
      expect(yield* refusal(identity.verifyPassword({ tenant, email, password }))).toEqual(reasonOf("disabled"))
      // One account per e-mail per tenant, whatever its case.
      expect(yield* refusal(identity.createAccount({ tenant, email: upper }))).toEqual(
        expect.objectContaining({ _tag: "IdentityConflict", entity: "account-email" })
      )
      expect(yield* refusal(identity.createAccount({ tenant, email: nobody, password: Redacted.make("short") })))
        .toEqual(expect.objectContaining({ _tag: "PasswordRejected", reason: "too-short" }))
    }))

  it.effect("authenticate the opaque credential into a closed VerifiedIdentity (board, agent, device)", () =>
    Effect.gen(function* () {
      const { identity, tenant, account, key, device } = yield* fixture
      const board = yield* key("board")
      const agent = yield* key("agent")
      const dev = yield* device()
      expect(yield* identity.authenticate(board.token)).toEqual({
        _tag: "ApiKey", tenant, account, keyId: board.id, kind: "board", permissions: ["receipts:write"]
      })
      expect(yield* identity.authenticate(agent.token)).toMatchObject({ _tag: "ApiKey", kind: "agent" })
      expect(yield* identity.authenticate(dev.token)).toEqual({ _tag: "Device", tenant, account, device: "dev-1" })
    }))

  it.effect("malformed, missing and unknown tokens are refused with their stable reason", () =>
    Effect.gen(function* () {
      const { identity } = yield* fixture
      const auth = (token: string) => refusal(identity.authenticate(Redacted.make(token)))
      expect(yield* auth("")).toEqual(reasonOf("missing"))
      for (const bad of ["nonsense", "board_abc_def", "admin_" + "a".repeat(24) + "_" + "b".repeat(43), "x".repeat(10_000)]) {
        expect(yield* auth(bad)).toEqual(reasonOf("malformed"))
      }
      expect(yield* auth(`board_${randomBytes(12).toString("hex")}_${randomBytes(32).toString("base64url")}`))
        .toEqual(reasonOf("unknown"))
    }))

  it.effect("a wrong secret with a correct lookup id is refused (as unknown), as is the right token under another kind", () =>
    Effect.gen(function* () {
      const { identity, key } = yield* fixture
      const board = yield* key("board")
      const [kind, lookupId] = Redacted.value(board.token).split("_")
      const forged = `${kind}_${lookupId}_${randomBytes(32).toString("base64url")}`
      expect(yield* refusal(identity.authenticate(Redacted.make(forged)))).toEqual(reasonOf("unknown"))
      const asAgent = Redacted.value(board.token).replace(/^board_/, "agent_")
      expect(yield* refusal(identity.authenticate(Redacted.make(asAgent)))).toEqual(reasonOf("unknown"))
    }))

  it.effect("revoked credentials are refused as revoked; revocation is tenant-scoped", () =>
    Effect.gen(function* () {
      const { identity, tenant, key, device } = yield* fixture
      const other = yield* fixture
      const board = yield* key("board")
      const dev = yield* device()
      expect(yield* refusal(other.identity.revokeApiKey(other.tenant, board.id))).toEqual(
        expect.objectContaining({ _tag: "IdentityNotFound", entity: "api-key" })
      )
      yield* identity.authenticate(board.token)
      yield* identity.revokeApiKey(tenant, board.id)
      yield* identity.revokeApiKey(tenant, board.id)
      yield* identity.revokeDeviceCredential(tenant, dev.id)
      expect(yield* refusal(identity.authenticate(board.token))).toEqual(reasonOf("revoked"))
      expect(yield* refusal(identity.authenticate(dev.token))).toEqual(reasonOf("revoked"))
    }))

  it.effect("expiry is checked against the Effect Clock: an expired credential is refused as expired", () =>
    Effect.gen(function* () {
      const { identity, key, device } = yield* fixture
      const board = yield* key("board", "1 hour")
      const dev = yield* device("1 hour")
      expect(board.expiresAt?.getTime()).toBe(60 * 60 * 1000)
      yield* identity.authenticate(board.token)
      yield* identity.authenticate(dev.token)
      yield* TestClock.adjust("1 hour")
      expect(yield* refusal(identity.authenticate(board.token))).toEqual(reasonOf("expired"))
      expect(yield* refusal(identity.authenticate(dev.token))).toEqual(reasonOf("expired"))
    }).pipe(Effect.provide(TestContext.TestContext)))

  it.effect("a disabled account's credentials are refused as disabled, and work again once re-enabled", () =>
    Effect.gen(function* () {
      const { identity, tenant, account, key, device } = yield* fixture
      const agent = yield* key("agent")
      const dev = yield* device()
      yield* identity.setAccountEnabled(tenant, account, false)
      expect(yield* refusal(identity.authenticate(agent.token))).toEqual(reasonOf("disabled"))
      expect(yield* refusal(identity.authenticate(dev.token))).toEqual(reasonOf("disabled"))
      yield* identity.setAccountEnabled(tenant, account, true)
      yield* identity.authenticate(agent.token)
    }))

  it.effect("VerifiedIdentity is closed: an extra member is refused, not dropped", () =>
    Effect.gen(function* () {
      const device = { _tag: "Device", tenant: "t1", account: "a1", device: "d1" }
      expect(Either.isRight(yield* Effect.either(decodeVerifiedIdentity(device)))).toBe(true)
      const extra = { ...device, admin: true }
      expect(Either.isLeft(yield* Effect.either(decodeVerifiedIdentity(extra)))).toBe(true)
      // Closed by the schema itself, whatever options a caller forgets to pass.
      expect(Either.isLeft(Schema.decodeUnknownEither(VerifiedIdentity)(extra))).toBe(true)
      const key = { _tag: "ApiKey", tenant: "t1", account: "a1", keyId: "k1", kind: "board", permissions: [] }
      expect(Either.isLeft(Schema.decodeUnknownEither(VerifiedIdentity)({ ...key, tenantOverride: "t2" }))).toBe(true)
      expect(Either.isLeft(Schema.decodeUnknownEither(VerifiedIdentity)({ ...key, kind: "operator" }))).toBe(true)
      expect(Either.isLeft(Schema.decodeUnknownEither(VerifiedIdentity)({ ...device, tenant: "T1 " }))).toBe(true)
    }))

  it.effect("format first: a malformed or missing token costs no database statement", () =>
    Effect.gen(function* () {
      const { identity } = yield* fixture
      const counter = yield* SqlCounter
      const before = yield* counter.count
      for (const bad of ["", "garbage", "device_" + "z".repeat(24) + "_" + "a".repeat(43)]) {
        yield* Effect.exit(identity.authenticate(Redacted.make(bad)))
      }
      expect(yield* counter.count).toBe(before)
      // The counter does count: a well-formed token costs exactly one read.
      yield* Effect.exit(identity.authenticate(Redacted.make(`device_${"a".repeat(24)}_${"b".repeat(43)}`)))
      expect(yield* counter.count).toBe(before + 1)
    }))

  it.effect("device credential lookups that arrive while one runs are made by the next statement together, and each request gets its own identity or refusal", () =>
    Effect.gen(function* () {
      const { identity, tenant, device } = yield* fixture
      const sql = yield* PgClient.PgClient
      const counter = yield* SqlCounter
      const [first, good, revoked] = yield* Effect.all([device(), device(), device()])
      yield* identity.revokeDeviceCredential(tenant, revoked!.id)
      const unknown = Redacted.make(`device_${randomBytes(12).toString("hex")}_${"b".repeat(43)}`)

      // A transaction holding the credentials table keeps the first lookup waiting inside the database.
      const locked = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(sql.withTransaction(Effect.gen(function* () {
        yield* sql`LOCK TABLE identity_device_credentials IN ACCESS EXCLUSIVE MODE`
        yield* Deferred.succeed(locked, undefined)
        yield* Deferred.await(release)
      })))
      yield* Deferred.await(locked)
      const before = (yield* counter.statements).length
      const waiting = yield* Effect.fork(identity.authenticate(first!.token))
      yield* Effect.retry(
        Effect.flatMap(sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%identity_device_credentials%' AND pid <> pg_backend_pid()`,
          ([row]) => row!.n > 0 ? Effect.void : Effect.fail("not yet")),
        Schedule.spaced("10 millis").pipe(Schedule.upTo("10 seconds"))
      )
      const rest = yield* Effect.fork(Effect.all(
        [good!.token, revoked!.token, unknown, good!.token].map((token) => Effect.either(identity.authenticate(token))),
        { concurrency: "unbounded" }
      ))
      yield* Effect.sleep("200 millis")
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
      expect(yield* Fiber.join(waiting)).toMatchObject({ _tag: "Device", tenant, device: "dev-1" })
      const [ok, refusedRevoked, refusedUnknown, again] = yield* Fiber.join(rest)
      expect(Either.getOrThrow(ok!)).toMatchObject({ _tag: "Device", tenant })
      expect(Either.getOrThrow(again!)).toMatchObject({ _tag: "Device", tenant })
      expect(Either.flip(refusedRevoked!).pipe(Either.getOrThrow)).toEqual(reasonOf("revoked"))
      expect(Either.flip(refusedUnknown!).pipe(Either.getOrThrow)).toEqual(reasonOf("unknown"))
      // One statement for the first lookup, one for the four that arrived while it waited.
      const lookups = (yield* counter.statements).slice(before).filter((s) => s.includes("FROM identity_device_credentials"))
      expect(lookups).toHaveLength(2)
    }))

  it.effect("a database outage is a typed IdentityStorageUnavailable outcome, not a defect", () =>
    Effect.gen(function* () {
      const identity = yield* Identity
      const token = Redacted.make(`board_${"c".repeat(24)}_${"d".repeat(43)}`)
      expect(yield* refusal(identity.authenticate(token))).toEqual(
        expect.objectContaining({ _tag: "IdentityStorageUnavailable", operation: "findApiKey" })
      )
      expect(yield* refusal(identity.createTenant(TenantId.make("down")))).toEqual(
        expect.objectContaining({ _tag: "IdentityStorageUnavailable" })
      )
    }).pipe(Effect.provide(Identity.Default.pipe(Layer.provide(UnreachableSqlLive)))))

  it.effect("each change commits with its identity_audit row or not at all: a refused change writes no row, and the table refuses UPDATE, DELETE and TRUNCATE", () =>
    Effect.gen(function* () {
      const { identity, tenant, account } = yield* fixture
      const pg = yield* PgClient.PgClient
      const by = { actor: "operator:environment", correlationId: "0123456789abcdef0123456789abcdef" }
      const key = yield* identity.issueApiKeyAs({ tenant, account, kind: "board", name: ApiKeyName.make("ci"), permissions: [] }, by)
      yield* identity.revokeApiKey(tenant, key.id, by)
      yield* identity.revokeApiKey(tenant, key.id, by)
      expect(yield* refusal(identity.revokeApiKey(TenantId.make("t-other"), key.id, by)))
        .toEqual(expect.objectContaining({ _tag: "IdentityNotFound", entity: "api-key" }))
      expect(yield* refusal(identity.createTenant(tenant, by))).toEqual(expect.objectContaining({ _tag: "IdentityConflict", entity: "tenant" }))
      const rows = yield* pg<{ action: string; subject: string; outcome: string; actor: string; correlation_id: string }>`
        SELECT action, subject, outcome, actor, correlation_id FROM identity_audit WHERE tenant = ${tenant} ORDER BY audit_id`
      expect(rows.map((r) => [r.action, r.subject, r.outcome])).toEqual([
        ["tenant-create", tenant, "applied"],
        ["account-create", account, "applied"],
        ["api-key-issue", key.id, "applied"],
        ["api-key-revoke", key.id, "applied"],
        ["api-key-revoke", key.id, "unchanged"]
      ])
      // Changes made by code name the system as actor, each with a correlation id of its own.
      expect(rows.slice(0, 2).map((r) => r.actor)).toEqual(["system:identity", "system:identity"])
      expect(rows[0]!.correlation_id).not.toBe(rows[1]!.correlation_id)
      expect(rows.slice(2).every((r) => r.actor === by.actor && r.correlation_id === by.correlationId)).toBe(true)

      for (const statement of [
        `UPDATE identity_audit SET outcome = 'unchanged' WHERE tenant = '${tenant}'`,
        `DELETE FROM identity_audit WHERE tenant = '${tenant}'`,
        "TRUNCATE identity_audit"
      ]) {
        const failed = yield* pg.withTransaction(Effect.zipRight(pg.unsafe(statement), Effect.fail("taken" as const))).pipe(Effect.flip)
        expect(String((failed as { cause?: { message?: string } }).cause?.message ?? failed)).toContain("append-only")
      }
      expect((yield* pg`SELECT 1 FROM identity_audit WHERE tenant = ${tenant}`).length).toBe(5)
    }))
})
