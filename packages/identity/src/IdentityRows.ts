import { Schema } from "effect"

// The row shapes of the identity tables as the repository reads them (snake_case: every statement runs
// `.withoutTransform`), and what it writes. Private to the package.

const CredentialColumns = {
  lookup_id: Schema.String,
  tenant_id: Schema.String,
  account_id: Schema.String,
  secret_hash: Schema.Uint8ArrayFromSelf,
  expires_at: Schema.NullOr(Schema.DateFromSelf),
  revoked_at: Schema.NullOr(Schema.DateFromSelf),
  account_enabled: Schema.Boolean
}

export const ApiKeyRow = Schema.Struct({
  ...CredentialColumns,
  kind: Schema.Literal("board", "agent"),
  permissions: Schema.Array(Schema.String)
})
export type ApiKeyRow = typeof ApiKeyRow.Type

/** An active API key as idle wake's projection reads it: kind and lookup id unchecked here (the projection checks them). */
export const ApiKeyMaterialRow = Schema.Struct({
  kind: Schema.String,
  lookup_id: Schema.String,
  secret_hash: Schema.Uint8ArrayFromSelf,
  expires_at: Schema.NullOr(Schema.DateFromSelf)
})
export type ApiKeyMaterialRow = typeof ApiKeyMaterialRow.Type

export const DeviceCredentialRow = Schema.Struct({ ...CredentialColumns, device_id: Schema.String })
export type DeviceCredentialRow = typeof DeviceCredentialRow.Type

export const SessionRow = Schema.Struct(CredentialColumns)
export type SessionRow = typeof SessionRow.Type

export const AccountRow = Schema.Struct({
  id: Schema.String,
  enabled: Schema.Boolean,
  password_hash: Schema.NullOr(Schema.String)
})
export type AccountRow = typeof AccountRow.Type

export const TenantRow = Schema.Struct({ id: Schema.String, created_at: Schema.DateFromSelf })
export type TenantRow = typeof TenantRow.Type

export const AccountViewRow = Schema.Struct({
  tenant_id: Schema.String,
  id: Schema.String,
  email: Schema.String,
  enabled: Schema.Boolean,
  has_password: Schema.Boolean,
  created_at: Schema.DateFromSelf
})
export type AccountViewRow = typeof AccountViewRow.Type

const credentialViewColumns = {
  lookup_id: Schema.String,
  tenant_id: Schema.String,
  account_id: Schema.String,
  expires_at: Schema.NullOr(Schema.DateFromSelf),
  revoked_at: Schema.NullOr(Schema.DateFromSelf),
  created_at: Schema.DateFromSelf
}

export const ApiKeyViewRow = Schema.Struct({
  ...credentialViewColumns,
  kind: Schema.Literal("board", "agent"),
  name: Schema.String,
  permissions: Schema.Array(Schema.String)
})
export type ApiKeyViewRow = typeof ApiKeyViewRow.Type

export const DeviceCredentialViewRow = Schema.Struct({ ...credentialViewColumns, device_id: Schema.String })
export type DeviceCredentialViewRow = typeof DeviceCredentialViewRow.Type

/** One `identity_audit` row (migrations/0010_identity_audit.sql): ids and codes only. */
export interface AuditEntry {
  readonly tenant: string
  readonly action:
    | "tenant-create"
    | "account-create"
    | "account-disable"
    | "account-enable"
    | "api-key-issue"
    | "api-key-revoke"
    | "device-credential-issue"
    | "device-credential-revoke"
    | "password-reset"
  readonly subject: string
  readonly outcome: "applied" | "unchanged"
  readonly actor: string
  readonly correlationId: string
  readonly at: Date
}

/** Keyset paging by id: `after` is the last id of the previous page. */
export interface PageRequest {
  readonly after: string | null
  readonly limit: number
}

export interface NewAccount {
  readonly tenant: string
  readonly id: string
  readonly email: string
  readonly passwordHash: string | null
}

export interface NewCredential {
  readonly lookupId: string
  readonly tenant: string
  readonly account: string
  readonly secretHash: Uint8Array
  readonly expiresAt: Date | null
  readonly at: Date
}

export interface NewApiKey extends NewCredential {
  readonly kind: string
  readonly name: string
  readonly permissions: ReadonlyArray<string>
}

export interface NewDeviceCredential extends NewCredential {
  readonly device: string
}
