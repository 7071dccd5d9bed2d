import { type Redacted, Schema } from "effect"

/**
 * Identifiers are bounded in length and character set so that they are safe in
 * rate-limit keys, logs, URLs and token lookups alike:
 * one lower-case letter or digit, then up to 63 of `a-z 0-9 _ -` (1..64 characters).
 * The same pattern is a CHECK constraint in `migrations/0001_identity_accounts.sql`.
 */
export const IdPattern = /^[a-z0-9][a-z0-9_-]{0,63}$/

/** A branded id with `IdPattern`: every package bounds its identities the same way. */
export const boundedId = <B extends string>(brand: B) =>
  Schema.String.pipe(
    Schema.pattern(IdPattern, { message: () => `${brand} must match ${IdPattern.source}` }),
    Schema.brand(brand)
  )

export const TenantId = boundedId("TenantId")
export type TenantId = typeof TenantId.Type

export const AccountId = boundedId("AccountId")
export type AccountId = typeof AccountId.Type

export const DeviceId = boundedId("DeviceId")
export type DeviceId = typeof DeviceId.Type

/** An API key's id is the lookup id printed in its token: public, never sufficient on its own. */
export const ApiKeyId = boundedId("ApiKeyId")
export type ApiKeyId = typeof ApiKeyId.Type

/** A device credential's id is likewise the lookup id printed in its token. */
export const DeviceCredentialId = boundedId("DeviceCredentialId")
export type DeviceCredentialId = typeof DeviceCredentialId.Type

/** Stored lower-cased and trimmed, so uniqueness per tenant is case-insensitive. */
export const Email = Schema.String.pipe(
  Schema.compose(Schema.Trim),
  Schema.compose(Schema.Lowercase),
  Schema.maxLength(254),
  Schema.pattern(/^[^\s@]+@[^\s@]+$/, { message: () => "Email must look like local@domain" }),
  Schema.brand("Email")
)
export type Email = typeof Email.Type

/** A permission such as `receipts:write`: bounded so a key's permission list stays small and printable. */
export const Permission = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9:._-]{0,63}$/),
  Schema.brand("Permission")
)
export type Permission = typeof Permission.Type

export const Permissions = Schema.Array(Permission).pipe(Schema.maxItems(64))

export const ApiKeyKind = Schema.Literal("board", "agent")
export type ApiKeyKind = typeof ApiKeyKind.Type

export const ApiKeyName = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100), Schema.brand("ApiKeyName"))
export type ApiKeyName = typeof ApiKeyName.Type

// A closed identity: unknown members are refused wherever this schema decodes
// (spec 000 step 1 authenticates "into a closed VerifiedIdentity").
const closed = { parseOptions: { onExcessProperty: "error" } } as const

export const DeviceIdentity = Schema.TaggedStruct("Device", {
  tenant: TenantId,
  account: AccountId,
  device: DeviceId
}).annotations({ ...closed, identifier: "DeviceIdentity" })
export type DeviceIdentity = typeof DeviceIdentity.Type

export const ApiKeyIdentity = Schema.TaggedStruct("ApiKey", {
  tenant: TenantId,
  account: AccountId,
  keyId: ApiKeyId,
  kind: ApiKeyKind,
  permissions: Permissions
}).annotations({ ...closed, identifier: "ApiKeyIdentity" })
export type ApiKeyIdentity = typeof ApiKeyIdentity.Type

/** A password sign-in's short-lived session: the account, without permissions. */
export const SessionIdentity = Schema.TaggedStruct("Session", {
  tenant: TenantId,
  account: AccountId
}).annotations({ ...closed, identifier: "SessionIdentity" })
export type SessionIdentity = typeof SessionIdentity.Type

export const VerifiedIdentity = Schema.Union(DeviceIdentity, ApiKeyIdentity, SessionIdentity).annotations({
  ...closed,
  identifier: "VerifiedIdentity"
})
export type VerifiedIdentity = typeof VerifiedIdentity.Type

export const decodeVerifiedIdentity = Schema.decodeUnknown(VerifiedIdentity, { onExcessProperty: "error" })

// Errors carry stable codes and ids only: never a token, secret, password or hash.

export const UnauthenticatedReason = Schema.Literal("missing", "malformed", "unknown", "expired", "revoked", "disabled")
export type UnauthenticatedReason = typeof UnauthenticatedReason.Type

export class Unauthenticated extends Schema.TaggedError<Unauthenticated>()("Unauthenticated", {
  reason: UnauthenticatedReason
}) {}

/** The peer-keyed identity limit refused the attempt; `retryAfter` is in milliseconds. */
export class IdentityRateLimited extends Schema.TaggedError<IdentityRateLimited>()("IdentityRateLimited", {
  retryAfter: Schema.Number
}) {}

/** The identity tables could not be reached; an outcome to retry, not a defect. */
export class IdentityStorageUnavailable extends Schema.TaggedError<IdentityStorageUnavailable>()(
  "IdentityStorageUnavailable",
  { operation: Schema.String }
) {}

export class IdentityNotFound extends Schema.TaggedError<IdentityNotFound>()("IdentityNotFound", {
  entity: Schema.Literal("tenant", "account", "api-key", "device-credential")
}) {}

export class IdentityConflict extends Schema.TaggedError<IdentityConflict>()("IdentityConflict", {
  entity: Schema.Literal("tenant", "account-email")
}) {}

/** Bounds keep argon2id work per request predictable (a megabyte password is a denial of service). */
export class PasswordRejected extends Schema.TaggedError<PasswordRejected>()("PasswordRejected", {
  reason: Schema.Literal("too-short", "too-long")
}) {}

export class PermissionDenied extends Schema.TaggedError<PermissionDenied>()("PermissionDenied", {
  permission: Permission
}) {}

/** What `issueApiKey` / `issueDeviceCredential` return: the only time the token exists in plaintext. */
export interface IssuedCredential<Id> {
  readonly id: Id
  readonly token: Redacted.Redacted<string>
  readonly expiresAt: Date | null
}
