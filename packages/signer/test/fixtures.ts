import { Either } from "effect"
import {
  decodeUnsignedEnvelope,
  KeyId,
  privateKeyFromSeed,
  RawPublicKey,
  rawPublicKey,
  TenantId,
  type UnsignedEnvelope
} from "../src/index.ts"

/** A deterministic 32-byte seed per label, so every run signs the same bytes. */
export const seedOf = (n: number) => new Uint8Array(Array.from({ length: 32 }, (_, i) => (n * 31 + i) & 0xff))

export const keyPair = (n: number) => {
  const privateKey = privateKeyFromSeed(seedOf(n))
  return { seed: seedOf(n), privateKey, publicKey: RawPublicKey.make(rawPublicKey(privateKey)) }
}

export const tenant = (name: string) => TenantId.make(name)
export const keyId = (name: string) => KeyId.make(name)

/** A plain JSON value (what a client sends) for an unsigned envelope; `overrides` replace top-level members. */
export const unsignedJson = (overrides: Record<string, unknown> = {}): Record<string, unknown> => ({
  type: "controlplane/v1",
  route: { tenant: "acme", project: "website", producer: "laptop-7" },
  eventId: "01J9Z3K6X8Q4M2N5P7R9T1V3W5",
  idempotencyKey: "task-42:proposal:1",
  sequence: 42,
  keyId: "k1",
  createdAt: "2025-01-15T09:30:00.123Z",
  schemaVersion: 1,
  metadata: { kind: "task.proposed", subject: "task-42", attributes: { title: "Réviser", priority: "high" } },
  ...overrides
})

export const unsigned = (overrides: Record<string, unknown> = {}): UnsignedEnvelope =>
  Either.getOrThrow(decodeUnsignedEnvelope(unsignedJson(overrides)))
