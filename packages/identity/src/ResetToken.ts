import { Config, Option, Redacted } from "effect"
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from "node:crypto"

export const PASSWORD_RESET_TOKEN_KEY = "PASSWORD_RESET_TOKEN_KEY"

/**
 * Reset tokens: `reset_<secret>`, the secret 32 random bytes as 43 base64url characters. The token is the
 * canonical credential of its verification and must be mailed on every attempt, so it is kept, but only sealed:
 * AES-256-GCM under a key derived from PASSWORD_RESET_TOKEN_KEY, with the verification id as associated data.
 * Completion finds the verification by HMAC-SHA256 of the token under a second derived key, so neither the
 * lookup nor the sealed value reveals a token without the environment's key.
 */
// Stryker disable next-line Regex: the length bound in isResetToken refuses anything before or after a token, as the anchors do
const TOKEN = /^reset_([A-Za-z0-9_-]{43})$/
export const maxResetTokenLength = 6 + 43

export const generateResetToken = (): Redacted.Redacted<string> =>
  Redacted.make(`reset_${randomBytes(32).toString("base64url")}`)

/** A format check only: no key, no storage. */
// Stryker disable next-line ConditionalExpression: the anchored pattern refuses a longer token too; the bound only spares it a long input
export const isResetToken = (token: string): boolean => token.length <= maxResetTokenLength && TOKEN.test(token)

const KEY_BYTES = 32
const NONCE_BYTES = 12
const TAG_BYTES = 16

/** 32 bytes, written as standard or URL-safe base64 (`openssl rand -base64 32`). */
const decodeKey = (text: string): Option.Option<Buffer> => {
  const trimmed = text.trim()
  if (!/^[A-Za-z0-9+/_-]{43}=?$/.test(trimmed)) return Option.none()
  const bytes = Buffer.from(trimmed.replaceAll("-", "+").replaceAll("_", "/"), "base64")
  // Stryker disable next-line ConditionalExpression: 43 base64 characters (and an optional `=`) always decode to 32 bytes; the check states the rule
  return bytes.length === KEY_BYTES ? Option.some(bytes) : Option.none()
}

/** Optional for the process as a whole; reset requests and an enabled delivery worker need it. */
export const ResetTokenKeyConfig = Config.redacted().pipe(
  Config.validate({
    message: "Expected 32 bytes as base64 (44 characters, e.g. `openssl rand -base64 32`) (value not shown)",
    validation: (key) => Option.isSome(decodeKey(Redacted.value(key)))
  }),
  Config.nested(PASSWORD_RESET_TOKEN_KEY)
)

export interface ResetTokenKeys {
  /** AES-256-GCM: nonce || ciphertext || tag, bound to `verificationId`. */
  readonly seal: (token: Redacted.Redacted<string>, verificationId: string) => Buffer
  /** None when the value was not sealed under this key for this verification (a rotated key, a moved row). */
  readonly open: (sealed: Uint8Array, verificationId: string) => Option.Option<Redacted.Redacted<string>>
  /** HMAC-SHA256 of the token: the indexed lookup of its verification. */
  readonly lookup: (token: Redacted.Redacted<string>) => Buffer
}

export const makeResetTokenKeys = (key: Redacted.Redacted<string>): ResetTokenKeys => {
  const master = Option.getOrThrow(decodeKey(Redacted.value(key)))
  // Two independent keys from one secret, so the lookup hash says nothing about the sealing key.
  const derive = (info: string) => Buffer.from(hkdfSync("sha256", master, Buffer.alloc(0), info, KEY_BYTES))
  const sealKey = derive("delivery/password-reset/seal/v1")
  const lookupKey = derive("delivery/password-reset/lookup/v1")
  return {
    seal: (token, verificationId) => {
      const nonce = randomBytes(NONCE_BYTES)
      const cipher = createCipheriv("aes-256-gcm", sealKey, nonce)
      cipher.setAAD(Buffer.from(verificationId, "utf8"))
      // Stryker disable next-line StringLiteral: an empty encoding is utf8 for a cipher's update, and a token is ASCII anyway
      const body = Buffer.concat([cipher.update(Redacted.value(token), "utf8"), cipher.final()])
      return Buffer.concat([nonce, body, cipher.getAuthTag()])
    },
    open: (sealed, verificationId) => {
      // Stryker disable next-line ConditionalExpression,EqualityOperator,ArithmeticOperator: a value this short fails the decipher's tag check below, which also answers none; the bound says so first
      if (sealed.length <= NONCE_BYTES + TAG_BYTES) return Option.none()
      const bytes = Buffer.from(sealed)
      try {
        const decipher = createDecipheriv("aes-256-gcm", sealKey, bytes.subarray(0, NONCE_BYTES))
        decipher.setAAD(Buffer.from(verificationId, "utf8"))
        decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES))
        const text = Buffer.concat([decipher.update(bytes.subarray(NONCE_BYTES, bytes.length - TAG_BYTES)), decipher.final()])
          .toString("utf8")
        return isResetToken(text) ? Option.some(Redacted.make(text)) : Option.none()
      } catch {
        return Option.none()
      }
    },
    // Stryker disable next-line StringLiteral: an empty encoding is utf8 for an HMAC's update, and a token is ASCII anyway
    lookup: (token) => createHmac("sha256", lookupKey).update(Redacted.value(token), "utf8").digest()
  }
}

/** The keys when PASSWORD_RESET_TOKEN_KEY is set. */
export const ResetTokenKeysConfig = Config.option(ResetTokenKeyConfig).pipe(
  Config.map(Option.map(makeResetTokenKeys))
)
