import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import {
  AccountId,
  ApiKeyId,
  ApiKeyKind,
  ApiKeyName,
  DeviceCredentialId,
  DeviceId,
  Email,
  IdentityStorageUnavailable,
  IdPattern,
  Permission,
  Permissions,
  TenantId
} from "./Domain.ts"
import { passwordMaxLength, passwordMinLength } from "./Identity.ts"
import { OperatorAuthentication } from "./OperatorAuthentication.ts"
import { AccountView, ApiKeyView, DeviceCredentialView, TenantView } from "./Views.ts"

// Refusals of the provisioning routes: a stable `reason` and the request's `correlationId` (also the
// `x-correlation-id` header). None quotes an e-mail address, a password or a token.

export class ProvisioningNotFound extends Schema.TaggedError<ProvisioningNotFound>()("ProvisioningNotFound", {
  reason: Schema.Literal("tenant-not-found", "account-not-found", "api-key-not-found", "device-credential-not-found"),
  correlationId: Schema.String
}) {}

export class ProvisioningConflict extends Schema.TaggedError<ProvisioningConflict>()("ProvisioningConflict", {
  reason: Schema.Literal("tenant-exists", "account-email-taken"),
  correlationId: Schema.String
}) {}

export class PasswordRefused extends Schema.TaggedError<PasswordRefused>()("PasswordRefused", {
  reason: Schema.Literal("password-too-short", "password-too-long"),
  minLength: Schema.Number,
  maxLength: Schema.Number,
  correlationId: Schema.String
}) {}

const closed = { parseOptions: { onExcessProperty: "error" } } as const

/** Ten years: long enough for any planned expiry, short enough that the sum stays a valid date. */
export const maxExpiresInSeconds = 315_360_000

const ExpiresInSeconds = Schema.Int.pipe(Schema.between(1, maxExpiresInSeconds)).annotations({
  description: "seconds from now until the credential expires; absent: it lives until revoked"
})

export const CreateTenant = Schema.Struct({ id: TenantId }).annotations({
  ...closed,
  identifier: "CreateTenant",
  examples: [{ id: TenantId.make("acme") }]
})

export const CreateAccount = Schema.Struct({
  email: Email,
  /** Never logged, stored only as an argon2id hash; absent: the account signs in with keys only. */
  password: Schema.optional(Schema.Redacted(Schema.String).annotations({
    description: `${passwordMinLength} to ${passwordMaxLength} characters; stored only as an argon2id hash`
  }))
}).annotations({
  ...closed,
  identifier: "CreateAccount",
  // Without a password: an example never shows one.
  examples: [{ email: "ops@acme.example" as Email }]
})

export const IssueApiKeyRequest = Schema.Struct({
  account: AccountId,
  kind: ApiKeyKind,
  name: ApiKeyName,
  permissions: Schema.optionalWith(Permissions, { default: () => [] }),
  expiresInSeconds: Schema.optional(ExpiresInSeconds)
}).annotations({
  ...closed,
  identifier: "IssueApiKey",
  examples: [{
    account: AccountId.make("3f9a0c5e71d2b8e4a6c1"),
    kind: "agent",
    name: ApiKeyName.make("scheduler"),
    permissions: [Permission.make("outbox:enqueue")],
    expiresInSeconds: 7_776_000
  }]
})

export const IssueDeviceCredentialRequest = Schema.Struct({
  account: AccountId,
  device: DeviceId,
  expiresInSeconds: Schema.optional(ExpiresInSeconds)
}).annotations({
  ...closed,
  identifier: "IssueDeviceCredential",
  examples: [{ account: AccountId.make("3f9a0c5e71d2b8e4a6c1"), device: DeviceId.make("laptop-1") }]
})

const Token = Schema.Redacted(Schema.String).annotations({
  description: "the bearer token: returned in this answer only, stored only as a hash, never readable again"
})

const changed = <F extends Schema.Struct.Fields>(identifier: string, fields: F) =>
  Schema.Struct({ ...fields, correlationId: Schema.String }).annotations({ identifier })

export const TenantCreated = changed("TenantCreated", { tenant: TenantView })
export const AccountCreated = changed("AccountCreated", { account: AccountView })
export const AccountChanged = changed("AccountChanged", {
  account: AccountView,
  outcome: Schema.Literal("disabled", "enabled", "unchanged")
})
export const ApiKeyIssued = changed("ApiKeyIssued", { apiKey: ApiKeyView, token: Token })
export const DeviceCredentialIssued = changed("DeviceCredentialIssued", { deviceCredential: DeviceCredentialView, token: Token })
export const ApiKeyRevoked = changed("ApiKeyRevoked", { apiKey: ApiKeyView, outcome: Schema.Literal("revoked", "unchanged") })
export const DeviceCredentialRevoked = changed("DeviceCredentialRevoked", {
  deviceCredential: DeviceCredentialView,
  outcome: Schema.Literal("revoked", "unchanged")
})

const pageOf = <A, I>(identifier: string, item: Schema.Schema<A, I>) =>
  Schema.Struct({
    items: Schema.Array(item),
    /** Pass as `after` for the next page; null on the last page. */
    next: Schema.NullOr(Schema.String)
  }).annotations({ identifier })

export const TenantPage = pageOf("TenantPage", TenantView)
export const AccountPage = pageOf("AccountPage", AccountView)
export const ApiKeyPage = pageOf("ApiKeyPage", ApiKeyView)
export const DeviceCredentialPage = pageOf("DeviceCredentialPage", DeviceCredentialView)

/** `limit` 1..100 (default 100); `after`: the `next` of the previous page. */
export const PageParams = Schema.Struct({
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100))),
  after: Schema.optional(Schema.String.pipe(Schema.pattern(IdPattern)))
})
const CredentialPageParams = Schema.Struct({ ...PageParams.fields, account: Schema.optional(AccountId) })

const TenantPath = Schema.Struct({ tenant: TenantId })
const AccountPath = Schema.Struct({ tenant: TenantId, account: AccountId })
const ApiKeyPath = Schema.Struct({ tenant: TenantId, id: ApiKeyId })
const DevicePath = Schema.Struct({ tenant: TenantId, id: DeviceCredentialId })

const tenants = "/operator/tenants"
const accounts = `${tenants}/:tenant/accounts`
const apiKeys = `${tenants}/:tenant/api-keys`
const devices = `${tenants}/:tenant/device-credentials`

const audited = "Audited: the change and its `identity_audit` row commit in one transaction."

/**
 * Provisioning: tenants, accounts, API keys and device credentials. Behind `OperatorAuthentication`
 * (401, 403 when operator routes are disabled, 429, 503). A tenant-scoped route of an unknown tenant is
 * 404 `tenant-not-found`; another tenant's account, key or credential is 404 as if it did not exist.
 */
export class ProvisioningApi extends HttpApiGroup.make("provisioning")
  .add(
    HttpApiEndpoint.post("createTenant", tenants)
      .setPayload(CreateTenant)
      .addSuccess(TenantCreated, { status: 201 })
      .addError(ProvisioningConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Create a tenant")
      .annotate(OpenApi.Description, `409 \`tenant-exists\` when the id is taken. ${audited}`)
  )
  .add(
    HttpApiEndpoint.get("listTenants", tenants)
      .setUrlParams(PageParams)
      .addSuccess(TenantPage)
      .annotate(OpenApi.Summary, "Tenants, by id, at most 100 per page")
  )
  .add(
    HttpApiEndpoint.post("createAccount", accounts)
      .setPath(TenantPath)
      .addError(ProvisioningNotFound, { status: 404 })
      .setPayload(CreateAccount)
      .addSuccess(AccountCreated, { status: 201 })
      .addError(ProvisioningConflict, { status: 409 })
      .addError(PasswordRefused, { status: 422 })
      .annotate(OpenApi.Summary, "Create an account (e-mail, optional password)")
      .annotate(
        OpenApi.Description,
        `E-mail addresses are unique per tenant, case-insensitively: 409 \`account-email-taken\`. A password has ${passwordMinLength} to ${passwordMaxLength} characters (422 \`password-too-short\` / \`password-too-long\`). ${audited}`
      )
  )
  .add(
    HttpApiEndpoint.get("listAccounts", accounts)
      .setPath(TenantPath)
      .addError(ProvisioningNotFound, { status: 404 })
      .setUrlParams(PageParams)
      .addSuccess(AccountPage)
      .annotate(OpenApi.Summary, "The tenant's accounts, by id (never a password hash)")
  )
  .add(
    HttpApiEndpoint.post("disableAccount", `${accounts}/:account/disable`)
      .setPath(AccountPath)
      .addError(ProvisioningNotFound, { status: 404 })
      .addSuccess(AccountChanged)
      .annotate(OpenApi.Summary, "Disable an account: its keys and credentials are refused (401 `disabled`) from the next request")
      .annotate(OpenApi.Description, `Disabling a disabled account is \`unchanged\`. ${audited}`)
  )
  .add(
    HttpApiEndpoint.post("enableAccount", `${accounts}/:account/enable`)
      .setPath(AccountPath)
      .addError(ProvisioningNotFound, { status: 404 })
      .addSuccess(AccountChanged)
      .annotate(OpenApi.Summary, "Enable an account again")
      .annotate(OpenApi.Description, `Enabling an enabled account is \`unchanged\`. ${audited}`)
  )
  .add(
    HttpApiEndpoint.post("issueApiKey", apiKeys)
      .setPath(TenantPath)
      .addError(ProvisioningNotFound, { status: 404 })
      .setPayload(IssueApiKeyRequest)
      .addSuccess(ApiKeyIssued, { status: 201 })
      .annotate(OpenApi.Summary, "Issue a board or agent API key for an account; the token is in this answer only")
      .annotate(OpenApi.Description, `404 \`account-not-found\` when the account is not the tenant's. ${audited}`)
  )
  .add(
    HttpApiEndpoint.get("listApiKeys", apiKeys)
      .setPath(TenantPath)
      .addError(ProvisioningNotFound, { status: 404 })
      .setUrlParams(CredentialPageParams)
      .addSuccess(ApiKeyPage)
      .annotate(OpenApi.Summary, "The tenant's API keys (optionally one account's), by id: states and times, never a token")
  )
  .add(
    HttpApiEndpoint.post("revokeApiKey", `${apiKeys}/:id/revoke`)
      .setPath(ApiKeyPath)
      .addError(ProvisioningNotFound, { status: 404 })
      .addSuccess(ApiKeyRevoked)
      .annotate(OpenApi.Summary, "Revoke an API key: refused (401 `revoked`) from the next request")
      .annotate(OpenApi.Description, `Revoking a revoked key is \`unchanged\` and keeps the first revocation time. ${audited}`)
  )
  .add(
    HttpApiEndpoint.post("issueDeviceCredential", devices)
      .setPath(TenantPath)
      .addError(ProvisioningNotFound, { status: 404 })
      .setPayload(IssueDeviceCredentialRequest)
      .addSuccess(DeviceCredentialIssued, { status: 201 })
      .annotate(OpenApi.Summary, "Issue a device credential (a producer's bearer for the inbox); the token is in this answer only")
      .annotate(OpenApi.Description, `404 \`account-not-found\` when the account is not the tenant's. ${audited}`)
  )
  .add(
    HttpApiEndpoint.get("listDeviceCredentials", devices)
      .setPath(TenantPath)
      .addError(ProvisioningNotFound, { status: 404 })
      .setUrlParams(CredentialPageParams)
      .addSuccess(DeviceCredentialPage)
      .annotate(OpenApi.Summary, "The tenant's device credentials (optionally one account's), by id")
  )
  .add(
    HttpApiEndpoint.post("revokeDeviceCredential", `${devices}/:id/revoke`)
      .setPath(DevicePath)
      .addError(ProvisioningNotFound, { status: 404 })
      .addSuccess(DeviceCredentialRevoked)
      .annotate(OpenApi.Summary, "Revoke a device credential: refused (401 `revoked`) from the next request")
      .annotate(OpenApi.Description, `Revoking a revoked credential is \`unchanged\`. ${audited}`)
  )
  .addError(IdentityStorageUnavailable, { status: 503 })
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Provisioning (operator)")
{}
