import { Option, Redacted } from "effect"
import * as Token from "./Token.ts"

/**
 * One active board or agent API key as idle wake's per-cycle key projection reads it (spec 001, "Pre-wake API
 * admission"): the projection turns it into a salted, domain-separated fingerprint inside this process. The stored
 * SHA-256 of the secret stays `Redacted`, so it never reaches a log; the token itself is never stored anywhere.
 * `kind` and `lookupId` are as stored: the projection refuses anything but a well-formed board or agent key.
 */
export interface ApiKeyMaterial {
  readonly kind: string
  readonly lookupId: string
  readonly secretHash: Redacted.Redacted<Uint8Array>
  readonly expiresAt: Date | null
}

/** The same three inputs computed from a presented bearer token, for whoever matches tokens against fingerprints. */
export interface PresentedKeyMaterial {
  readonly kind: "board" | "agent"
  readonly lookupId: string
  readonly secretHash: Uint8Array
}

/**
 * A presented token's kind, lookup id and SHA-256 of its secret, or none when it is not a well-formed board or agent
 * key (device credentials and sessions never wake a stack). A format check and one hash: no storage.
 */
export const presentedKeyMaterial = (token: string): Option.Option<PresentedKeyMaterial> =>
  Option.flatMap(Token.parse(token), (parsed) =>
    parsed.kind === "board" || parsed.kind === "agent"
      ? Option.some({ kind: parsed.kind, lookupId: parsed.lookupId, secretHash: new Uint8Array(Token.digest(parsed.secret)) })
      : Option.none())

export const materialOfRow = (row: {
  readonly kind: string
  readonly lookup_id: string
  readonly secret_hash: Uint8Array
  readonly expires_at: Date | null
}): ApiKeyMaterial => ({
  kind: row.kind,
  lookupId: row.lookup_id,
  secretHash: Redacted.make(row.secret_hash),
  expiresAt: row.expires_at
})
