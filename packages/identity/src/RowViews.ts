import type { AccountId, ApiKeyId, ApiKeyName, DeviceCredentialId, DeviceId, Email, Permission, TenantId } from "./Domain.ts"
import type { AccountViewRow, ApiKeyViewRow, DeviceCredentialViewRow, TenantRow } from "./IdentityRows.ts"
import { type AccountView, type ApiKeyView, credentialState, type DeviceCredentialView, type TenantView } from "./Views.ts"

// Rows are constrained like the views' schemas (CHECKs in migration 0001), so they are branded as they are.
export const tenantView = (row: TenantRow): TenantView => ({ id: row.id as TenantId, createdAt: row.created_at })

export const accountView = (row: AccountViewRow): AccountView => ({
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

export const apiKeyView = (row: ApiKeyViewRow, now: number): ApiKeyView => ({
  tenant: row.tenant_id as TenantId,
  id: row.lookup_id as ApiKeyId,
  account: row.account_id as AccountId,
  kind: row.kind,
  name: row.name as ApiKeyName,
  permissions: row.permissions as ReadonlyArray<Permission>,
  ...credentialTimes(row, now)
})

export const deviceCredentialView = (row: DeviceCredentialViewRow, now: number): DeviceCredentialView => ({
  tenant: row.tenant_id as TenantId,
  id: row.lookup_id as DeviceCredentialId,
  account: row.account_id as AccountId,
  device: row.device_id as DeviceId,
  ...credentialTimes(row, now)
})
