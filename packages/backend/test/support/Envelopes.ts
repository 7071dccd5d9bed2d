import { createPrivateKey, sign } from "node:crypto"

/** RFC 8785 for the plain values of an envelope, written here so the checks do not lean on the product's own. */
const canonicalize = (value: unknown): string =>
  typeof value === "object" && value !== null
    ? `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonicalize((value as any)[key])}`).join(",")}}`
    : JSON.stringify(value)

/**
 * A producer device signing `controlplane/v1` envelopes with the Ed25519 seed of `signingKey()` (registered for the
 * tenant as `keyId`): what a producer does by hand.
 */
export const envelopeProducer = (options: {
  readonly tenant: string
  readonly device: string
  readonly seed: string
  readonly keyId?: string
  readonly project?: string
}) => {
  const privateKey = createPrivateKey({
    key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), Buffer.from(options.seed, "base64url")]),
    format: "der",
    type: "pkcs8"
  })
  return (sequence: number) => {
    const unsigned = {
      type: "controlplane/v1",
      route: { tenant: options.tenant, project: options.project ?? "web", producer: options.device },
      eventId: `evt-${options.device}-${String(sequence).padStart(12, "0")}`,
      idempotencyKey: `${options.device}:${sequence}`,
      sequence,
      keyId: options.keyId ?? "k1",
      createdAt: "2026-12-03T12:00:00.000Z",
      schemaVersion: 1,
      metadata: { kind: "task.proposed", subject: `task-${sequence}`, attributes: {} }
    }
    return { ...unsigned, signature: sign(null, Buffer.from(canonicalize(unsigned)), privateKey).toString("base64url") }
  }
}
