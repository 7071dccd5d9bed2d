import type { RecordedRequest } from "@delivery/testing"

// What the providers saw, read against the record of accepted work: every provider request carries the
// idempotency key of a piece of accepted work of the right family (so nothing unaccepted was delivered), every
// request under one key carries byte-identical bytes, and per family how often a key may have reached the provider
// more than once (the retries a real provider has to deduplicate).

export const FAMILIES = ["outbox", "reset-mail", "receipts", "team-applications"] as const
export type Family = (typeof FAMILIES)[number]

/** Where each family's provider listens on the loopback server. */
export const familyPath = (family: Family, hooksPath: string) => (family === "outbox" ? hooksPath : "/emails")

const success = (r: RecordedRequest) => r.status !== undefined && r.status >= 200 && r.status < 300

/**
 * A request that may have reached a real provider: acknowledged (2xx), or left without an answer (hung, dropped,
 * or abandoned by the client: a timeout or a killed process). A 5xx answer is a refusal: nothing was delivered.
 */
export const mayHaveDelivered = (r: RecordedRequest) =>
  success(r) || r.handling === "hung" || r.handling === "dropped" || r.clientAborted

export interface FamilyFigures {
  readonly requests: number
  readonly keys: number
  /** Keys acknowledged (2xx) at least once. */
  readonly delivered: number
  /** Sum over keys of (requests that may have delivered - 1), when positive: the duplicates a provider dedupes. */
  readonly duplicates: number
  /** Sum over keys of (requests - 1): every retry, refused ones included. */
  readonly retries: number
}

export interface LedgerReport {
  readonly total: number
  /** Requests without an Idempotency-Key, or with one that names no accepted work. */
  readonly unaccepted: number
  /** Requests on another path than their family's provider. */
  readonly wrongPath: number
  /** Keys whose requests did not all carry the same bytes. */
  readonly differingKeys: number
  readonly families: Readonly<Record<Family, FamilyFigures>>
  /** Keys with at least one 2xx answer. */
  readonly deliveredKeys: ReadonlySet<string>
  /** Every request per key, in arrival order. */
  readonly byKey: ReadonlyMap<string, ReadonlyArray<RecordedRequest>>
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && Buffer.from(a).equals(Buffer.from(b))

export const readLedger = (requests: ReadonlyArray<RecordedRequest>, accepted: ReadonlyMap<string, Family>, hooksPath: string): LedgerReport => {
  let unaccepted = 0
  let wrongPath = 0
  const byKey = new Map<string, Array<RecordedRequest>>()
  for (const r of requests) {
    const family = r.idempotencyKey === undefined ? undefined : accepted.get(r.idempotencyKey)
    if (family === undefined) {
      unaccepted++
      continue
    }
    if (r.path !== familyPath(family, hooksPath)) wrongPath++
    const list = byKey.get(r.idempotencyKey!) ?? []
    list.push(r)
    byKey.set(r.idempotencyKey!, list)
  }
  let differingKeys = 0
  const deliveredKeys = new Set<string>()
  const families = Object.fromEntries(
    FAMILIES.map((f) => [f, { requests: 0, keys: 0, delivered: 0, duplicates: 0, retries: 0 }])
  ) as Record<Family, { requests: number; keys: number; delivered: number; duplicates: number; retries: number }>
  for (const [key, list] of byKey) {
    const figures = families[accepted.get(key)!]
    if (list.some((r) => !sameBytes(r.body, list[0]!.body))) differingKeys++
    const reached = list.filter(mayHaveDelivered).length
    figures.requests += list.length
    figures.keys += 1
    figures.retries += list.length - 1
    figures.duplicates += Math.max(0, reached - 1)
    if (list.some(success)) {
      figures.delivered += 1
      deliveredKeys.add(key)
    }
  }
  return { total: requests.length, unaccepted, wrongPath, differingKeys, families, deliveredKeys, byKey }
}
