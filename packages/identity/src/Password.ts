import { Effect, Redacted } from "effect"
import { PasswordRejected } from "./Domain.ts"

/** Bounds on passwords: long enough to matter, short enough that argon2id work per attempt is bounded. */
export const passwordMinLength = 12
export const passwordMaxLength = 1024

export const checkPassword = (password: Redacted.Redacted<string>) => {
  const length = Redacted.value(password).length
  return length < passwordMinLength
    ? Effect.fail(new PasswordRejected({ reason: "too-short" }))
    : length > passwordMaxLength
    ? Effect.fail(new PasswordRejected({ reason: "too-long" }))
    : Effect.void
}

export const hashPassword = (password: Redacted.Redacted<string>) =>
  Effect.promise(() => Bun.password.hash(Redacted.value(password), { algorithm: "argon2id" }))
