import { positiveDuration } from "@delivery/core"
import { Clock, Duration, Effect, Option, Redacted, Schema } from "effect"
import { randomUUID } from "node:crypto"
import type { AccountId, Email, PasswordRejected, TenantId } from "./Domain.ts"
import { IdentityRepo } from "./IdentityRepo.ts"
import { checkPassword, hashPassword } from "./Password.ts"
import { ResetRepo } from "./ResetRepo.ts"
import { generateResetToken, isResetToken, ResetTokenKeysConfig } from "./ResetToken.ts"

export const PASSWORD_RESET_TTL = "PASSWORD_RESET_TTL"

/** How long a reset token can complete a reset. Delivery never extends it (spec 002). */
export const ResetTtlConfig = positiveDuration(PASSWORD_RESET_TTL, "1 hour")

/** PASSWORD_RESET_TOKEN_KEY is not set in this process: no reset token can be made or read here. */
export class PasswordResetUnavailable extends Schema.TaggedError<PasswordResetUnavailable>()("PasswordResetUnavailable", {}) {}

/**
 * The one refusal of a completion whatever the cause (unknown, malformed, expired or used token, disabled
 * account), so a completion tells nothing about accounts or tokens it cannot use.
 */
export class ResetInvalid extends Schema.TaggedError<ResetInvalid>()("ResetInvalid", {}) {}

/** What delivery finds when it looks at a verification, in the order spec 002 checks it. */
export type ResetMailContext =
  | { readonly _tag: "Missing" }
  | { readonly _tag: "Expired" }
  | { readonly _tag: "Consumed" }
  | { readonly _tag: "AccountDisabled" }
  /** The sealed token does not open under this process's key (a changed PASSWORD_RESET_TOKEN_KEY). */
  | { readonly _tag: "Unreadable" }
  | {
    readonly _tag: "Live"
    readonly tenant: TenantId
    readonly account: AccountId
    readonly email: string
    readonly token: Redacted.Redacted<string>
    readonly expiresAt: Date
  }

/**
 * Password-reset verifications: spec 002's canonical verification, owned by identity. `begin` runs inside the
 * caller's transaction (the reset request commits the verification with its outbox row); `mailContext` is the
 * live read every delivery attempt starts with; `complete` sets the new password.
 */
export class PasswordResets extends Effect.Service<PasswordResets>()("@delivery/identity/PasswordResets", {
  effect: Effect.gen(function* () {
    const identityRepo = yield* IdentityRepo
    const repo = yield* ResetRepo
    const ttl = yield* ResetTtlConfig
    const keysOption = yield* ResetTokenKeysConfig
    const keys = Option.match(keysOption, {
      onNone: () => Effect.fail(new PasswordResetUnavailable()),
      onSome: Effect.succeed
    })

    /**
     * For an enabled account with this address: a new verification with a fresh token (sealed) and its expiry;
     * none otherwise. The caller's transaction decides whether it commits.
     */
    const begin = Effect.fn("PasswordResets.begin")(function* (input: { readonly tenant: TenantId; readonly email: Email }) {
      const k = yield* keys
      const account = yield* identityRepo.findAccountByEmail(input.tenant, input.email)
      if (Option.isNone(account) || !account.value.enabled) return Option.none()
      const id = randomUUID()
      const token = generateResetToken()
      const at = new Date(yield* Clock.currentTimeMillis)
      const expiresAt = new Date(at.getTime() + Duration.toMillis(ttl))
      yield* repo.insert({
        id,
        tenant: input.tenant,
        account: account.value.id,
        lookup: k.lookup(token),
        sealed: k.seal(token, id),
        expiresAt,
        at
      })
      return Option.some({ verificationId: id, tenant: input.tenant, account: account.value.id as AccountId, expiresAt })
    })

    /** Spec 002: every attempt checks that the verification exists, is unexpired and belongs to an enabled account. */
    const mailContext = Effect.fn("PasswordResets.mailContext")(function* (verificationId: string) {
      const k = yield* keys
      const row = yield* repo.findById(verificationId)
      if (Option.isNone(row)) return { _tag: "Missing" } as const satisfies ResetMailContext
      const v = row.value
      const now = yield* Clock.currentTimeMillis
      if (v.expires_at.getTime() <= now) return { _tag: "Expired" } as const satisfies ResetMailContext
      if (v.consumed_at !== null) return { _tag: "Consumed" } as const satisfies ResetMailContext
      if (!v.account_enabled) return { _tag: "AccountDisabled" } as const satisfies ResetMailContext
      const token = k.open(v.token_sealed, v.id)
      if (Option.isNone(token)) return { _tag: "Unreadable" } as const satisfies ResetMailContext
      return {
        _tag: "Live",
        tenant: v.tenant_id as TenantId,
        account: v.account_id as AccountId,
        email: v.email,
        token: token.value,
        expiresAt: v.expires_at
      } as const satisfies ResetMailContext
    })

    /**
     * The token and a new password. A live, unexpired, unconsumed verification of an enabled account sets the
     * password, consumes every live verification of the account and revokes its sessions, with an audit row, in
     * one transaction; anything else is `ResetInvalid` and changes nothing. The password is checked and hashed
     * first, so a usable and an unusable token cost the same.
     */
    const complete = Effect.fn("PasswordResets.complete")(function* (input: {
      readonly token: Redacted.Redacted<string>
      readonly password: Redacted.Redacted<string>
      readonly correlationId: string
    }) {
      const k = yield* keys
      yield* checkPassword(input.password) satisfies Effect.Effect<void, PasswordRejected>
      if (!isResetToken(Redacted.value(input.token))) return yield* new ResetInvalid()
      const passwordHash = yield* hashPassword(input.password)
      const lookup = k.lookup(input.token)
      return yield* identityRepo.transaction(
        "completeReset",
        Effect.gen(function* () {
          const row = yield* repo.lockByLookup(lookup)
          const now = yield* Clock.currentTimeMillis
          if (
            Option.isNone(row) || row.value.consumed_at !== null || row.value.expires_at.getTime() <= now ||
            !row.value.account_enabled
          ) return yield* new ResetInvalid()
          const at = new Date(now)
          const { account_id: account, tenant_id: tenant } = row.value
          yield* repo.complete({ tenant, account, passwordHash, at })
          yield* identityRepo.audit({
            tenant,
            action: "password-reset",
            subject: account,
            outcome: "applied",
            actor: "account:reset-token",
            correlationId: input.correlationId,
            at
          })
          return { tenant: tenant as TenantId, account: account as AccountId }
        })
      )
    })

    return { begin, mailContext, complete, enabled: Option.isSome(keysOption) } as const
  }),
  dependencies: [IdentityRepo.Default, ResetRepo.Default]
}) {}
