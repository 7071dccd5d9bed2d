import { IdPattern } from "@delivery/identity"
import { Either } from "effect"
import type { KeyObject } from "node:crypto"
import { KeyId, KeySourceInvalid, TenantId } from "./Domain.ts"
import { base64UrlLength, decodeBase64Url, PKCS8_BYTES, privateKeyFromSeed, SEED_BYTES, seedFromPkcs8 } from "./Ed25519.ts"

// Parses the private-key list given to the environment and file key sources. Every failure
// names a stable reason and the entry's position only: the text being parsed is the secret,
// and JSON.parse messages quote it, so no message or cause from below is ever passed on.

export interface PrivateKeyEntry {
  readonly tenant: TenantId
  readonly keyId: KeyId
  readonly privateKey: KeyObject
}

type Source = KeySourceInvalid["source"]
type Reason = KeySourceInvalid["reason"]

const invalid = (source: Source, reason: Reason, entry?: number) =>
  Either.left(new KeySourceInvalid(entry === undefined ? { source, reason } : { source, reason, entry }))

/**
 * A private key on the wire: unpadded base64url of the 32-byte Ed25519 seed (43 characters), or
 * of its 48-byte PKCS#8 DER form (64 characters; `openssl genpkey -algorithm ed25519 -outform DER`).
 */
const decodePrivateKey = (text: string): KeyObject | undefined => {
  const bytes = text.length === base64UrlLength(SEED_BYTES) ? SEED_BYTES : PKCS8_BYTES
  const decoded = decodeBase64Url(text, bytes)
  if (Either.isLeft(decoded)) return undefined
  const seed = bytes === SEED_BYTES ? decoded.right : seedFromPkcs8(decoded.right)
  return seed === undefined ? undefined : privateKeyFromSeed(seed)
}

// Tenant and key ids come from JSON member names or compact text, so they are always strings.
interface RawEntry {
  readonly tenant: string
  readonly keyId: string
  readonly key: unknown
}

const fromJson = (text: string, source: Source): Either.Either<Array<RawEntry>, KeySourceInvalid> => {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return invalid(source, "not-json")
  }
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)
  const entries: Array<RawEntry> = []
  // `text` starts with "{" (see parseKeyList), so whatever JSON.parse accepted is an object.
  for (const [tenant, keys] of Object.entries(parsed as Record<string, unknown>)) {
    if (!isObject(keys)) return invalid(source, "bad-shape")
    for (const [keyId, key] of Object.entries(keys)) entries.push({ tenant, keyId, key })
  }
  return Either.right(entries)
}

const fromCompact = (text: string, source: Source): Either.Either<Array<RawEntry>, KeySourceInvalid> => {
  const entries: Array<RawEntry> = []
  const items = text.split(",").map((item) => item.trim()).filter((item) => item !== "")
  for (const [index, item] of items.entries()) {
    const parts = item.split(":")
    if (parts.length !== 3) return invalid(source, "bad-entry", index)
    const [tenant, keyId, key] = parts as [string, string, string]
    entries.push({ tenant, keyId, key })
  }
  return Either.right(entries)
}

/**
 * Two spellings of the same list: JSON `{"<tenant>": {"<keyId>": "<key>"}}`, or the compact
 * `tenant:keyId:key,tenant:keyId:key` (tenant and key ids never contain `:` or `,`).
 * An empty text is an empty list: a verify-only process needs no private key.
 */
export const parseKeyList = (
  text: string,
  source: Source
): Either.Either<ReadonlyArray<PrivateKeyEntry>, KeySourceInvalid> => {
  const trimmed = text.trim()
  const raw = trimmed.startsWith("{") ? fromJson(trimmed, source) : fromCompact(trimmed, source)
  return Either.flatMap(raw, (entries) => {
    const seen = new Set<string>()
    const out: Array<PrivateKeyEntry> = []
    for (const [index, entry] of entries.entries()) {
      if (!IdPattern.test(entry.tenant)) return invalid(source, "bad-tenant", index)
      if (!IdPattern.test(entry.keyId)) return invalid(source, "bad-key-id", index)
      const privateKey = typeof entry.key === "string" ? decodePrivateKey(entry.key) : undefined
      if (privateKey === undefined) return invalid(source, "bad-private-key", index)
      const id = `${entry.tenant}:${entry.keyId}`
      if (seen.has(id)) return invalid(source, "duplicate-key", index)
      seen.add(id)
      out.push({ tenant: TenantId.make(entry.tenant), keyId: KeyId.make(entry.keyId), privateKey })
    }
    return Either.right(out)
  })
}
