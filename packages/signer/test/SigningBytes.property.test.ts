import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import fc from "fast-check"
import { decodeEnvelope, eventIdentity, signEnvelope, signingBytes, verifyEnvelopeSignature } from "../src/index.ts"
import { keyPair } from "./fixtures.ts"

const id = fc.stringMatching(/^[a-z0-9][a-z0-9_-]{0,63}$/)
const attributeKey = fc.stringMatching(/^[a-z][a-z0-9_.-]{0,63}$/)
// Any text the schema admits: no lone surrogates, no control characters but tab and LF.
const attributeValue = fc
  .string({ unit: "grapheme", maxLength: 40 })
  .filter((s) => !/[\u0000-\u0008\u000B-\u001F\u007F]/.test(s))

const envelopeJson = fc.record({
  type: fc.constant("controlplane/v1"),
  route: fc.record({ tenant: id, project: id, producer: id }),
  eventId: fc.stringMatching(/^[A-Za-z0-9_-]{16,64}$/),
  idempotencyKey: fc.stringMatching(/^[A-Za-z0-9._:-]{1,128}$/),
  sequence: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
  keyId: id,
  createdAt: fc
    .date({ min: new Date("1970-01-01T00:00:00Z"), max: new Date("9999-12-31T23:59:59Z"), noInvalidDate: true })
    .map((d) => d.toISOString()),
  schemaVersion: fc.integer({ min: 1, max: 99 }),
  metadata: fc.record({
    kind: fc.constantFrom("task.proposed", "task.updated", "task.cancelled"),
    subject: id,
    attributes: fc.dictionary(attributeKey, attributeValue, { maxKeys: 32 })
  })
})

/** The same JSON value with the members of every object in an order drawn from `order`. */
const reorder = (value: unknown, order: () => number): unknown => {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value
  const entries = Object.entries(value).map(([k, v]) => [k, reorder(v, order)] as const)
  const shuffled = entries.map((entry) => ({ entry, rank: order() })).sort((a, b) => a.rank - b.rank)
  const out: Record<string, unknown> = {}
  for (const { entry: [k, v] } of shuffled) out[k] = v
  return out
}

const orderFrom = (ranks: ReadonlyArray<number>) => {
  let i = 0
  return () => ranks[i++ % ranks.length]!
}

describe("signed bytes are RFC 8785 canonical JSON (property)", () => {
  const { privateKey, publicKey } = keyPair(7)

  it("canonical signing bytes are independent of member order, so a re-serialized envelope still verifies", () => {
    fc.assert(
      fc.property(envelopeJson, fc.array(fc.double({ noNaN: true }), { minLength: 1, maxLength: 64 }), (json, ranks) => {
        const original = Either.getOrThrow(decodeEnvelope({ ...json, signature: "A" }))
        const shuffledJson = reorder(json, orderFrom(ranks)) as Record<string, unknown>
        const shuffled = Either.getOrThrow(decodeEnvelope({ ...shuffledJson, signature: "A" }))
        expect(Buffer.from(signingBytes(shuffled)).equals(Buffer.from(signingBytes(original)))).toBe(true)
        expect(eventIdentity(shuffled)).toBe(eventIdentity(original))
        // A receiver that parses the wire text in any member order verifies the producer's signature.
        const signed = signEnvelope(original, privateKey)
        const wire = JSON.stringify(reorder(signed, orderFrom([...ranks].reverse())))
        const received = Either.getOrThrow(decodeEnvelope(JSON.parse(wire)))
        expect(verifyEnvelopeSignature(received, publicKey)).toBe(true)
      }),
      { numRuns: 200 }
    )
  })
})
