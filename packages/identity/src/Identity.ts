import { makeCorrelationId, positiveDuration } from "@delivery/core"
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
  type IdentityStorageUnavailable,
  type IssuedCredential,
  PasswordRejected,
  type Permission,
  type TenantId,
  Unauthenticated,
  type UnauthenticatedReason
} from "./Domain.ts"
import {
  type AccountViewRow,
  type ApiKeyRow,
  type ApiKeyViewRow,
  type AuditEntry,
  type DeviceCredentialRow,
  type DeviceCredentialViewRow,
  type SessionRow,
  IdentityRepo,
  type TenantRow
} from "./IdentityRepo.ts"
import {
  type AccountView,
  type ApiKeyView,
  credentialState,
  type DeviceCredentialView,
  type ProvisioningActor,
  type TenantView
} from "./Views.ts"
import * as Token from "./Token.ts"

export const IDENTITY_SESSION_TTL = "IDENTITY_SESSION_TTL"

/** How long a sign-in session authenticates: short, so a password change is felt soon everywhere. */
export const SessionTtlConfig = positiveDuration(IDENTITY_SESSION_TTL, "15 minutes")

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

/** Keyset paging by id: `after` is the last id of the previous page; `limit` is 1..100. */
export interface Page {
  readonly after?: string | undefined
  readonly limit: number
}

// Rows are constrained like the views' schemas (CHECKs in migration 0001), so they are branded as they are.
const tenantView = (row: TenantRow): TenantView => ({ id: row.id as TenantId, createdAt: row.created_at })

const accountView = (row: AccountViewRow): AccountView => ({
  tenant: row.tenant_id as TenantId,
  id: row.id as AccountId,
  email: row.email as Email,
  enabled: row.enabled,
  hasPassword: row.has_password,
  createdAt: row.created_at
})

const credentialTimes = (row: { readonly expires_at: Date | null; readonly revoked_at: Date | null; readonly created_at: Date }, now: number) => ({
  state: credentialState({ expiresAt: row.expires_at, revokedAt: row.revoked_at }, now),
  expiresAt: row.expires_at,
  revokedAt: row.revoked_at,
  createdAt: row.created_at
})

const apiKeyView = (row: ApiKeyViewRow, now: number): ApiKeyView => ({
  tenant: row.tenant_id as TenantId,
  id: row.lookup_id as ApiKeyId,
  account: row.account_id as AccountId,
  kind: row.kind,
  name: row.name as ApiKeyName,
  permissions: row.permissions as ReadonlyArray<Permission>,
  ...credentialTimes(row, now)
})

const deviceCredentialView = (row: DeviceCredentialViewRow, now: number): DeviceCredentialView => ({
  tenant: row.tenant_id as TenantId,
  id: row.lookup_id as DeviceCredentialId,
  account: row.account_id as AccountId,
  device: row.device_id as DeviceId,
  ...credentialTimes(row, now)
})

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
    const sessionTtl = yield* SessionTtlConfig

    // Verifying against a real argon2id hash when the account does not exist keeps
    // the response time from telling which e-mail addresses have accounts.
    const decoyHash = yield* Effect.cached(hashPassword(Redacted.make(randomBytes(24).toString("base64url"))))

    const expiryFrom = (expiresIn: Duration.DurationInput | undefined) =>
      expiresIn === undefined
        ? Effect.succeed(null)
        : Effect.map(Clock.currentTimeMillis, (now) => new Date(now + Duration.toMillis(expiresIn)))

    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    /**
     * One change and its `identity_audit` row in one transaction: a committed change always has its row,
     * a refused or failed one has neither. `by` absent: made by code, not by an authenticated caller.
     */
    const audited = <A, E, R>(
      operation: string,
      by: ProvisioningActor | undefined,
      change: (at: Date) => Effect.Effect<{ readonly value: A; readonly audit: Omit<AuditEntry, "actor" | "correlationId" | "at"> }, E, R>
    ) =>
      Effect.gen(function* () {
        const actor = by ?? { actor: "system:identity", correlationId: makeCorrelationId() }
        const at = yield* now
        return yield* repo.transaction(operation, Effect.gen(function* () {
          const made = yield* change(at)
          yield* repo.audit({ ...made.audit, ...actor, at })
          return made.value
        }))
      })

    const createTenant = Effect.fn("Identity.createTenant")(function* (tenant: TenantId, by?: ProvisioningActor) {
      return yield* audited("createTenant", by, (at) =>
        Effect.flatMap(repo.insertTenant(tenant, at), Option.match({
          onNone: () => Effect.fail(new IdentityConflict({ entity: "tenant" })),
          onSome: (row) =>
            Effect.succeed({
              value: tenantView(row),
              audit: { tenant, action: "tenant-create", subject: tenant, outcome: "applied" } as const
            })
        })))
    })

    const createAccountAs = Effect.fn("Identity.createAccount")(function* (input: {
      readonly tenant: TenantId
      readonly email: Email
      readonly password?: Redacted.Redacted<string> | undefined
    }, by?: ProvisioningActor) {
      if (input.password !== undefined) yield* checkPassword(input.password)
      if (!(yield* repo.tenantExists(input.tenant))) return yield* new IdentityNotFound({ entity: "tenant" })
      // argon2id before the transaction: a slow hash never holds a connection or a lock.
      const passwordHash = input.password === undefined ? null : yield* hashPassword(input.password)
      const id = newAccountId()
      return yield* audited("createAccount", by, () =>
        Effect.flatMap(repo.insertAccount({ tenant: input.tenant, id, email: input.email, passwordHash }), Option.match({
          // A tenant is never deleted, so a missing insert is the (tenant, email) uniqueness.
          onNone: () => Effect.fail(new IdentityConflict({ entity: "account-email" })),
          onSome: (row) =>
            Effect.succeed({
              value: accountView(row),
              audit: { tenant: input.tenant, action: "account-create", subject: id, outcome: "applied" } as const
            })
        })))
    })

    const createAccount = (input: Parameters<typeof createAccountAs>[0], by?: ProvisioningActor) =>
      Effect.map(createAccountAs(input, by), (account) => account.id)

    const setAccountEnabled = Effect.fn("Identity.setAccountEnabled")(
      function* (tenant: TenantId, account: AccountId, enabled: boolean, by?: ProvisioningActor) {
        return yield* audited("setAccountEnabled", by, () =>
          Effect.gen(function* () {
            const current = yield* repo.lockAccount(tenant, account)
            if (Option.isNone(current)) return yield* new IdentityNotFound({ entity: "account" })
            const outcome = current.value.enabled === enabled ? "unchanged" as const : "applied" as const
            const row = outcome === "applied" ? yield* repo.setAccountEnabled(tenant, account, enabled) : current.value
            const action = enabled ? "account-enable" as const : "account-disable" as const
            return { value: { account: accountView(row), outcome }, audit: { tenant, action, subject: account, outcome } }
          }))
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
    const issued = <V extends { readonly id: string }>(
      token: string,
      view: Option.Option<V>
    ) =>
      Option.match(view, {
        onNone: () => Effect.fail(new IdentityNotFound({ entity: "account" })),
        onSome: (credential) => Effect.succeed({ ...credential, token: Redacted.make(token) })
      })

    const issueApiKeyAs = Effect.fn("Identity.issueApiKey")(function* (input: IssueApiKey, by?: ProvisioningActor) {
      const generated = Token.generate(input.kind)
      const expiresAt = yield* expiryFrom(input.expiresIn)
      return yield* audited("issueApiKey", by, (at) =>
        Effect.gen(function* () {
          const row = yield* repo.insertApiKey({
            lookupId: generated.lookupId,
            tenant: input.tenant,
            account: input.account,
            kind: input.kind,
            name: input.name,
            permissions: input.permissions,
            secretHash: generated.secretHash,
            expiresAt,
            at
          })
          const value = yield* issued(generated.token, Option.map(row, (r) => apiKeyView(r, at.getTime())))
          return { value, audit: { tenant: input.tenant, action: "api-key-issue", subject: value.id, outcome: "applied" } as const }
        }))
    })

    const issueDeviceCredentialAs = Effect.fn("Identity.issueDeviceCredential")(
      function* (input: IssueDeviceCredential, by?: ProvisioningActor) {
        const generated = Token.generate("device")
        const expiresAt = yield* expiryFrom(input.expiresIn)
        return yield* audited("issueDeviceCredential", by, (at) =>
          Effect.gen(function* () {
            const row = yield* repo.insertDeviceCredential({
              lookupId: generated.lookupId,
              tenant: input.tenant,
              account: input.account,
              device: input.device,
              secretHash: generated.secretHash,
              expiresAt,
              at
            })
            const value = yield* issued(generated.token, Option.map(row, (r) => deviceCredentialView(r, at.getTime())))
            return {
              value,
              audit: { tenant: input.tenant, action: "device-credential-issue", subject: value.id, outcome: "applied" } as const
            }
          }))
      }
    )

    const asIssued = <Id extends string>(credential: { readonly id: string; readonly token: Redacted.Redacted<string>; readonly expiresAt: Date | null }): IssuedCredential<Id> => ({
      id: credential.id as Id,
      token: credential.token,
      expiresAt: credential.expiresAt
    })
    const issueApiKey = (input: IssueApiKey, by?: ProvisioningActor) =>
      Effect.map(issueApiKeyAs(input, by), asIssued<ApiKeyId>)
    const issueDeviceCredential = (input: IssueDeviceCredential, by?: ProvisioningActor) =>
      Effect.map(issueDeviceCredentialAs(input, by), asIssued<DeviceCredentialId>)

    const revoked = <Row extends { readonly revoked_at: Date | null }, V>(
      operation: string,
      entity: "api-key" | "device-credential",
      lock: Effect.Effect<Option.Option<Row>, IdentityStorageUnavailable>,
      revoke: (at: Date) => Effect.Effect<Row, IdentityStorageUnavailable>,
      view: (row: Row, now: number) => V,
      audit: { readonly tenant: TenantId; readonly subject: string },
      by: ProvisioningActor | undefined
    ) =>
      audited(operation, by, (at) =>
        Effect.gen(function* () {
          const current = yield* lock
          if (Option.isNone(current)) return yield* new IdentityNotFound({ entity })
          const outcome = current.value.revoked_at === null ? "applied" as const : "unchanged" as const
          const row = outcome === "applied" ? yield* revoke(at) : current.value
          const action = entity === "api-key" ? "api-key-revoke" as const : "device-credential-revoke" as const
          return { value: { credential: view(row, at.getTime()), outcome }, audit: { ...audit, action, outcome } }
        }))

    const revokeApiKey = Effect.fn("Identity.revokeApiKey")(function* (tenant: TenantId, id: ApiKeyId, by?: ProvisioningActor) {
      return yield* revoked(
        "revokeApiKey",
        "api-key",
        repo.lockApiKey(tenant, id),
        (at) => repo.revokeApiKey(tenant, id, at),
        apiKeyView,
        { tenant, subject: id },
        by
      )
    })

    const revokeDeviceCredential = Effect.fn("Identity.revokeDeviceCredential")(
      function* (tenant: TenantId, id: DeviceCredentialId, by?: ProvisioningActor) {
        return yield* revoked(
          "revokeDeviceCredential",
          "device-credential",
          repo.lockDeviceCredential(tenant, id),
          (at) => repo.revokeDeviceCredential(tenant, id, at),
          deviceCredentialView,
          { tenant, subject: id },
          by
        )
      }
    )

    // Reads for operators. A tenant-scoped list of an unknown tenant is "not found", not an empty page,
    // so a mistyped tenant id is told apart from a tenant without accounts.
    const page = (p: Page) => ({ after: p.after ?? null, limit: p.limit + 1 })
    const paged = <V>(p: Page, rows: ReadonlyArray<V>, key: (v: V) => string) => {
      const items = rows.slice(0, p.limit)
      return { items, next: rows.length > p.limit ? key(items[items.length - 1]!) : null }
    }
    const knownTenant = (tenant: TenantId) =>
      Effect.flatMap(repo.tenantExists(tenant), (exists) => exists ? Effect.void : Effect.fail(new IdentityNotFound({ entity: "tenant" })))

    const listTenants = (p: Page) =>
      Effect.map(repo.listTenants(page(p)), (rows) => paged(p, rows.map(tenantView), (t) => t.id))

    const listAccounts = (tenant: TenantId, p: Page) =>
      Effect.zipRight(
        knownTenant(tenant),
        Effect.map(repo.listAccounts(tenant, page(p)), (rows) => paged(p, rows.map(accountView), (a) => a.id))
      )

    const listApiKeys = (tenant: TenantId, account: AccountId | null, p: Page) =>
      Effect.gen(function* () {
        yield* knownTenant(tenant)
        const [rows, at] = yield* Effect.all([repo.listApiKeys(tenant, account, page(p)), Clock.currentTimeMillis])
        return paged(p, rows.map((r) => apiKeyView(r, at)), (k) => k.id)
      })

    const listDeviceCredentials = (tenant: TenantId, account: AccountId | null, p: Page) =>
      Effect.gen(function* () {
        yield* knownTenant(tenant)
        const [rows, at] = yield* Effect.all([repo.listDeviceCredentials(tenant, account, page(p)), Clock.currentTimeMillis])
        return paged(p, rows.map((r) => deviceCredentialView(r, at)), (d) => d.id)
      })

    /**
     * Password sign-in: the account's password, then a session credential that expires after
     * IDENTITY_SESSION_TTL. The token exists in the answer only. Wrong password and unknown address are
     * the same refusal in similar time (`verifyPassword`); only the password's owner learns "disabled".
     */
    const signIn = Effect.fn("Identity.signIn")(function* (input: {
      readonly tenant: TenantId
      readonly email: Email
      readonly password: Redacted.Redacted<string>
    }) {
      const verified = yield* verifyPassword(input)
      const generated = Token.generate("session")
      const at = new Date(yield* Clock.currentTimeMillis)
      const expiresAt = new Date(at.getTime() + Duration.toMillis(sessionTtl))
      yield* repo.insertSession({
        lookupId: generated.lookupId,
        tenant: verified.tenant,
        account: verified.account,
        secretHash: generated.secretHash,
        expiresAt,
        at
      })
      return { ...verified, token: Redacted.make(generated.token), expiresAt }
    })

    // The secret is checked before anything else about the row, so a caller who only
    // knows a lookup id learns nothing about the credential's state.
    const admit = (row: ApiKeyRow | DeviceCredentialRow | SessionRow, secret: string) =>
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
      } else if (kind === "session") {
        const row = yield* repo.findSession(lookupId)
        if (Option.isNone(row)) return yield* refuse("unknown")
        yield* admit(row.value, secret)
        identity = { _tag: "Session", tenant: row.value.tenant_id, account: row.value.account_id }
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
      createAccountAs,
      setAccountEnabled,
      verifyPassword,
      signIn,
      issueApiKey,
      issueApiKeyAs,
      issueDeviceCredential,
      issueDeviceCredentialAs,
      revokeApiKey,
      revokeDeviceCredential,
      tenantExists: (tenant: TenantId) => repo.tenantExists(tenant),
      listTenants,
      listAccounts,
      listApiKeys,
      listDeviceCredentials,
      authenticate
    } as const
  }),
  dependencies: [IdentityRepo.Default]
}) {}
