import { positiveDuration } from "@delivery/core"
import { Clock, Duration, Effect, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import {
  type AccountId,
  decodeVerifiedIdentity,
  type Email,
  type TenantId,
  Unauthenticated,
  type UnauthenticatedReason
} from "./Domain.ts"
import { IdentityRepo } from "./IdentityRepo.ts"
import type { ApiKeyRow, DeviceCredentialRow, SessionRow } from "./IdentityRows.ts"
import { materialOfRow } from "./KeyMaterial.ts"
import { hashPassword, passwordMaxLength } from "./Password.ts"
import { makeProvisioning } from "./Provisioning.ts"
import * as Token from "./Token.ts"

export { passwordMaxLength, passwordMinLength } from "./Password.ts"
export type { IssueApiKey, IssueDeviceCredential, Page } from "./Provisioning.ts"

export const IDENTITY_SESSION_TTL = "IDENTITY_SESSION_TTL"

/** How long a sign-in session authenticates: short, so a password change is felt soon everywhere. */
export const SessionTtlConfig = positiveDuration(IDENTITY_SESSION_TTL, "15 minutes")

export interface VerifiedAccount {
  readonly tenant: TenantId
  readonly account: AccountId
}

const refuse = (reason: UnauthenticatedReason) => Effect.fail(new Unauthenticated({ reason }))

export class Identity extends Effect.Service<Identity>()("@delivery/identity/Identity", {
  effect: Effect.gen(function* () {
    const repo = yield* IdentityRepo
    const sessionTtl = yield* SessionTtlConfig

    // Verifying against a real argon2id hash when the account does not exist keeps
    // the response time from telling which e-mail addresses have accounts.
    const decoyHash = yield* Effect.cached(hashPassword(Redacted.make(randomBytes(24).toString("base64url"))))

    const provisioning = makeProvisioning(repo)

    const verifyPassword = Effect.fn("Identity.verifyPassword")(function* (input: {
      readonly tenant: TenantId
      readonly email: Email
      readonly password: Redacted.Redacted<string>
    }) {
      const value = Redacted.value(input.password)
      if (value.length === 0) return yield* refuse("missing")
      if (value.length > passwordMaxLength) return yield* refuse("unknown")
      const account = yield* repo.findAccountByEmail(input.tenant, input.email)
      const stored = Option.flatMapNullable(account, (a) => a.password_hash)
      const hash = Option.isSome(stored) ? stored.value : yield* decoyHash
      const ok = yield* Effect.promise(() => Bun.password.verify(value, hash))
      if (!ok || Option.isNone(stored) || Option.isNone(account)) return yield* refuse("unknown")
      // Only someone who knows the password learns that the account is disabled.
      if (!account.value.enabled) return yield* refuse("disabled")
      return { tenant: input.tenant, account: account.value.id as AccountId } satisfies VerifiedAccount
    })

    /**
     * Password sign-in: the account's password, then a session credential that expires after
     * IDENTITY_SESSION_TTL. The token exists in the answer only. Wrong password and unknown address are
     * the same refusal in similar time (`verifyPassword`); only the password's owner learns "disabled".
     */
    const signIn = Effect.fn("Identity.signIn")(function* (input: {
      readonly tenant: TenantId
      readonly email: Email
      readonly password: Redacted.Redacted<string>
    }) {
      const verified = yield* verifyPassword(input)
      const generated = Token.generate("session")
      const at = new Date(yield* Clock.currentTimeMillis)
      const expiresAt = new Date(at.getTime() + Duration.toMillis(sessionTtl))
      yield* repo.insertSession({
        lookupId: generated.lookupId,
        tenant: verified.tenant,
        account: verified.account,
        secretHash: generated.secretHash,
        expiresAt,
        at
      })
      return { ...verified, token: Redacted.make(generated.token), expiresAt }
    })

    // The secret is checked before anything else about the row, so a caller who only
    // knows a lookup id learns nothing about the credential's state. Combinators rather than a generator: this runs
    // on every authenticated request, and JavaScriptCore compiled its generator again 16-21 times in one inbox bench.
    const admit = (row: ApiKeyRow | DeviceCredentialRow | SessionRow, secret: string): Effect.Effect<void, Unauthenticated> => {
      if (!Token.matches(secret, row.secret_hash)) return refuse("unknown")
      if (row.revoked_at !== null) return refuse("revoked")
      return Effect.flatMap(Clock.currentTimeMillis, (now) => {
        if (row.expires_at !== null && row.expires_at.getTime() <= now) return refuse("expired")
        return row.account_enabled ? Effect.void : refuse("disabled")
      })
    }

    /**
     * Spec 000 step 1: the opaque credential becomes a closed VerifiedIdentity.
     * Format first (a malformed or missing token costs no hashing and no query),
     * then one indexed lookup, the constant-time secret check, revocation, expiry
     * (Effect Clock) and the account's enabled flag.
     */
    const authenticate = Effect.fn("Identity.authenticate")(function* (token: Redacted.Redacted<string>) {
      const value = Redacted.value(token)
      if (value.length === 0) return yield* refuse("missing")
      const parsed = Token.parse(value)
      if (Option.isNone(parsed)) return yield* refuse("malformed")
      const { kind, lookupId, secret } = parsed.value
      let identity: unknown
      if (kind === "device") {
        const row = yield* repo.findDeviceCredential(lookupId)
        if (Option.isNone(row)) return yield* refuse("unknown")
        yield* admit(row.value, secret)
        const { tenant_id, account_id, device_id } = row.value
        identity = { _tag: "Device", tenant: tenant_id, account: account_id, device: device_id }
      } else if (kind === "session") {
        const row = yield* repo.findSession(lookupId)
        if (Option.isNone(row)) return yield* refuse("unknown")
        yield* admit(row.value, secret)
        identity = { _tag: "Session", tenant: row.value.tenant_id, account: row.value.account_id }
      } else {
        const row = yield* repo.findApiKey(lookupId, kind)
        if (Option.isNone(row)) return yield* refuse("unknown")
        yield* admit(row.value, secret)
        const { tenant_id, account_id, lookup_id, permissions } = row.value
        identity = { _tag: "ApiKey", tenant: tenant_id, account: account_id, keyId: lookup_id, kind, permissions }
      }
      // The rows are constrained like the schema; a row that does not decode is a bug, not a refusal.
      return yield* Effect.orDie(decodeVerifiedIdentity(identity))
    })

    /**
     * Idle wake's key projection (spec 001): up to `limit` active board and agent keys (not revoked, not expired at
     * the Clock's now, account enabled), ordered by lookup id. Run it inside the caller's read-only snapshot.
     */
    const activeApiKeyMaterial = Effect.fn("Identity.activeApiKeyMaterial")(function* (limit: number) {
      const at = new Date(yield* Clock.currentTimeMillis)
      const rows = yield* repo.activeApiKeyMaterial(at, limit)
      return rows.map(materialOfRow)
    })

    /** Whether any device credential could still authenticate (a producer could send control-plane envelopes). */
    const hasActiveDeviceCredential = Effect.fn("Identity.hasActiveDeviceCredential")(function* () {
      const at = new Date(yield* Clock.currentTimeMillis)
      return yield* repo.hasActiveDeviceCredential(at)
    })

    return { ...provisioning, verifyPassword, signIn, authenticate, activeApiKeyMaterial, hasActiveDeviceCredential } as const
  }),
  dependencies: [IdentityRepo.Default]
}) {}
