import { makeCorrelationId } from "@delivery/core"
import { Clock, Duration, Effect, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import {
  type AccountId,
  type ApiKeyId,
  type ApiKeyKind,
  type ApiKeyName,
  type DeviceCredentialId,
  type DeviceId,
  type Email,
  IdentityConflict,
  IdentityNotFound,
  type IdentityStorageUnavailable,
  type IssuedCredential,
  type Permission,
  type TenantId
} from "./Domain.ts"
import type { IdentityRepo } from "./IdentityRepo.ts"
import type { AuditEntry } from "./IdentityRows.ts"
import { checkPassword, hashPassword } from "./Password.ts"
import { accountView, apiKeyView, deviceCredentialView, tenantView } from "./RowViews.ts"
import * as Token from "./Token.ts"
import type { ProvisioningActor } from "./Views.ts"

// Tenants, accounts and credentials as operators (and code) make them: every change commits with its
// `identity_audit` row, and reads page by id. Spread into the `Identity` service.

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

/** Keyset paging by id: `after` is the last id of the previous page; `limit` is 1..100. */
export interface Page {
  readonly after?: string | undefined
  readonly limit: number
}

// Random, lower-case hex: fits the AccountId pattern and says nothing about the account.
const newAccountId = () => randomBytes(10).toString("hex") as AccountId

export const makeProvisioning = (repo: IdentityRepo) => {
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

  // The plaintext token leaves exactly once, here; a missing account (foreign key) inserted nothing.
  const issued = <V extends { readonly id: string }>(
    token: string,
    view: Option.Option<V>
  ) =>
    Option.match(view, {
      onNone: () => Effect.fail(new IdentityNotFound({ entity: "account" })),
      onSome: (credential) => Effect.succeed({ ...credential, token: Redacted.make(token) })
    })

  /** Issues a credential: its row and audit row in one transaction, its token in the answer only. */
  const issue = <V extends { readonly id: string }>(
    operation: string,
    action: "api-key-issue" | "device-credential-issue",
    input: { readonly tenant: TenantId; readonly expiresIn?: Duration.DurationInput | undefined },
    kind: Token.TokenKind,
    insert: (generated: Token.GeneratedToken, expiresAt: Date | null, at: Date) => Effect.Effect<Option.Option<V>, IdentityStorageUnavailable>,
    by: ProvisioningActor | undefined
  ) =>
    Effect.gen(function* () {
      const generated = Token.generate(kind)
      const expiresAt = yield* expiryFrom(input.expiresIn)
      return yield* audited(operation, by, (at) =>
        Effect.gen(function* () {
          const value = yield* issued(generated.token, yield* insert(generated, expiresAt, at))
          return { value, audit: { tenant: input.tenant, action, subject: value.id, outcome: "applied" } as const }
        }))
    })

  const issueApiKeyAs = Effect.fn("Identity.issueApiKey")(function* (input: IssueApiKey, by?: ProvisioningActor) {
    return yield* issue("issueApiKey", "api-key-issue", input, input.kind, (generated, expiresAt, at) =>
      Effect.map(
        repo.insertApiKey({
          lookupId: generated.lookupId,
          tenant: input.tenant,
          account: input.account,
          kind: input.kind,
          name: input.name,
          permissions: input.permissions,
          secretHash: generated.secretHash,
          expiresAt,
          at
        }),
        Option.map((row) => apiKeyView(row, at.getTime()))
      ), by)
  })

  const issueDeviceCredentialAs = Effect.fn("Identity.issueDeviceCredential")(
    function* (input: IssueDeviceCredential, by?: ProvisioningActor) {
      return yield* issue("issueDeviceCredential", "device-credential-issue", input, "device", (generated, expiresAt, at) =>
        Effect.map(
          repo.insertDeviceCredential({
            lookupId: generated.lookupId,
            tenant: input.tenant,
            account: input.account,
            device: input.device,
            secretHash: generated.secretHash,
            expiresAt,
            at
          }),
          Option.map((row) => deviceCredentialView(row, at.getTime()))
        ), by)
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

  return {
    createTenant,
    createAccount,
    createAccountAs,
    setAccountEnabled,
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
    listDeviceCredentials
  } as const
}
