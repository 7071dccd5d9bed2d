import { Option } from "effect"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"

/**
 * Opaque bearer tokens: `<kind>_<lookupId>_<secret>`.
 *
 * - kind: `board` | `agent` (API keys), `device` (device credentials) or `session` (sign-in sessions), so a
 *   token can only ever be looked up in the one table it was issued from;
 * - lookupId: 12 random bytes as 24 lower-case hex digits, the indexed primary
 *   key of the credential row; public, never sufficient on its own;
 * - secret: 32 random bytes as 43 base64url characters (no padding).
 *
 * Only SHA-256(secret) is stored. The secret has 256 bits of entropy, so a fast
 * hash is enough (a slow password hash would only make every request expensive);
 * comparison is constant-time.
 */
export type TokenKind = "board" | "agent" | "device" | "session"

export interface ParsedToken {
  readonly kind: TokenKind
  readonly lookupId: string
  readonly secret: string
}

const TOKEN = /^(board|agent|device|session)_([0-9a-f]{24})_([A-Za-z0-9_-]{43})$/

/** Longest well-formed token ("session" + 2 separators + 24 + 43); anything longer is refused unread. */
export const maxTokenLength = 7 + 2 + 24 + 43

// Stryker disable next-line StringLiteral: an empty encoding is utf8 for a hash's update, and a secret is ASCII anyway
export const digest = (secret: string): Buffer => createHash("sha256").update(secret, "utf8").digest()

/** A format check only: no hashing, no storage. */
export const parse = (token: string): Option.Option<ParsedToken> => {
  // Stryker disable next-line ConditionalExpression: the anchored grammar refuses a longer token too; the bound only spares the pattern a long input
  if (token.length > maxTokenLength) return Option.none()
  const match = TOKEN.exec(token)
  if (match === null) return Option.none()
  return Option.some({ kind: match[1] as TokenKind, lookupId: match[2]!, secret: match[3]! })
}

export interface GeneratedToken {
  readonly lookupId: string
  readonly token: string
  readonly secretHash: Buffer
}

export const generate = (kind: TokenKind): GeneratedToken => {
  const lookupId = randomBytes(12).toString("hex")
  const secret = randomBytes(32).toString("base64url")
  return { lookupId, token: `${kind}_${lookupId}_${secret}`, secretHash: digest(secret) }
}

/** Constant-time in the secret; a stored hash of the wrong length (never written by us) simply fails. */
export const matches = (secret: string, storedHash: Uint8Array): boolean => {
  const actual = digest(secret)
  return storedHash.length === actual.length && timingSafeEqual(actual, storedHash)
}
