import { Schema } from "effect"
import { AccountId, ApiKeyId, ApiKeyKind, ApiKeyName, DeviceCredentialId, DeviceId, Email, Permissions, TenantId } from "./Domain.ts"

// What an operator sees of tenants, accounts and credentials: ids, states and times. Never a secret
// hash, a password hash or a token (the token exists once, in the answer that issues it).

/** Who made a change and under which request: the audit row's actor and correlation id. */
export interface ProvisioningActor {
  /** Names the credential kind, never the credential: `operator:environment`, `system:identity`. */
  readonly actor: string
  readonly correlationId: string
}

/** `applied`: the change was made; `unchanged`: an idempotent repeat (its audit row says so too). */
export const ChangeOutcome = Schema.Literal("applied", "unchanged")
export type ChangeOutcome = typeof ChangeOutcome.Type

export const TenantView = Schema.Struct({ id: TenantId, createdAt: Schema.Date }).annotations({ identifier: "Tenant" })
export type TenantView = typeof TenantView.Type

export const AccountView = Schema.Struct({
  tenant: TenantId,
  id: AccountId,
  email: Email,
  enabled: Schema.Boolean,
  /** Whether the account can sign in with a password; the hash itself never leaves the database. */
  hasPassword: Schema.Boolean,
  createdAt: Schema.Date
}).annotations({ identifier: "Account" })
export type AccountView = typeof AccountView.Type

/** `expired` and `revoked` credentials are refused (401); revoked wins when both apply. */
export const CredentialState = Schema.Literal("active", "expired", "revoked")
export type CredentialState = typeof CredentialState.Type

const credentialTimes = {
  state: CredentialState,
  expiresAt: Schema.NullOr(Schema.Date),
  revokedAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date
}

export const ApiKeyView = Schema.Struct({
  tenant: TenantId,
  /** The lookup id printed in the token (`<kind>_<id>_<secret>`): public, never sufficient on its own. */
  id: ApiKeyId,
  account: AccountId,
  kind: ApiKeyKind,
  name: ApiKeyName,
  permissions: Permissions,
  ...credentialTimes
}).annotations({ identifier: "ApiKey" })
export type ApiKeyView = typeof ApiKeyView.Type

export const DeviceCredentialView = Schema.Struct({
  tenant: TenantId,
  id: DeviceCredentialId,
  account: AccountId,
  device: DeviceId,
  ...credentialTimes
}).annotations({ identifier: "DeviceCredential" })
export type DeviceCredentialView = typeof DeviceCredentialView.Type

export const credentialState = (row: { readonly expiresAt: Date | null; readonly revokedAt: Date | null }, now: number): CredentialState =>
  row.revokedAt !== null ? "revoked" : row.expiresAt !== null && row.expiresAt.getTime() <= now ? "expired" : "active"
