import type { ApiKeyMaterial } from "@delivery/identity"
import { Redacted } from "effect"
import { keyFingerprint } from "./Fingerprint.ts"
import { type BlockerCode, type Bytes32, type Instant, MAX_PROJECTED_KEYS, type ProjectedKey, type TenantApiProof } from "./Protocol.ts"

// tenant-api-http-v2 (spec 001): up to 1,000 active board and agent keys, read in the drain's read-only snapshot,
// become per-cycle salted fingerprints with their kind and expiry. Unknown, malformed, duplicate or overflowing
// projections fail closed: no proof at all, and a blocker instead. Never a partial list.

export type KeyProjection =
  | { readonly _tag: "Projected"; readonly proof: TenantApiProof }
  | { readonly _tag: "Refused"; readonly blocker: BlockerCode; readonly count: number }

/** How many rows the snapshot reads: one more than may be projected, so an overflow is seen, not cut off. */
export const KEY_READ_LIMIT = MAX_PROJECTED_KEYS + 1

const LOOKUP_ID = /^[0-9a-f]{24}$/

const refused = (blocker: BlockerCode, count: number): KeyProjection => ({ _tag: "Refused", blocker, count })

export const projectKeys = (challenge: Bytes32, keys: ReadonlyArray<ApiKeyMaterial>): KeyProjection => {
  if (keys.length > MAX_PROJECTED_KEYS) return refused("api-key-projection-overflow", keys.length)
  const projected: Array<ProjectedKey> = []
  const seen = new Set<string>()
  for (const key of keys) {
    if (key.kind !== "board" && key.kind !== "agent") return refused("api-key-projection-unknown", 1)
    const secretHash = Redacted.value(key.secretHash)
    const expiry = key.expiresAt
    if (
      !LOOKUP_ID.test(key.lookupId) ||
      secretHash.length !== 32 ||
      (expiry !== null && !(expiry instanceof Date && Number.isFinite(expiry.getTime())))
    ) {
      return refused("api-key-projection-malformed", 1)
    }
    const fingerprint = keyFingerprint(challenge, { kind: key.kind, lookupId: key.lookupId, secretHash })
    if (seen.has(fingerprint)) return refused("api-key-projection-duplicate", 1)
    seen.add(fingerprint)
    projected.push({ fingerprint, kind: key.kind, expiresAt: expiry === null ? null : (expiry.toISOString() as Instant) })
  }
  // Sorted by fingerprint: the proof depends on the keys, never on the order rows came back in.
  // Stryker disable next-line EqualityOperator,ConditionalExpression: duplicate fingerprints were refused above, so the equal branch is never taken
  projected.sort((a, b) => (a.fingerprint < b.fingerprint ? -1 : a.fingerprint > b.fingerprint ? 1 : 0))
  return { _tag: "Projected", proof: { keys: projected } }
}
