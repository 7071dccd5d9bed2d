import { makeCorrelationId } from "@delivery/core"
import { Clock, Duration, Effect, Option } from "effect"
import {
  AuditActor,
  CorrelationId,
  KeyConflict,
  type KeyAuditAction,
  type KeyActor,
  type KeyChange,
  type KeyChangeOutcome,
  type KeyId,
  KeyRefused,
  type RawPublicKey,
  type SigningKey,
  type TenantId
} from "./Domain.ts"
import { sameBytes } from "./Ed25519.ts"
import type { SignerRepo } from "./SignerRepo.ts"

/** A fresh correlation id, for changes no request asked for (the purge sweep, direct calls). */
export const newCorrelationId = Effect.sync(() => CorrelationId.make(makeCorrelationId()))

/** The actor of key changes made by code rather than by an authenticated caller. */
export const systemActor = (name: string) =>
  Effect.map(newCorrelationId, (correlationId): KeyActor => ({ actor: AuditActor.make(`system:${name}`), correlationId }))

/**
 * Register, rotate and revoke. Each runs in ONE transaction under the tenant's key-management lock,
 * and that transaction also writes the `signer_key_audit` row(s) of the change, so a change is never
 * committed without its audit row, and a refused or failed change leaves neither.
 */
export const makeKeyManagement = (repo: SignerRepo, window: Duration.DurationInput) => {
  const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
  const windowEnd = (from: Date) => new Date(from.getTime() + Duration.toMillis(window))
  const conflict = (tenant: TenantId, keyId: KeyId, detail: KeyConflict["detail"]) =>
    new KeyConflict({ reason: "key-conflict", tenant, keyId, detail })

  const audited = (by: KeyActor, at: Date) =>
  (key: { readonly tenant: TenantId; readonly keyId: KeyId }, action: KeyAuditAction, outcome: KeyChangeOutcome) =>
    repo.audit({ tenant: key.tenant, keyId: key.keyId, action, outcome, at, ...by })

  const change = (key: SigningKey, outcome: KeyChangeOutcome, retired: ReadonlyArray<SigningKey> = []): KeyChange => ({
    key,
    outcome,
    retired
  })

  /** Enrols a tenant's first (or next, once none is active) key. Same key again: the stored row, unchanged. */
  const register = Effect.fn("Signer.registerKey")(
    function*(tenant: TenantId, keyId: KeyId, publicKey: RawPublicKey, by: KeyActor) {
      return yield* repo.transaction("registerKey", Effect.gen(function*() {
        yield* repo.lockTenant(tenant)
        const at = yield* now
        const audit = audited(by, at)
        const existing = yield* repo.find(tenant, keyId)
        if (Option.isSome(existing)) {
          if (!sameBytes(existing.value.publicKey, publicKey)) return yield* conflict(tenant, keyId, "public-key-differs")
          yield* audit(existing.value, "register", "unchanged")
          return change(existing.value, "unchanged")
        }
        // One active key per tenant (a partial unique index holds it too): replacing it is `rotate`.
        if (Option.isSome(yield* repo.findActive(tenant))) return yield* conflict(tenant, keyId, "tenant-has-active-key")
        const key = yield* repo.insertActive({ tenant, keyId, publicKey, now: at })
        yield* audit(key, "register", "applied")
        return change(key, "applied")
      }))
    }
  )

  /**
   * Adds `keyId` as the active key and retires the previous one, which keeps verifying for the
   * replay window (spec 000: old public keys remain verifiable for the retention/replay window).
   */
  const rotate = Effect.fn("Signer.rotate")(
    function*(tenant: TenantId, keyId: KeyId, publicKey: RawPublicKey, by: KeyActor) {
      return yield* repo.transaction("rotate", Effect.gen(function*() {
        yield* repo.lockTenant(tenant)
        const at = yield* now
        const audit = audited(by, at)
        const existing = yield* repo.find(tenant, keyId)
        if (Option.isSome(existing)) {
          if (!sameBytes(existing.value.publicKey, publicKey)) return yield* conflict(tenant, keyId, "public-key-differs")
          // A rotation that already happened is acknowledged again; a retired key is never reactivated.
          if (existing.value.state !== "active") return yield* conflict(tenant, keyId, "key-not-active")
          yield* audit(existing.value, "rotate", "unchanged")
          return change(existing.value, "unchanged")
        }
        const retired = yield* repo.retireActive({ tenant, now: at, verifyUntil: windowEnd(at) })
        for (const old of retired) yield* audit(old, "retire", "applied")
        const key = yield* repo.insertActive({ tenant, keyId, publicKey, now: at })
        yield* audit(key, "rotate", "applied")
        return change(key, "applied", retired)
      }))
    }
  )

  /** Stops verification at once; the row stays (refusing its envelopes) until `purgeRevoked`. */
  const revoke = Effect.fn("Signer.revoke")(function*(tenant: TenantId, keyId: KeyId, by: KeyActor) {
    return yield* repo.transaction("revoke", Effect.gen(function*() {
      yield* repo.lockTenant(tenant)
      const at = yield* now
      const audit = audited(by, at)
      const existing = yield* repo.find(tenant, keyId)
      if (Option.isNone(existing)) return yield* new KeyRefused({ reason: "key-unknown", tenant, keyId })
      if (existing.value.state === "revoked") {
        yield* audit(existing.value, "revoke", "unchanged")
        return change(existing.value, "unchanged")
      }
      // The row was read under the tenant lock, so the update cannot miss it; if it ever did, nothing changed.
      const revoked = yield* Effect.flatMap(
        repo.revoke({ tenant, keyId, now: at, verifyUntil: windowEnd(at) }),
        Option.match({
          // Stryker disable next-line ArrowFunction,StringLiteral: unreachable, the row was read under the tenant's lock in this transaction
          onNone: () => Effect.dieMessage("signer_keys row vanished under the tenant lock"),
          onSome: Effect.succeed
        })
      )
      yield* audit(revoked, "revoke", "applied")
      return change(revoked, "applied")
    }))
  })

  return { register, rotate, revoke, now }
}
