import { boundedId, TenantId } from "@delivery/identity"
import { Schema } from "effect"

export { TenantId }

// Every identity on the envelope uses identity's id pattern (1..64 of a-z 0-9 _ -,
// first character a letter or digit), so it is safe in logs, rows, URLs and rate-limit keys.
export const ProjectId = boundedId("ProjectId")
export type ProjectId = typeof ProjectId.Type

export const ProducerId = boundedId("ProducerId")
export type ProducerId = typeof ProducerId.Type

/** A signing key's id, chosen by the operator; unique per tenant only. */
export const KeyId = boundedId("KeyId")
export type KeyId = typeof KeyId.Type

export const SubjectId = boundedId("SubjectId")
export type SubjectId = typeof SubjectId.Type

/** A raw Ed25519 public key (RFC 8032): exactly 32 bytes. */
export const RawPublicKey = Schema.Uint8ArrayFromSelf.pipe(
  Schema.filter((bytes) => bytes.length === 32, { message: () => "an Ed25519 public key is 32 bytes" }),
  Schema.brand("RawPublicKey")
)
export type RawPublicKey = typeof RawPublicKey.Type

export const KeyState = Schema.Literal("active", "retired", "revoked")
export type KeyState = typeof KeyState.Type

/** A registered verification key. Public material only: private keys live in the key source. */
export class SigningKey extends Schema.Class<SigningKey>("SigningKey")({
  tenant: TenantId,
  keyId: KeyId,
  publicKey: RawPublicKey,
  state: KeyState,
  createdAt: Schema.DateFromSelf,
  retiredAt: Schema.NullOr(Schema.DateFromSelf),
  revokedAt: Schema.NullOr(Schema.DateFromSelf),
  /** End (exclusive) of the retention+replay window of a retired or revoked key; null while active. */
  verifyUntil: Schema.NullOr(Schema.DateFromSelf)
}) {}

// Errors carry stable reasons and ids only: never a key, signature, payload or driver message.

/** Why a signature did not decode: one stable code per way base64url can be wrong. */
export const SignatureDefect = Schema.Literal(
  "signature-padding",
  "signature-alphabet",
  "signature-length",
  "signature-non-canonical"
)
export type SignatureDefect = typeof SignatureDefect.Type

export class SignatureMalformed extends Schema.TaggedError<SignatureMalformed>()("SignatureMalformed", {
  reason: Schema.Literal("signature-malformed"),
  defect: SignatureDefect
}) {}

/** Step 3 of spec 000, key half: the key id does not resolve to a usable key in the verified tenant. */
export class KeyRefused extends Schema.TaggedError<KeyRefused>()("KeyRefused", {
  reason: Schema.Literal("key-unknown", "key-revoked", "key-expired"),
  tenant: Schema.String,
  keyId: Schema.String
}) {}

/** Step 3 of spec 000, signature half. `defect` says how a malformed signature was malformed. */
export class SignatureRefused extends Schema.TaggedError<SignatureRefused>()("SignatureRefused", {
  reason: Schema.Literal("signature-invalid", "signature-malformed"),
  tenant: Schema.String,
  keyId: Schema.String,
  defect: Schema.optional(SignatureDefect)
}) {}

/** Everything `Signer.verify` can refuse with; each carries a stable `reason` for the audit row. */
export type VerificationRefused = KeyRefused | SignatureRefused

/**
 * The key id is taken by a different public key (or by a key no longer active), or the tenant
 * already has an active key and the caller should `rotate` instead of `registerKey`.
 */
export class KeyConflict extends Schema.TaggedError<KeyConflict>()("KeyConflict", {
  reason: Schema.Literal("key-conflict"),
  tenant: Schema.String,
  keyId: Schema.String,
  detail: Schema.Literal("public-key-differs", "key-not-active", "tenant-has-active-key")
}) {}

/** Step 4 of spec 000: the envelope parsed (1..99) but this service speaks only version 1. */
export class SchemaVersionUnsupported extends Schema.TaggedError<SchemaVersionUnsupported>()(
  "SchemaVersionUnsupported",
  { reason: Schema.Literal("schema-version-unsupported"), schemaVersion: Schema.Number }
) {}

/**
 * The key source cannot sign. `no-active-key`: the tenant has no active registered key;
 * `key-mismatch`: the source signed with a key other than the registered public key.
 * Never carries key text or a cause: a cause may quote the configuration it failed on.
 */
export class KeyUnavailable extends Schema.TaggedError<KeyUnavailable>()("KeyUnavailable", {
  reason: Schema.Literal("key-unavailable", "no-active-key", "key-mismatch"),
  tenant: Schema.String,
  keyId: Schema.optional(Schema.String)
}) {}

/** The key source's configuration is unusable; `entry` is the 0-based position, never the text. */
export class KeySourceInvalid extends Schema.TaggedError<KeySourceInvalid>()("KeySourceInvalid", {
  source: Schema.Literal("environment", "file"),
  reason: Schema.Literal(
    "not-json",
    "bad-shape",
    "bad-entry",
    "bad-tenant",
    "bad-key-id",
    "bad-private-key",
    "duplicate-key",
    "file-unreadable",
    "file-permissions",
    "file-inside-repository",
    "both-sources-set"
  ),
  entry: Schema.optional(Schema.Number)
}) {}

/** The key table could not be reached: an outcome to retry later, not a defect. */
export class SignerStorageUnavailable extends Schema.TaggedError<SignerStorageUnavailable>()(
  "SignerStorageUnavailable",
  { operation: Schema.String }
) {}

// Operator key management. Audit rows and these errors carry ids and stable codes only.

/** Who acted, by credential kind: `operator:environment`, `system:signer-purge`. Never the credential. */
export const AuditActor = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9-]{0,31}:[a-z0-9][a-z0-9_.-]{0,63}$/),
  Schema.brand("AuditActor")
)
export type AuditActor = typeof AuditActor.Type

/** Ties an audit row to the request (or sweep) that wrote it; a client may choose it, within this pattern. */
export const CorrelationId = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9._:-]{1,64}$/), Schema.brand("CorrelationId"))
export type CorrelationId = typeof CorrelationId.Type

/** Attribution for a key change: written to `signer_key_audit` in the change's own transaction. */
export interface KeyActor {
  readonly actor: AuditActor
  readonly correlationId: CorrelationId
}

export const KeyAuditAction = Schema.Literal("register", "rotate", "retire", "revoke", "purge")
export type KeyAuditAction = typeof KeyAuditAction.Type

/** `unchanged`: an idempotent repeat (the same registration or rotation again, a second revocation). */
export const KeyChangeOutcome = Schema.Literal("applied", "unchanged")
export type KeyChangeOutcome = typeof KeyChangeOutcome.Type

/** A `signer_key_audit` row as operators read it: ids, stable codes, actor and time only. */
export class KeyAuditEntry extends Schema.Class<KeyAuditEntry>("KeyAuditEntry")({
  keyId: KeyId,
  action: KeyAuditAction,
  outcome: KeyChangeOutcome,
  actor: Schema.String,
  at: Schema.DateFromSelf,
  correlationId: Schema.String
}) {}

/** What an operator key action did; `retired` lists the keys a rotation retired. */
export interface KeyChange {
  readonly key: SigningKey
  readonly outcome: KeyChangeOutcome
  readonly retired: ReadonlyArray<SigningKey>
}

/** An operator named a key id the tenant does not have (another tenant's ids are not there either). */
export class SigningKeyNotFound extends Schema.TaggedError<SigningKeyNotFound>()("SigningKeyNotFound", {
  reason: Schema.Literal("key-unknown"),
  tenant: Schema.String,
  keyId: Schema.String
}) {}

export const RequestField = Schema.Literal("tenant", "keyId", "publicKey", "body")
export const RequestProblem = Schema.Literal("not-json", "missing", "invalid", "unknown-member")

/** An operator request did not validate. Fields and stable problems only: never the submitted values. */
export class SigningKeyRequestInvalid extends Schema.TaggedError<SigningKeyRequestInvalid>()("SigningKeyRequestInvalid", {
  reason: Schema.Literal("request-invalid"),
  issues: Schema.Array(Schema.Struct({ field: RequestField, problem: RequestProblem })).pipe(Schema.maxItems(8))
}) {}
