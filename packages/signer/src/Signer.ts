import { positiveDuration } from "@delivery/core"
import { Duration, Effect, Option } from "effect"
import {
  type KeyActor,
  type KeyId,
  KeyRefused,
  KeyUnavailable,
  type RawPublicKey,
  SignatureRefused,
  type SigningKey,
  type TenantId
} from "./Domain.ts"
import { encodeBase64Url } from "./Ed25519.ts"
import { decodeUnsignedEnvelope, type Envelope, requireSupportedSchemaVersion, type UnsignedEnvelope } from "./Envelope.ts"
import { decodeEnvelopeSignature, eventIdentity, signingBytes, verifySignatureBytes } from "./EnvelopeSignature.ts"
import { makeKeyManagement, systemActor } from "./KeyManagement.ts"
import { SigningKeySource } from "./KeySource.ts"
import { SignerRepo } from "./SignerRepo.ts"

export const SIGNER_REPLAY_WINDOW = "SIGNER_REPLAY_WINDOW"

/**
 * How long a retired or revoked key's envelopes may still arrive (replayed or late). It matches
 * the inbox payload retention default of spec 000 (90 days): past it the inbox no longer holds the
 * payloads those envelopes carried, and their permanent identities refuse them as duplicates.
 */
export const replayWindowConfig = positiveDuration(SIGNER_REPLAY_WINDOW, Duration.days(90))

/** Audit rows `Signer.keyAudit` reads at most. */
export const KEY_AUDIT_LIMIT = 100

/** Revoked keys are deleted in bounded batches, so one sweep never holds a long lock. */
export const PURGE_BATCH = 1_000

/** What `verify` proves: this envelope was signed by `key`, usable in the verified tenant right now. */
export interface VerifiedEnvelope {
  readonly envelope: Envelope
  readonly key: SigningKey
  /** SHA-256 hex of the signed bytes: the audit row's event identity. */
  readonly eventIdentity: string
}

/** An unsigned envelope before the signer fills in the tenant's active key id. */
export type SignRequest = Omit<UnsignedEnvelope, "keyId">

export class Signer extends Effect.Service<Signer>()("@delivery/signer/Signer", {
  dependencies: [SignerRepo.Default],
  effect: Effect.gen(function* () {
    const repo = yield* SignerRepo
    const source = yield* SigningKeySource
    const window = yield* replayWindowConfig
    const managed = makeKeyManagement(repo, window)
    const now = managed.now
    // Direct calls (scripts, tests, other packages) are audited too, as `system:signer`.
    const attributed = (by: KeyActor | undefined) => (by === undefined ? systemActor("signer") : Effect.succeed(by))

    /** Enrols a tenant's first (or next, once none is active) key. Same key again: the stored row. */
    const registerKey = (tenant: TenantId, keyId: KeyId, publicKey: RawPublicKey, by?: KeyActor) =>
      Effect.flatMap(attributed(by), (actor) => Effect.map(managed.register(tenant, keyId, publicKey, actor), (c) => c.key))

    /** Adds `keyId` as the active key and retires the previous one (it verifies for the replay window). */
    const rotate = (tenant: TenantId, keyId: KeyId, publicKey: RawPublicKey, by?: KeyActor) =>
      Effect.flatMap(attributed(by), (actor) =>
        Effect.map(managed.rotate(tenant, keyId, publicKey, actor), (c) => ({ key: c.key, retired: c.retired })))

    /** Stops verification at once; the row stays (refusing its envelopes) until `purgeRevoked`. */
    const revoke = (tenant: TenantId, keyId: KeyId, by?: KeyActor) =>
      Effect.flatMap(attributed(by), (actor) => Effect.map(managed.revoke(tenant, keyId, actor), (c) => c.key))

    /**
     * Deletes revoked keys whose replay window has passed: no envelope they signed can still be
     * replayed, so their identity may go (spec 000: revoked keys are removed only after that).
     * Each batch and its `purge` audit rows are one statement.
     */
    const purgeRevoked = Effect.fn("Signer.purgeRevoked")(function*(by?: KeyActor) {
      const at = yield* now
      const actor = by ?? (yield* systemActor("signer-purge"))
      const purged: Array<{ readonly tenant: TenantId; readonly keyId: KeyId }> = []
      while (true) {
        const batch = yield* repo.purgeRevoked({ now: at, limit: PURGE_BATCH, ...actor })
        purged.push(...batch)
        if (batch.length < PURGE_BATCH) return purged
      }
    })

    const keys = Effect.fn("Signer.keys")(function*(tenant: TenantId) {
      return yield* repo.listForTenant(tenant)
    })

    /** The tenant's `signer_key_audit` rows, newest first, at most 100 (purged keys' rows included). */
    const keyAudit = Effect.fn("Signer.keyAudit")(function*(tenant: TenantId) {
      return yield* repo.auditForTenant(tenant, KEY_AUDIT_LIMIT)
    })

    /**
     * Looks the key up only under `tenant`, which must be the verified tenant: another tenant's
     * key id is simply not there ("key-unknown"), so its existence is never disclosed.
     */
    const resolveVerificationKey = Effect.fn("Signer.resolveVerificationKey")(function*(tenant: TenantId, keyId: KeyId) {
      const found = yield* repo.find(tenant, keyId)
      if (Option.isNone(found)) return yield* new KeyRefused({ reason: "key-unknown", tenant, keyId })
      const key = found.value
      if (key.state === "revoked") return yield* new KeyRefused({ reason: "key-revoked", tenant, keyId })
      // Every retired row has its verify_until (a CHECK of signer_keys); were one missing, its window is over.
      if (key.state === "retired" && (yield* now) >= (key.verifyUntil ?? new Date(0))) {
        return yield* new KeyRefused({ reason: "key-expired", tenant, keyId })
      }
      return key
    })

    /**
     * Step 3 of spec 000. `verifiedTenant` is the authenticated tenant when the caller has one; the
     * route must name it (step 2 compares it first; this keeps the key lookup inside that scope).
     */
    const verify = Effect.fn("Signer.verify")(function*(envelope: Envelope, verifiedTenant?: TenantId) {
      const tenant = verifiedTenant ?? envelope.route.tenant
      const { keyId } = envelope
      if (envelope.route.tenant !== tenant) return yield* new KeyRefused({ reason: "key-unknown", tenant, keyId })
      const signature = yield* Effect.mapError(decodeEnvelopeSignature(envelope), (malformed) =>
        new SignatureRefused({ reason: "signature-malformed", tenant, keyId, defect: malformed.defect }))
      const key = yield* resolveVerificationKey(tenant, keyId)
      if (!verifySignatureBytes(envelope, signature, key.publicKey)) {
        return yield* new SignatureRefused({ reason: "signature-invalid", tenant, keyId })
      }
      return { envelope, key, eventIdentity: eventIdentity(envelope) } satisfies VerifiedEnvelope
    })

    /**
     * Signs with the tenant's active registered key through the key source. The result is checked
     * against the registered public key, so a misconfigured source never emits an envelope that
     * receivers would refuse.
     */
    const sign = Effect.fn("Signer.sign")(function*(request: SignRequest) {
      const tenant = request.route.tenant
      const active = yield* repo.findActive(tenant)
      if (Option.isNone(active)) return yield* new KeyUnavailable({ reason: "no-active-key", tenant })
      const keyId = active.value.keyId
      const unsigned = yield* decodeUnsignedEnvelope({ ...request, keyId })
      yield* requireSupportedSchemaVersion(unsigned)
      const signature = yield* source.sign(tenant, keyId, signingBytes(unsigned))
      if (!verifySignatureBytes(unsigned, signature, active.value.publicKey)) {
        yield* Effect.logError("signing key source disagrees with the registered public key").pipe(
          Effect.annotateLogs({ tenant, keyId })
        )
        return yield* new KeyUnavailable({ reason: "key-mismatch", tenant, keyId })
      }
      return { ...unsigned, signature: encodeBase64Url(signature) } satisfies Envelope
    })

    return {
      registerKey,
      rotate,
      revoke,
      /** Operator-facing forms: same transactions, attributed to `by`, saying whether anything changed. */
      registerKeyAs: managed.register,
      rotateAs: managed.rotate,
      revokeAs: managed.revoke,
      purgeRevoked,
      keys,
      keyAudit,
      resolveVerificationKey,
      verify,
      sign
    } as const
  })
}) {}
