import { Effect } from "effect"
import type { KeyId, KeyRefused, SignerStorageUnavailable, SigningKey, TenantId } from "./Domain.ts"

/** What the cache needs of `Signer`: its key lookup, which refuses unknown, revoked and expired keys. */
export interface KeyLookup {
  readonly resolveVerificationKey: (tenant: TenantId, keyId: KeyId) => Effect.Effect<SigningKey, KeyRefused | SignerStorageUnavailable>
}

/** A key as the cache hands it out: `cached` when no lookup was made, so its state was not read now. */
export interface VerificationKey {
  readonly tenant: TenantId
  readonly keyId: KeyId
  /** The registered raw 32-byte Ed25519 public key. */
  readonly publicKey: Uint8Array
  readonly cached: boolean
}

/** Keys held at most; when full the cache is emptied, so key churn cannot grow it. */
export const VERIFICATION_KEY_CAPACITY = 10_000

/**
 * A per-process cache of verification keys' public key bytes, in front of `Signer.resolveVerificationKey`.
 *
 * Safe because of what it does NOT cache: a registered key id's public key bytes never change (register and
 * rotate refuse other bytes for an existing key id), but its state does (retired, revoked, expired, purged). So a
 * hit skips the lookup and only lends the bytes for the signature check; whoever commits under that signature
 * must check the state in the committing transaction (`signer_key_refusal`, migrations/0032_signer_key_check.sql),
 * which also answers `key-replaced` should a purged key id come back with other bytes. A miss is the ordinary
 * lookup, refusals included; only a key usable at that moment is cached. Every process has its own cache, and
 * none needs to hear of another's key changes: the state is always read from the database.
 */
export const makeVerificationKeys = (signer: KeyLookup, capacity = VERIFICATION_KEY_CAPACITY) => {
  const entries = new Map<string, VerificationKey>()
  // Tenant and key ids are bounded to [a-z0-9_-], so the separator is unambiguous.
  const slot = (tenant: TenantId, keyId: KeyId) => `${tenant}/${keyId}`

  /** Always a lookup (the key's state read now); a usable key replaces its cached bytes, any refusal drops them. */
  const lookup = (tenant: TenantId, keyId: KeyId) =>
    signer.resolveVerificationKey(tenant, keyId).pipe(
      Effect.map((key): VerificationKey => {
        if (entries.size >= capacity) entries.clear()
        entries.set(slot(tenant, keyId), { tenant, keyId, publicKey: key.publicKey, cached: true })
        return { tenant, keyId, publicKey: key.publicKey, cached: false }
      }),
      Effect.tapErrorTag("KeyRefused", () => Effect.sync(() => entries.delete(slot(tenant, keyId))))
    )

  return {
    /** The cached bytes when there are some (no lookup: the caller checks the state where it commits), else a lookup. */
    resolve: (tenant: TenantId, keyId: KeyId) => {
      const hit = entries.get(slot(tenant, keyId))
      return hit === undefined ? lookup(tenant, keyId) : Effect.succeed(hit)
    },
    lookup,
    /** Forgets a key, for a caller that learned its cached bytes are no longer usable. */
    evict: (tenant: TenantId, keyId: KeyId) => Effect.sync(() => void entries.delete(slot(tenant, keyId))),
    /** How many keys are held now (tests and diagnostics). */
    size: () => entries.size
  } as const
}

export type VerificationKeys = ReturnType<typeof makeVerificationKeys>
