import { expect, layer } from "@effect/vitest"
import { HttpBody } from "@effect/platform"
import { ApiKeyName, Identity, Permission } from "@delivery/identity"
import { KeyId, RawPublicKey, rawPublicKey, Signer } from "@delivery/signer"
import { Canonical } from "@delivery/core"
import { Effect, Either } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { EnvelopeInbox } from "../src/index.ts"
import { type Answer, auditOf, counts, post, producer, type Producer, receive, streamOf, SuiteLive } from "./support/Harness.ts"
import { envelopeJson, PAYLOAD_MARKER, signJson } from "./support/Signing.ts"

interface BadInput {
  readonly name: string
  readonly status: number
  readonly reason: string
  readonly detail?: Record<string, unknown>
  /** Refusals after authentication are audited; the body limit runs before it, so 413 is not. */
  readonly audited?: boolean
  /** A generous bound for inputs built to be expensive (deep or wide): linear work stays far below it. */
  readonly withinMs?: number
  readonly send: (p: Producer) => Effect.Effect<Answer, unknown, any>
}

const sign = (p: Producer, json: Record<string, unknown>) => signJson(json, p.privateKey)
const base = (p: Producer, sequence = 9) => envelopeJson({ tenant: p.tenant, sequence })
const metadataWith = (attributes: unknown) => ({ kind: "task.proposed", subject: "task-42", attributes })

// JSON.stringify recurses (and overflows on deep values); the canonical form is the same JSON, written iteratively.
const jsonText = (value: Record<string, unknown>) => Either.getOrThrow(Canonical.canonicalString(value))
const nested = (depth: number, leaf: unknown = PAYLOAD_MARKER) => {
  let value = leaf
  for (let i = 0; i < depth; i++) value = [value]
  return value
}
/** Signed by the producer's real key, sent as text: the deep and wide cases must get past step 3. */
const postSigned = (p: Producer, json: Record<string, unknown>) => post(jsonText(sign(p, json)), p.token)

// A lone surrogate has no UTF-8 (so no RFC 8785) form: nothing can be signed. The placeholder is signed and
// then replaced in the text; JSON's escape reaches the server as the lone code unit.
const withLoneSurrogate = (p: Producer, attributes: Record<string, string>) =>
  post(jsonText(sign(p, { ...base(p), metadata: metadataWith(attributes) })).replace("LONE", "\\ud800"), p.token)

// Each case starts from a stream that already holds sequences 1..3 with the replay floor raised to 5.
const cases: ReadonlyArray<BadInput> = [
  { name: "malformed JSON", status: 422, reason: "json-malformed", send: (p) => post('{"type":"controlplane/v1",', p.token) },
  { name: "invalid UTF-8", status: 422, reason: "json-malformed", send: (p) => post(HttpBody.uint8Array(new Uint8Array([0x7b, 0xff, 0x7d]), "application/json"), p.token) },
  { name: "an empty body", status: 422, reason: "json-malformed", send: (p) => post("", p.token) },
  {
    // Read leniently, the byte would become U+FFFD and the envelope would reach the signature check.
    name: "invalid UTF-8 inside a string of a signed envelope",
    status: 422,
    reason: "json-malformed",
    send: (p) => {
      const text = new TextEncoder().encode(JSON.stringify(p.envelope({ sequence: 9 })).replace("task-42", "task-42@"))
      return post(HttpBody.uint8Array(text.map((byte) => (byte === 0x40 ? 0xff : byte)), "application/json"), p.token)
    }
  },
  {
    name: "a JSON null body",
    status: 422,
    reason: "envelope-invalid",
    detail: { problem: "invalid-value", at: "" },
    send: (p) => post("null", p.token)
  },
  {
    name: "a null route",
    status: 422,
    reason: "envelope-invalid",
    detail: { problem: "invalid-value", at: "/route" },
    send: (p) => post(sign(p, { ...base(p), route: null }), p.token)
  },
  {
    name: "oversized body",
    status: 413,
    reason: "body-too-large",
    audited: false,
    send: (p) => post(JSON.stringify({ ...p.envelope({ sequence: 9 }), pad: "x".repeat(65 * 1024) }), p.token)
  },
  {
    name: "unknown member",
    status: 422,
    reason: "envelope-invalid",
    detail: { problem: "unexpected-member", at: "" },
    send: (p) => post(sign(p, { ...base(p), extra: PAYLOAD_MARKER }), p.token)
  },
  {
    name: "unknown member in the route",
    status: 422,
    reason: "envelope-invalid",
    detail: { problem: "unexpected-member", at: "/route" },
    send: (p) => post(sign(p, { ...base(p), route: { tenant: p.tenant, project: "website", producer: "laptop-7", region: "eu" } }), p.token)
  },
  {
    name: "an identity out of bounds (event id too short)",
    status: 422,
    reason: "envelope-invalid",
    detail: { problem: "invalid-value", at: "/eventId" },
    send: (p) => post(sign(p, { ...base(p), eventId: "short" }), p.token)
  },
  {
    name: "unknown member in the metadata payload",
    status: 422,
    reason: "metadata-invalid",
    detail: { problem: "unexpected-member", at: "/metadata" },
    send: (p) => post(sign(p, { ...base(p), metadata: { kind: "task.proposed", subject: "t", attributes: {}, x: 1 } }), p.token)
  },
  {
    name: "a lone surrogate in an attribute value",
    status: 422,
    reason: "metadata-invalid",
    detail: { problem: "invalid-value", at: "/metadata/attributes/title" },
    send: (p) => withLoneSurrogate(p, { title: `LONE ${PAYLOAD_MARKER}` })
  },
  {
    name: "a lone surrogate in an attribute key",
    status: 422,
    reason: "metadata-invalid",
    detail: { problem: "unexpected-member", at: "/metadata/attributes" },
    send: (p) => withLoneSurrogate(p, { [`LONE${PAYLOAD_MARKER}`]: "x" })
  },
  {
    name: "a C1 control character (U+0085) in an attribute value",
    status: 422,
    reason: "metadata-invalid",
    detail: { problem: "invalid-value", at: "/metadata/attributes/title" },
    send: (p) => postSigned(p, { ...base(p), metadata: metadataWith({ title: `next\u0085line ${PAYLOAD_MARKER}` }) })
  },
  {
    name: "a 20,000-deep metadata value (40 KB)",
    status: 422,
    reason: "metadata-invalid",
    detail: { problem: "invalid-value", at: "/metadata" },
    withinMs: 5_000,
    send: (p) => postSigned(p, { ...base(p), metadata: nested(20_000) })
  },
  {
    name: "a 20,000-deep attribute value",
    status: 422,
    reason: "metadata-invalid",
    detail: { problem: "invalid-value", at: "/metadata/attributes/title" },
    withinMs: 5_000,
    send: (p) => postSigned(p, { ...base(p), metadata: metadataWith({ title: nested(20_000) }) })
  },
  {
    name: "a 20,000-deep route",
    status: 422,
    reason: "envelope-invalid",
    detail: { problem: "invalid-value", at: "/route" },
    withinMs: 5_000,
    send: (p) => postSigned(p, { ...base(p), route: nested(20_000) })
  },
  {
    name: "a 20,000-deep unknown member",
    status: 422,
    reason: "envelope-invalid",
    detail: { problem: "unexpected-member", at: "" },
    withinMs: 5_000,
    send: (p) => postSigned(p, { ...base(p), extra: nested(20_000) })
  },
  {
    name: "a wide metadata value (an array of 25,000 items)",
    status: 422,
    reason: "metadata-invalid",
    detail: { problem: "invalid-value", at: "/metadata" },
    withinMs: 5_000,
    send: (p) => postSigned(p, { ...base(p), metadata: Array.from({ length: 25_000 }, () => 0) })
  },
  {
    name: "4,000 attributes",
    status: 422,
    reason: "metadata-invalid",
    detail: { problem: "invalid-value", at: "/metadata/attributes" },
    withinMs: 5_000,
    send: (p) => postSigned(p, { ...base(p), metadata: metadataWith(Object.fromEntries(Array.from({ length: 4_000 }, (_, i) => [`a${i}`, "x"]))) })
  },
  {
    name: "4,000 unknown top-level members",
    status: 422,
    reason: "envelope-invalid",
    detail: { problem: "unexpected-member", at: "" },
    withinMs: 5_000,
    send: (p) => postSigned(p, { ...base(p), ...Object.fromEntries(Array.from({ length: 4_000 }, (_, i) => [`x${i}`, 1])) })
  },
  {
    name: "bad base64 in the signature",
    status: 422,
    reason: "signature-malformed",
    detail: { defect: "signature-alphabet" },
    send: (p) => {
      const signed = p.envelope({ sequence: 9 })
      return post({ ...signed, signature: "+" + (signed.signature as string).slice(1) }, p.token)
    }
  },
  {
    name: "wrong key id",
    status: 403,
    reason: "key-unknown",
    send: (p) => post(sign(p, { ...base(p), keyId: "k9" }), p.token)
  },
  {
    name: "revoked key",
    status: 403,
    reason: "key-revoked",
    send: (p) =>
      Effect.gen(function* () {
        const signer = yield* Signer
        const { privateKey } = generateKeyPairSync("ed25519")
        yield* signer.rotate(p.tenant, KeyId.make("k2"), RawPublicKey.make(rawPublicKey(privateKey)))
        yield* signer.revoke(p.tenant, KeyId.make("k2"))
        return yield* post(signJson({ ...base(p), keyId: "k2" }, privateKey), p.token)
      })
  },
  {
    name: "tampered payload",
    status: 403,
    reason: "signature-invalid",
    send: (p) => {
      const signed = p.envelope({ sequence: 9 })
      const metadata = signed.metadata as { attributes: Record<string, string> }
      return post({ ...signed, metadata: { ...metadata, attributes: { ...metadata.attributes, title: "changed" } } }, p.token)
    }
  },
  {
    name: "a signature by another key",
    status: 403,
    reason: "signature-invalid",
    send: (p) => post(signJson(base(p), generateKeyPairSync("ed25519").privateKey), p.token)
  },
  {
    name: "a non-canonical signature spelling",
    status: 422,
    reason: "signature-malformed",
    detail: { defect: "signature-non-canonical" },
    send: (p) => {
      const signed = p.envelope({ sequence: 9 })
      // The last character carries 4 unused bits that must be zero: "B" spells the same bytes differently.
      return post({ ...signed, signature: (signed.signature as string).slice(0, -1) + "B" }, p.token)
    }
  },
  {
    name: "sequence below the floor",
    status: 409,
    reason: "sequence-below-replay-floor",
    send: (p) => post(p.envelope({ sequence: 4 }), p.token)
  },
  {
    name: "schema version 2",
    status: 422,
    reason: "schema-version-unsupported",
    send: (p) => post(sign(p, { ...base(p), schemaVersion: 2 }), p.token)
  },
  {
    name: "foreign tenant",
    status: 403,
    reason: "route-tenant-mismatch",
    send: (p) => post(sign(p, { ...base(p), route: { tenant: "another-tenant", project: "website", producer: "laptop-7" } }), p.token)
  },
  {
    name: "an API key instead of a device credential",
    status: 403,
    reason: "device-credential-required",
    send: (p) =>
      Effect.gen(function* () {
        const identity = yield* Identity
        const key = yield* identity.issueApiKey({
          tenant: p.tenant,
          account: p.account,
          kind: "agent",
          name: ApiKeyName.make("agent"),
          permissions: [Permission.make("receipts:write")]
        })
        return yield* post(p.envelope({ sequence: 9 }), key.token)
      })
  }
]

layer(SuiteLive(), { excludeTestServices: true })("bad inputs get their stable reason and change nothing", (it) => {
  for (const bad of cases) {
    it.effect(`${bad.name}: ${bad.status} ${bad.reason}; no identity, payload, cursor or floor changes`, () =>
      Effect.gen(function* () {
        const p = yield* producer()
        const inbox = yield* EnvelopeInbox
        for (const sequence of [1, 2, 3]) expect((yield* post(p.envelope({ sequence }), p.token)).status).toBe(201)
        yield* inbox.raiseReplayFloor({ tenant: p.tenant, project: "website", producer: "laptop-7" }, 5)
        const before = yield* counts(p.tenant)
        const stream = yield* streamOf(p.tenant)

        const started = performance.now()
        const answer = yield* bad.send(p)
        const elapsed = performance.now() - started

        expect(answer.status).toBe(bad.status)
        if (bad.withinMs !== undefined) expect(elapsed).toBeLessThan(bad.withinMs)
        expect(answer.body).toMatchObject({ reason: bad.reason, correlationId: answer.headers["x-correlation-id"], ...bad.detail })
        expect(JSON.stringify(answer)).not.toContain(PAYLOAD_MARKER)
        const after = yield* counts(p.tenant)
        const audited = bad.audited ?? true
        expect(after).toEqual({ ...before, audit: before.audit + (audited ? 1 : 0) })
        expect(yield* streamOf(p.tenant)).toEqual(stream)
        if (audited) {
          const last = (yield* auditOf(p.tenant)).at(-1)!
          expect([last.outcome, last.reason, last.correlation_id]).toEqual(["refused", bad.reason, answer.headers["x-correlation-id"]])
          expect(JSON.stringify(last)).not.toContain(PAYLOAD_MARKER)
        }
      }))
  }
})

layer(SuiteLive(), { excludeTestServices: true })("the service on its own (a script, no body limit in front) is safe on deep and huge input", (it) => {
  const timed = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.gen(function* () {
      const started = performance.now()
      const result = yield* effect
      return { result, ms: performance.now() - started }
    })

  it.effect("a 1 MB body nesting arrays 500,000 deep, and a signed envelope whose metadata nests 250,000 deep, end in 422 with their stable reasons in bounded time, audited", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const abyss = yield* timed(Effect.flip(receive(p, "[".repeat(500_000) + "]".repeat(500_000))))
      expect(abyss.result).toMatchObject({ _tag: "EnvelopeUnprocessable", reason: "envelope-invalid", problem: "invalid-value", at: "" })
      expect(abyss.ms).toBeLessThan(10_000)

      const deepMetadata = jsonText(sign(p, { ...base(p, 1), metadata: nested(250_000) }))
      const signed = yield* timed(Effect.flip(receive(p, deepMetadata)))
      expect(signed.result).toMatchObject({ _tag: "EnvelopeUnprocessable", reason: "metadata-invalid", problem: "invalid-value", at: "/metadata" })
      expect(signed.ms).toBeLessThan(10_000)
      expect(JSON.stringify(signed.result)).not.toContain(PAYLOAD_MARKER)

      const wide = jsonText(sign(p, { ...base(p, 1), metadata: metadataWith(Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`a${i}`, PAYLOAD_MARKER]))) }))
      const many = yield* timed(Effect.flip(receive(p, wide)))
      expect(many.result).toMatchObject({ reason: "metadata-invalid", problem: "invalid-value", at: "/metadata/attributes" })
      expect(many.ms).toBeLessThan(10_000)

      expect((yield* auditOf(p.tenant)).map((row) => row.reason)).toEqual(["envelope-invalid", "metadata-invalid", "metadata-invalid"])
      expect(yield* counts(p.tenant)).toMatchObject({ identities: 0, payloads: 0 })
    }))
})
