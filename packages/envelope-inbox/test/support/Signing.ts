import { Canonical } from "@delivery/core"
import { encodeBase64Url } from "@delivery/signer"
import { Either } from "effect"
import { type KeyObject, randomBytes, sign } from "node:crypto"

/**
 * Signs any JSON object the way a producer does (RFC 8785 bytes of the object without `signature`,
 * Ed25519, unpadded base64url), valid or not: a test can then show that an unknown member or a
 * version-2 envelope is refused for what it is, not for a bad signature.
 */
export const signJson = (object: Record<string, unknown>, privateKey: KeyObject): Record<string, unknown> => {
  const { signature: _, ...unsigned } = object
  const bytes = Either.getOrThrow(Canonical.canonicalBytes(unsigned))
  return { ...unsigned, signature: encodeBase64Url(sign(null, bytes, privateKey)) }
}

/** A fresh event id (26 characters, like a ULID). */
export const newEventId = () => randomBytes(13).toString("hex")

export interface EnvelopeFields {
  readonly tenant: string
  readonly project?: string
  readonly producer?: string
  readonly sequence: number
  readonly eventId?: string
  readonly idempotencyKey?: string
  readonly keyId?: string
  readonly subject?: string
}

/** A well-formed unsigned envelope as a client would build it. */
export const envelopeJson = (fields: EnvelopeFields): Record<string, unknown> => ({
  type: "controlplane/v1",
  route: { tenant: fields.tenant, project: fields.project ?? "website", producer: fields.producer ?? "laptop-7" },
  eventId: fields.eventId ?? newEventId(),
  idempotencyKey: fields.idempotencyKey ?? `op:${fields.sequence}:${randomBytes(4).toString("hex")}`,
  sequence: fields.sequence,
  keyId: fields.keyId ?? "k1",
  createdAt: "2025-01-15T09:30:00.123Z",
  schemaVersion: 1,
  metadata: { kind: "task.proposed", subject: fields.subject ?? "task-42", attributes: { title: "Réviser le plan", secret: "payload-marker-7f3a" } }
})

/** The marker every test payload carries, so a test can check no response echoes it. */
export const PAYLOAD_MARKER = "payload-marker-7f3a"
