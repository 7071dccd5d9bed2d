import { Clock, Duration, Effect, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import {
  type AccountId,
  type ApiKeyId,
  type ApiKeyKind,
  type ApiKeyName,
  decodeVerifiedIdentity,
  type DeviceCredentialId,
  type DeviceId,
  type Email,
  IdentityConflict,
  IdentityNotFound,
  type IssuedCredential,
  PasswordRejected,
  type Permission,
  type TenantId,
  Unauthenticated,
  type UnauthenticatedReason
} from "./Domain.ts"
import { type ApiKeyRow, type DeviceCredentialRow, IdentityRepo } from "./IdentityRepo.ts"
import * as Token from "./Token.ts"

/** Bounds on passwords: long enough to matter, short enough that argon2id work per attempt is bounded. */
export const passwordMinLength = 12
export const passwordMaxLength = 1024

export interface IssueApiKey {
  readonly tenant: TenantId
  readonly account: AccountId
  readonly kind: ApiKeyKind
  readonly name: ApiKeyName
  readonly permissions: ReadonlyArray<Permission>
  /** Absent: the key lives until revoked. */
  readonly expiresIn?: Duration.DurationInput | undefined
}

export interface IssueDeviceCredential {
  readonly tenant: TenantId
  readonly account: AccountId
  readonly device: DeviceId
  /** Absent: the credential lives until revoked. */
  readonly expiresIn?: Duration.DurationInput | undefined
}

export interface VerifiedAccount {
  readonly tenant: TenantId
  readonly account: AccountId
}

const refuse = (reason: UnauthenticatedReason) => Effect.fail(new Unauthenticated({ reason }))

// Random, lower-case hex: fits the AccountId pattern and says nothing about the account.
const newAccountId = () => randomBytes(10).toString("hex") as AccountId

const checkPassword = (password: Redacted.Redacted<string>) => {
  const length = Redacted.value(password).length
  return length < passwordMinLength
    ? Effect.fail(new PasswordRejected({ reason: "too-short" }))
    : length > passwordMaxLength
    ? Effect.fail(new PasswordRejected({ reason: "too-long" }))
    : Effect.void
}

const hashPassword = (password: Redacted.Redacted<string>) =>
  Effect.promise(() => Bun.password.hash(Redacted.value(password), { algorithm: "argon2id" }))

export class Identity extends Effect.Service<Identity>()("@delivery/identity/Identity", {
  effect: Effect.gen(function* () {
    const repo = yield* IdentityRepo

    // Verifying against a real argon2id hash when the account does not exist keeps
    // the response time from telling which e-mail addresses have accounts.
    const decoyHash = yield* Effect.cached(hashPassword(Redacted.make(randomBytes(24).toString("base64url"))))

    const expiryFrom = (expiresIn: Duration.DurationInput | undefined) =>
      expiresIn === undefined
        ? Effect.succeed(null)
        : Effect.map(Clock.currentTimeMillis, (now) => new Date(now + Duration.toMillis(expiresIn)))

    const createTenant = Effect.fn("Identity.createTenant")(function* (tenant: TenantId) {
      if (!(yield* repo.insertTenant(tenant))) return yield* new IdentityConflict({ entity: "tenant" })
    })

    const createAccount = Effect.fn("Identity.createAccount")(function* (input: {
      readonly tenant: TenantId
      readonly email: Email
      readonly password?: Redacted.Redacted<string> | undefined
    }) {
      if (input.password !== undefined) yield* checkPassword(input.password)
      if (!(yield* repo.tenantExists(input.tenant))) return yield* new IdentityNotFound({ entity: "tenant" })
      const passwordHash = input.password === undefined ? null : yield* hashPassword(input.password)
      const id = newAccountId()
      const inserted = yield* repo.insertAccount({ tenant: input.tenant, id, email: input.email, passwordHash })
      if (!inserted) return yield* new IdentityConflict({ entity: "account-email" })
      return id
    })

    const setAccountEnabled = Effect.fn("Identity.setAccountEnabled")(
      function* (tenant: TenantId, account: AccountId, enabled: boolean) {
        if (!(yield* repo.setAccountEnabled(tenant, account, enabled))) {
          return yield* new IdentityNotFound({ entity: "account" })
        }
      }
    )

    const verifyPassword = Effect.fn("Identity.verifyPassword")(function* (input: {
      readonly tenant: TenantId
      readonly email: Email
      readonly password: Redacted.Redacted<string>
    }) {
      const value = Redacted.value(input.password)
      if (value.length === 0) return yield* refuse("missing")
      if (value.length > passwordMaxLength) return yield* refuse("unknown")
      const account = yield* repo.findAccountByEmail(input.tenant, input.email)
      const stored = Option.flatMapNullable(account, (a) => a.password_hash)
      const hash = Option.isSome(stored) ? stored.value : yield* decoyHash
      const ok = yield* Effect.promise(() => Bun.password.verify(value, hash))
      if (!ok || Option.isNone(stored) || Option.isNone(account)) return yield* refuse("unknown")
      // Only someone who knows the password learns that the account is disabled.
      if (!account.value.enabled) return yield* refuse("disabled")
      return { tenant: input.tenant, account: account.value.id as AccountId } satisfies VerifiedAccount
    })

    // The plaintext token leaves exactly once, here; a missing account (foreign key) inserted nothing.
    const issued = <Id extends string>(
      generated: { readonly lookupId: string; readonly token: string },
      expiresAt: Date | null,
      inserted: boolean
    ): Effect.Effect<IssuedCredential<Id>, IdentityNotFound> =>
      inserted
        ? Effect.succeed({ id: generated.lookupId as Id, token: Redacted.make(generated.token), expiresAt })
        : Effect.fail(new IdentityNotFound({ entity: "account" }))

    const issueApiKey = Effect.fn("Identity.issueApiKey")(function* (input: IssueApiKey) {
      const generated = Token.generate(input.kind)
      const expiresAt = yield* expiryFrom(input.expiresIn)
      const inserted = yield* repo.insertApiKey({
        lookupId: generated.lookupId,
        tenant: input.tenant,
        account: input.account,
        kind: input.kind,
        name: input.name,
        permissions: input.permissions,
        secretHash: generated.secretHash,
        expiresAt
      })
      return yield* issued<ApiKeyId>(generated, expiresAt, inserted)
    })

    const issueDeviceCredential = Effect.fn("Identity.issueDeviceCredential")(
      function* (input: IssueDeviceCredential) {
        const generated = Token.generate("device")
        const expiresAt = yield* expiryFrom(input.expiresIn)
        const inserted = yield* repo.insertDeviceCredential({
          lookupId: generated.lookupId,
          tenant: input.tenant,
          account: input.account,
          device: input.device,
          secretHash: generated.secretHash,
          expiresAt
        })
        return yield* issued<DeviceCredentialId>(generated, expiresAt, inserted)
      }
    )

    const revokeApiKey = Effect.fn("Identity.revokeApiKey")(function* (tenant: TenantId, id: ApiKeyId) {
      const now = new Date(yield* Clock.currentTimeMillis)
      if (!(yield* repo.revokeApiKey(tenant, id, now))) return yield* new IdentityNotFound({ entity: "api-key" })
    })

    const revokeDeviceCredential = Effect.fn("Identity.revokeDeviceCredential")(
      function* (tenant: TenantId, id: DeviceCredentialId) {
        const now = new Date(yield* Clock.currentTimeMillis)
        if (!(yield* repo.revokeDeviceCredential(tenant, id, now))) {
          return yield* new IdentityNotFound({ entity: "device-credential" })
        }
      }
    )

    // The secret is checked before anything else about the row, so a caller who only
    // knows a lookup id learns nothing about the credential's state.
    const admit = (row: ApiKeyRow | DeviceCredentialRow, secret: string) =>
      Effect.gen(function* () {
        if (!Token.matches(secret, row.secret_hash)) return yield* refuse("unknown")
        if (row.revoked_at !== null) return yield* refuse("revoked")
        const now = yield* Clock.currentTimeMillis
        if (row.expires_at !== null && row.expires_at.getTime() <= now) return yield* refuse("expired")
        if (!row.account_enabled) return yield* refuse("disabled")
      })

    /**
     * Spec 000 step 1: the opaque credential becomes a closed VerifiedIdentity.
     * Format first (a malformed or missing token costs no hashing and no query),
     * then one indexed lookup, the constant-time secret check, revocation, expiry
     * (Effect Clock) and the account's enabled flag.
     */
    const authenticate = Effect.fn("Identity.authenticate")(function* (token: Redacted.Redacted<string>) {
      const value = Redacted.value(token)
      if (value.length === 0) return yield* refuse("missing")
      const parsed = Token.parse(value)
      if (Option.isNone(parsed)) return yield* refuse("malformed")
      const { kind, lookupId, secret } = parsed.value
      let identity: unknown
      if (kind === "device") {
        const row = yield* repo.findDeviceCredential(lookupId)
        if (Option.isNone(row)) return yield* refuse("unknown")
        yield* admit(row.value, secret)
        const { tenant_id, account_id, device_id } = row.value
        identity = { _tag: "Device", tenant: tenant_id, account: account_id, device: device_id }
      } else {
        const row = yield* repo.findApiKey(lookupId, kind)
        if (Option.isNone(row)) return yield* refuse("unknown")
        yield* admit(row.value, secret)
        const { tenant_id, account_id, lookup_id, permissions } = row.value
        identity = { _tag: "ApiKey", tenant: tenant_id, account: account_id, keyId: lookup_id, kind, permissions }
      }
      // The rows are constrained like the schema; a row that does not decode is a bug, not a refusal.
      return yield* Effect.orDie(decodeVerifiedIdentity(identity))
    })

    return {
      createTenant,
      createAccount,
      setAccountEnabled,
      verifyPassword,
      issueApiKey,
      issueDeviceCredential,
      revokeApiKey,
      revokeDeviceCredential,
      authenticate
    } as const
  }),
  dependencies: [IdentityRepo.Default]
}) {}
