import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { JsonBodyRefused } from "@delivery/core"
import { IdPattern, OperatorAuthentication } from "@delivery/identity"
import { Schema } from "effect"
import {
  CorrelationId,
  KeyConflict,
  KeyId,
  KeyState,
  SignerStorageUnavailable,
  SigningKeyNotFound,
  SigningKeyRequestInvalid
} from "./Domain.ts"
import { Ed25519PublicKey } from "./Ed25519.ts"

// Path ids are plain strings to the router and are validated by the handlers, so a bad id is a 422
// `SigningKeyRequestInvalid` like a bad body (the framework's own decode failure would be a 400).
// The JSON Schema annotation still documents the pattern.
const pathId = (what: string) =>
  Schema.String.annotations({
    description: `${what}: 1 to 64 of a-z 0-9 _ - , starting with a letter or digit`,
    jsonSchema: { type: "string", pattern: IdPattern.source, minLength: 1, maxLength: 64 }
  })

export const TenantPath = Schema.Struct({ tenant: pathId("tenant id") })
export const KeyPath = Schema.Struct({ tenant: pathId("tenant id"), keyId: pathId("key id") })

/** `{ keyId, publicKey }`, closed: an unknown member is refused, never dropped. */
export const SigningKeyRequest = Schema.Struct({
  keyId: KeyId,
  publicKey: Ed25519PublicKey.annotations({ description: "raw 32-byte Ed25519 public key, unpadded base64url (43 characters)" })
}).annotations({ identifier: "SigningKeyRequest", parseOptions: { onExcessProperty: "error" } })
export type SigningKeyRequest = typeof SigningKeyRequest.Type

/** A registered key as an operator sees it: public material, state and verification window. */
export const SigningKeyView = Schema.Struct({
  keyId: KeyId,
  publicKey: Ed25519PublicKey,
  state: KeyState,
  createdAt: Schema.Date,
  retiredAt: Schema.NullOr(Schema.Date),
  revokedAt: Schema.NullOr(Schema.Date),
  /** A retired key verifies until then; a revoked key is purged after it. Null while active. */
  verifyUntil: Schema.NullOr(Schema.Date)
}).annotations({ identifier: "SigningKeyView" })
export type SigningKeyView = typeof SigningKeyView.Type

export const SigningKeyList = Schema.Struct({ tenant: Schema.String, keys: Schema.Array(SigningKeyView) })
  .annotations({ identifier: "SigningKeyList" })

/** What a key action did. `correlationId` is the one on its audit rows (and the `x-correlation-id` header). */
const change = <O extends string>(outcome: O, identifier: string) =>
  Schema.Struct({
    outcome: Schema.Literal(outcome),
    key: SigningKeyView,
    /** Keys this action retired (a rotation retires the previously active key). */
    retired: Schema.Array(SigningKeyView),
    correlationId: CorrelationId
  }).annotations({ identifier })

export const KeyRegistered = change("registered", "SigningKeyRegistered")
export const KeyRotated = change("rotated", "SigningKeyRotated")
export const KeyRevoked = change("revoked", "SigningKeyRevoked")
/** An idempotent repeat: nothing changed, and the audit row says so. */
export const KeyUnchanged = change("unchanged", "SigningKeyUnchanged")

const keys = "/operator/tenants/:tenant/signing-keys"

/**
 * Operator key management (spec 000: "Signing-key rotation adds a new tenant-scoped key ID").
 * Behind `OperatorAuthentication`, so every endpoint also answers 401, 403 (operator routes
 * disabled), 429 and 503 as that middleware declares; the peer limit runs before any body is read.
 */
export class SignerApi extends HttpApiGroup.make("signer")
  .add(
    HttpApiEndpoint.get("list", keys)
      .setPath(TenantPath)
      .addSuccess(SigningKeyList)
      .annotate(OpenApi.Summary, "The tenant's signing keys (public keys, states, verification windows)")
  )
  .add(
    HttpApiEndpoint.post("register", keys)
      .setPath(TenantPath)
      .setPayload(SigningKeyRequest)
      .addSuccess(KeyRegistered, { status: 201 })
      .addSuccess(KeyUnchanged)
      .addError(KeyConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Register the tenant's first key (or next, once none is active)")
      .annotate(OpenApi.Description, "201 when registered; 200 when the same key id and public key are already registered; 409 when the key id has another public key or the tenant already has an active key (rotate instead).")
  )
  .add(
    HttpApiEndpoint.post("rotate", `${keys}/rotate`)
      .setPath(TenantPath)
      .setPayload(SigningKeyRequest)
      .addSuccess(KeyRotated, { status: 201 })
      .addSuccess(KeyUnchanged)
      .addError(KeyConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Rotate: the new key becomes active, the previous one is retired")
      .annotate(OpenApi.Description, "The retired key keeps verifying for SIGNER_REPLAY_WINDOW. 201 when rotated; 200 when this key is already the active one; 409 when the key id has another public key or is no longer active.")
  )
  .add(
    HttpApiEndpoint.post("revoke", `${keys}/:keyId/revoke`)
      .setPath(KeyPath)
      .addSuccess(Schema.Union(KeyRevoked, KeyUnchanged))
      .addError(SigningKeyNotFound, { status: 404 })
      .annotate(OpenApi.Summary, "Revoke: the key stops verifying at once; it is purged after its replay window")
  )
  .addError(SigningKeyRequestInvalid, { status: 422 })
  .addError(JsonBodyRefused, { status: 422 })
  .addError(SignerStorageUnavailable, { status: 503 })
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Signing keys (operator)")
{}
