import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, JSONSchema, ParseResult, Schema } from "effect"
import {
  AttributeKey,
  Attributes,
  AttributeValue,
  CreatedAt,
  decodeEnvelope,
  decodeEnvelopeSignature,
  Envelope,
  EnvelopeHead,
  EventId,
  eventIdentity,
  IdempotencyKey,
  invalidAt,
  Metadata,
  requireSupportedSchemaVersion,
  Route,
  signEnvelope,
  signingBytes,
  signingText,
  type UnsignedEnvelope,
  UnsignedEnvelope as UnsignedEnvelopeSchema,
  verifyEnvelopeSignature
} from "../src/index.ts"
import { keyPair, unsigned, unsignedJson } from "./fixtures.ts"

const { privateKey, publicKey } = keyPair(1)
const signedJson = (overrides: Record<string, unknown> = {}) =>
  signEnvelope(unsigned(overrides), privateKey) as unknown as Record<string, unknown>
const parse = (value: unknown) => decodeEnvelope(value)
const refusal = (value: unknown) => Either.flip(parse(value)).pipe(Either.getOrThrow)
const setPath = (value: Record<string, unknown>, path: ReadonlyArray<string>, next: unknown): Record<string, unknown> => {
  const [head, ...rest] = path
  return { ...value, [head!]: rest.length === 0 ? next : setPath(value[head!] as Record<string, unknown>, rest, next) }
}

describe("controlplane/v1 signing: Ed25519 over the RFC 8785 form of the envelope without `signature`", () => {
  it("sign then verify round-trips, and the signature covers exactly the canonical bytes", () => {
    const envelope = Either.getOrThrow(parse(signedJson()))
    expect(verifyEnvelopeSignature(envelope, publicKey)).toBe(true)
    expect(envelope.signature).toMatch(/^[A-Za-z0-9_-]{85}[AQgw]$/)
    // Ed25519 is deterministic: signing the same bytes again gives the same text.
    expect(signEnvelope(unsigned(), privateKey).signature).toBe(envelope.signature)
    expect(eventIdentity(envelope)).toMatch(/^[0-9a-f]{64}$/)
    expect(eventIdentity(envelope)).toBe(eventIdentity(unsigned()))
  })

  it("another key's signature does not verify", () => {
    const envelope = Either.getOrThrow(parse(signedJson()))
    expect(verifyEnvelopeSignature(envelope, keyPair(2).publicKey)).toBe(false)
  })

  const tampered: ReadonlyArray<[string, ReadonlyArray<string>, unknown]> = [
    ["route.tenant", ["route", "tenant"], "globex"],
    ["route.project", ["route", "project"], "intranet"],
    ["route.producer", ["route", "producer"], "laptop-8"],
    ["eventId", ["eventId"], "01J9Z3K6X8Q4M2N5P7R9T1V3W6"],
    ["idempotencyKey", ["idempotencyKey"], "task-42:proposal:2"],
    ["sequence", ["sequence"], 43],
    ["keyId", ["keyId"], "k2"],
    ["createdAt", ["createdAt"], "2025-01-15T09:30:00.124Z"],
    ["schemaVersion", ["schemaVersion"], 2],
    ["metadata.kind", ["metadata", "kind"], "task.cancelled"],
    ["metadata.subject", ["metadata", "subject"], "task-43"],
    ["metadata.attributes (value)", ["metadata", "attributes", "title"], "Reviser"],
    ["metadata.attributes (added)", ["metadata", "attributes", "extra"], "x"],
    ["metadata.attributes (removed)", ["metadata", "attributes"], { title: "Réviser" }]
  ]
  it.each(tampered)("a tampered payload fails verification: %s", (_, path, value) => {
    const envelope = Either.getOrThrow(parse(setPath(signedJson(), path, value)))
    expect(verifyEnvelopeSignature(envelope, publicKey)).toBe(false)
  })
})

describe("the envelope is a closed schema: unknown members are refused, not dropped", () => {
  const extras: ReadonlyArray<[string, ReadonlyArray<string>, string]> = [
    ["the envelope", ["debug"], ""],
    ["route", ["route", "region"], "/route"],
    ["metadata", ["metadata", "note"], "/metadata"]
  ]
  it.each(extras)("an unknown member of %s is refused as envelope-invalid, reported at its parent", (_, path, at) => {
    const error = refusal(setPath(signedJson(), path, "sk_live_secret-looking-value"))
    expect(error).toMatchObject({ reason: "envelope-invalid", problem: "unexpected-member", at })
    // Neither the member's name nor its value can reach an audit row through the error.
    expect(JSON.stringify(error)).not.toMatch(/sk_live|region|note|debug/)
  })

  it("closed whatever parse options a caller passes (the schema carries onExcessProperty: error)", () => {
    const lenient = Schema.decodeUnknownEither(Envelope, { onExcessProperty: "ignore" })
    expect(Either.isLeft(lenient({ ...signedJson(), debug: true }))).toBe(true)
    expect(Either.isLeft(lenient(setPath(signedJson(), ["route", "region"], "eu")))).toBe(true)
  })

  it("a missing member is refused with its path", () => {
    const { idempotencyKey: _, ...rest } = signedJson()
    expect(refusal(rest)).toMatchObject({ problem: "missing-member", at: "/idempotencyKey" })
  })

  const parts: ReadonlyArray<[string, Schema.Schema.Any, Record<string, unknown>]> = [
    ["Route", Route, unsignedJson().route as Record<string, unknown>],
    ["Metadata", Metadata, unsignedJson().metadata as Record<string, unknown>],
    ["UnsignedEnvelope", UnsignedEnvelopeSchema, unsignedJson()],
    ["EnvelopeHead", EnvelopeHead, signedJson()]
  ]
  it.each(parts)("%s, decoded on its own, is closed too whatever parse options a caller passes", (_, schema, value) => {
    const lenient = Schema.decodeUnknownEither(schema as Schema.Schema<unknown>, { onExcessProperty: "ignore" })
    expect(Either.isRight(lenient(value))).toBe(true)
    expect(Either.isLeft(lenient({ ...value, debug: true }))).toBe(true)
  })

  it("the refusal is an EnvelopeInvalid, catchable by its tag", () => {
    const refused = decodeEnvelope({ ...signedJson(), debug: true })
    expect(Either.flip(refused).pipe(Either.getOrThrow)._tag).toBe("EnvelopeInvalid")
    const caught = Effect.runSync(refused.pipe(
      Effect.map(() => "parsed"),
      Effect.catchTag("EnvelopeInvalid", (error) => Effect.succeed(error.problem))
    ))
    expect(caught).toBe("unexpected-member")
  })

  it("the published JSON Schema (the OpenAPI document's components) names the envelope and its closed parts", () => {
    const named = (schema: Schema.Schema.Any) => {
      const document = JSONSchema.make(schema as Schema.Schema<unknown>) as { $ref?: string; $defs?: Record<string, unknown> }
      return { $ref: document.$ref, defs: Object.keys(document.$defs ?? {}).sort() }
    }
    expect(named(Envelope)).toEqual({ $ref: "#/$defs/ControlPlaneEnvelope", defs: ["ControlPlaneEnvelope", "Int", "Metadata", "Route"] })
    expect(named(UnsignedEnvelopeSchema)).toEqual({ $ref: "#/$defs/UnsignedEnvelope", defs: ["Int", "Metadata", "Route", "UnsignedEnvelope"] })
    expect(named(EnvelopeHead)).toEqual({ $ref: "#/$defs/EnvelopeHead", defs: ["EnvelopeHead", "Int", "Route"] })
    const closed = (JSONSchema.make(Envelope) as { $defs: Record<string, { additionalProperties?: unknown }> }).$defs
    expect([closed.ControlPlaneEnvelope, closed.Route, closed.Metadata].map((d) => d?.additionalProperties)).toEqual([false, false, false])
  })
})

describe("EnvelopeHead: everything the verifier checks before the signature, the metadata left for step 4", () => {
  const decodeHead = Schema.decodeUnknownEither(EnvelopeHead, { onExcessProperty: "error", errors: "first" })

  it("parses the whole head and keeps the metadata as it came, undecoded", () => {
    const metadata = { kind: "task.deleted", anything: [1, { nested: true }] }
    const head = Either.getOrThrow(decodeHead({ ...signedJson(), metadata }))
    expect(head.metadata).toEqual(metadata)
    expect(head).toMatchObject({ eventId: "01J9Z3K6X8Q4M2N5P7R9T1V3W5", sequence: 42, keyId: "k1", route: { tenant: "acme" } })
  })

  it("still refuses the bounded identities and the signature's size", () => {
    expect(Either.isLeft(decodeHead({ ...signedJson(), eventId: "short" }))).toBe(true)
    expect(Either.isLeft(decodeHead({ ...signedJson(), signature: "" }))).toBe(true)
    const { keyId: _, ...withoutKeyId } = signedJson()
    expect(Either.isLeft(decodeHead(withoutKeyId))).toBe(true)
  })

  it("'every member is required': an envelope without metadata is refused at step 2 as missing-member at /metadata, whatever metadata may hold", () => {
    const { metadata: _, ...withoutMetadata } = signedJson()
    const error = Either.getLeft(decodeHead(withoutMetadata))
    expect(error._tag === "Some" && invalidAt(error.value)).toEqual({ problem: "missing-member", at: "/metadata" })
    expect(Either.isRight(decodeHead({ ...signedJson(), metadata: null }))).toBe(true)
  })
})

describe("signature: unpadded base64url of exactly 64 bytes, else signature-malformed (a separate decode step)", () => {
  const good = signEnvelope(unsigned(), privateKey).signature
  const cases: ReadonlyArray<[string, string, string]> = [
    ["padding", good + "==", "signature-padding"],
    ["`+` (standard alphabet)", "+" + good.slice(1), "signature-alphabet"],
    ["`/` (standard alphabet)", good.slice(0, 10) + "/" + good.slice(11), "signature-alphabet"],
    ["a space", good.slice(0, 85) + " ", "signature-alphabet"],
    ["too short", good.slice(0, 85), "signature-length"],
    ["too long", good + "A", "signature-length"],
    ["non-zero unused bits", good.slice(0, 85) + "B", "signature-non-canonical"]
  ]
  it.each(cases)("refused: %s", (_, signature, defect) => {
    const envelope = Either.getOrThrow(parse({ ...signedJson(), signature }))
    const malformed = Either.flip(decodeEnvelopeSignature(envelope)).pipe(Either.getOrThrow)
    expect(malformed).toMatchObject({ reason: "signature-malformed", defect })
    expect(verifyEnvelopeSignature(envelope, publicKey)).toBe(false)
  })

  it("the signature text is bounded (at most 128 characters) before anything else looks at it", () => {
    expect(refusal({ ...signedJson(), signature: "A".repeat(129) })).toMatchObject({ at: "/signature" })
    expect(refusal({ ...signedJson(), signature: "" })).toMatchObject({ at: "/signature" })
  })
})

describe("schemaVersion: the schema accepts integers 1..99; step 4 then requires 1", () => {
  it("2 parses and verifies, then is refused as schema-version-unsupported", () => {
    const envelope = Either.getOrThrow(parse(signedJson({ schemaVersion: 2 })))
    expect(verifyEnvelopeSignature(envelope, publicKey)).toBe(true)
    const refused = Either.flip(requireSupportedSchemaVersion(envelope)).pipe(Either.getOrThrow)
    expect(refused).toMatchObject({ _tag: "SchemaVersionUnsupported", reason: "schema-version-unsupported", schemaVersion: 2 })
    expect(Either.isRight(requireSupportedSchemaVersion(Either.getOrThrow(parse(signedJson()))))).toBe(true)
  })

  it.each([0, 1.5, 100, -1, "1", null, true])("refused at parse: %j", (schemaVersion) => {
    expect(refusal({ ...signedJson(), schemaVersion })).toMatchObject({ problem: "invalid-value", at: "/schemaVersion" })
  })
})

describe("every identity is bounded in length and character set", () => {
  const id64 = "a".repeat(64)
  const refused: ReadonlyArray<[string, ReadonlyArray<string>, unknown]> = [
    ["tenant too long (65)", ["route", "tenant"], "a" + id64],
    ["tenant upper case", ["route", "tenant"], "Acme"],
    ["tenant starting with -", ["route", "tenant"], "-acme"],
    ["tenant empty", ["route", "tenant"], ""],
    ["project with a dot", ["route", "project"], "web.site"],
    ["producer with a space", ["route", "producer"], "laptop 7"],
    ["producer with non-ASCII", ["route", "producer"], "lаptop"],
    ["keyId too long", ["keyId"], "k" + id64],
    ["keyId with a slash", ["keyId"], "k/1"],
    ["eventId too short (15)", ["eventId"], "A".repeat(15)],
    ["eventId too long (65)", ["eventId"], "A".repeat(65)],
    ["eventId with a dot", ["eventId"], "01J9Z3K6X8Q4M2N5.7R9T1"],
    ["idempotencyKey empty", ["idempotencyKey"], ""],
    ["idempotencyKey too long (129)", ["idempotencyKey"], "k".repeat(129)],
    ["idempotencyKey with a space", ["idempotencyKey"], "task 42"],
    ["sequence 0", ["sequence"], 0],
    ["sequence above 2^53-1", ["sequence"], 2 ** 53],
    ["sequence as a string", ["sequence"], "42"],
    ["metadata.kind outside the closed set", ["metadata", "kind"], "task.deleted"],
    ["metadata.subject upper case", ["metadata", "subject"], "Task-42"]
  ]
  it.each(refused)("refused: %s", (_, path, value) => {
    expect(refusal(setPath(signedJson(), path, value))).toMatchObject({ reason: "envelope-invalid" })
  })

  it("the bounds themselves are accepted: 64-character ids, 128-character keys, a UUID event id", () => {
    const envelope = setPath(
      setPath(setPath(signedJson(), ["route", "tenant"], id64), ["idempotencyKey"], "k".repeat(128)),
      ["eventId"],
      "0b9f5e0e-3c1a-4f5e-9a8b-7c6d5e4f3a2b"
    )
    expect(Either.isRight(parse(envelope))).toBe(true)
  })
})

describe("createdAt: RFC 3339 in UTC (`YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z`), a real date and time, at most 30 characters", () => {
  it.each<[string, string]>([
    ["with an offset", "2025-01-15T09:30:00+01:00"],
    ["without Z", "2025-01-15T09:30:00"],
    ["with a lower-case z", "2025-01-15T09:30:00z"],
    ["with 10 fraction digits", "2025-01-15T09:30:00.1234567890Z"],
    ["with anything before the date", "x2025-01-15T09:30:00Z"],
    ["with anything after the Z", "2025-01-15T09:30:00Zx"],
    ["February 30", "2025-02-30T09:30:00Z"],
    ["February 29 of a common year", "2025-02-29T09:30:00Z"],
    ["month 13", "2025-13-15T09:30:00Z"],
    ["month 00", "2025-00-15T09:30:00Z"],
    ["day 00", "2025-01-00T09:30:00Z"],
    ["day 32", "2025-01-32T09:30:00Z"],
    ["24:00", "2025-01-15T24:00:00Z"],
    ["minute 60", "2025-01-15T09:60:00Z"],
    ["a leap second (:60)", "2016-12-31T23:59:60Z"]
  ])("refused at /createdAt: %s", (_, createdAt) => {
    expect(refusal({ ...signedJson(), createdAt })).toMatchObject({ reason: "envelope-invalid", problem: "invalid-value", at: "/createdAt" })
  })

  it.each<[string, string]>([
    ["no fraction", "2025-01-15T09:30:00Z"],
    ["nine fraction digits (30 characters)", "2024-02-29T23:59:59.123456789Z"],
    ["February 29 of a leap year", "2000-02-29T00:00:00Z"],
    ["the last second of a year", "2025-12-31T23:59:59Z"],
    ["year 0000", "0000-01-01T00:00:00Z"],
    ["a two-digit year (0099), not read as 1999", "0099-12-31T12:00:00Z"],
    ["year 9999", "9999-12-31T23:59:59.9Z"]
  ])("accepted: %s", (_, createdAt) => {
    expect(Either.getOrThrow(parse(signedJson({ createdAt }))).createdAt).toBe(createdAt)
  })
})

describe("metadata.attributes: at most 32 entries, bounded keys, values of at most 1024 code points", () => {
  const attributes = (value: unknown) => setPath(signedJson(), ["metadata", "attributes"], value)
  const many = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "v"]))

  it("32 entries and a 1024-code-point value (astral characters count once) are accepted", () => {
    expect(Either.isRight(parse(attributes(many(32))))).toBe(true)
    expect(Either.isRight(parse(attributes({ title: "😀".repeat(1024) })))).toBe(true)
    expect(Either.isRight(parse(attributes({ title: "line one\n\tline two" })))).toBe(true)
  })

  it.each<[string, unknown]>([
    ["33 entries", many(33)],
    ["a 1025-code-point value", { title: "x".repeat(1025) }],
    ["1024 astral characters and one more (2049 UTF-16 units)", { title: "😀".repeat(1024) + "x" }],
    ["one character and 1024 astral ones", { title: "x" + "😀".repeat(1024) }],
    ["a key with upper case", { Title: "x" }],
    ["a key of 65 characters", { ["k".repeat(65)]: "x" }],
    ["a __proto__ key", JSON.parse("{\"__proto__\": \"x\"}")],
    ["a non-string value", { title: 1 }],
    ["a NUL character", { title: "a\u0000b" }],
    ["an escape character", { title: "\u001b[31mred" }],
    ["a DEL character", { title: "a\u007fb" }],
    ["a C1 next-line character (U+0085)", { title: "a\u0085b" }],
    ["a C1 control sequence introducer (U+009B)", { title: "\u009b31mred" }],
    ["a lone surrogate", { title: "\ud800" }]
  ])("refused: %s", (_, value) => {
    expect(refusal(attributes(value))).toMatchObject({ reason: "envelope-invalid" })
  })

  it("the first character after the C1 range (U+00A0, no-break space) is text", () => {
    expect(Either.isRight(parse(attributes({ title: "a\u00a0b" })))).toBe(true)
  })
})

describe("deep and wide values are refused in bounded time, by schema path only", () => {
  const nested = (depth: number) => {
    let value: unknown = "payload-marker"
    for (let i = 0; i < depth; i++) value = [value]
    return value
  }
  const timedRefusal = (value: unknown) => {
    const started = performance.now()
    const refused = refusal(value)
    return { refused, ms: performance.now() - started }
  }

  it.each<[string, ReadonlyArray<string>, unknown, string]>([
    ["a 20,000-deep metadata", ["metadata"], nested(20_000), "/metadata"],
    ["a 20,000-deep attribute value", ["metadata", "attributes", "title"], nested(20_000), "/metadata/attributes/title"],
    ["a 20,000-deep route", ["route"], nested(20_000), "/route"],
    ["a 200,000-item attribute value", ["metadata", "attributes", "title"], Array.from({ length: 200_000 }, () => 0), "/metadata/attributes/title"],
    ["200,000 attributes (counted before any is decoded)", ["metadata", "attributes"], Object.fromEntries(Array.from({ length: 200_000 }, (_, i) => [`a${i}`, "payload-marker"])), "/metadata/attributes"]
  ])("%s is envelope-invalid at its schema path, without formatting (or echoing) the value", (_, path, value, at) => {
    const { ms, refused } = timedRefusal(setPath(signedJson(), path, value))
    expect({ reason: refused.reason, problem: refused.problem, at: refused.at }).toEqual({ reason: "envelope-invalid", problem: "invalid-value", at })
    expect(JSON.stringify(refused)).not.toContain("payload-marker")
    expect(ms).toBeLessThan(2_000)
  })

  it("100,000 unknown members are one unexpected-member refusal at the top", () => {
    const wide = { ...signedJson(), ...Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`x${i}`, i])) }
    const { ms, refused } = timedRefusal(wide)
    expect({ problem: refused.problem, at: refused.at }).toEqual({ problem: "unexpected-member", at: "" })
    expect(ms).toBeLessThan(2_000)
  })
})

describe("signingBytes", () => {
  it("leaves out `signature` and is the same for the signed and the unsigned envelope", () => {
    const envelope = Either.getOrThrow(parse(signedJson()))
    expect(Buffer.from(signingBytes(envelope)).equals(Buffer.from(signingBytes(unsigned())))).toBe(true)
    expect(new TextDecoder().decode(signingBytes(envelope))).not.toContain("signature")
    expect(unsignedJson()).not.toHaveProperty("signature")
  })

  it("signingText is the signed bytes as text: the RFC 8785 form without `signature`, members sorted, no whitespace", () => {
    const expected = "{\"createdAt\":\"2025-01-15T09:30:00.123Z\",\"eventId\":\"01J9Z3K6X8Q4M2N5P7R9T1V3W5\"," +
      "\"idempotencyKey\":\"task-42:proposal:1\",\"keyId\":\"k1\"," +
      "\"metadata\":{\"attributes\":{\"priority\":\"high\",\"title\":\"Réviser\"},\"kind\":\"task.proposed\",\"subject\":\"task-42\"}," +
      "\"route\":{\"producer\":\"laptop-7\",\"project\":\"website\",\"tenant\":\"acme\"}," +
      "\"schemaVersion\":1,\"sequence\":42,\"type\":\"controlplane/v1\"}"
    expect(signingText(unsigned())).toBe(expected)
    expect(signingText(Either.getOrThrow(parse(signedJson())))).toBe(expected)
    expect(Buffer.from(signingBytes(unsigned())).equals(Buffer.from(expected, "utf8"))).toBe(true)
  })

  it("a value that bypassed the schema and has no RFC 8785 form (a lone surrogate) is a thrown defect naming where, never the value", () => {
    const valid = unsigned()
    const bypassed = { ...valid, metadata: { ...valid.metadata, attributes: { title: "sk_live\ud800" } } } as UnsignedEnvelope
    expect(() => signingBytes(bypassed)).toThrowError(
      new Error("envelope has no RFC 8785 form at /metadata/attributes/title (canonical-lone-surrogate)")
    )
    expect(() => signingBytes(bypassed)).not.toThrowError(/sk_live/)
  })
})

describe("the envelope's own checks explain a refusal by the documented rule, never by quoting the value", () => {
  // What a formatted parse error (for example the issues of an HTTP decode error) would show.
  const issues = (schema: Schema.Schema.Any, value: unknown) =>
    ParseResult.ArrayFormatter.formatErrorSync(
      Either.flip(Schema.decodeUnknownEither(schema as Schema.Schema<unknown>)(value)).pipe(Either.getOrThrow)
    )
  const secrets = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, "sk_live"]))

  it.each<[string, Schema.Schema.Any, unknown, string]>([
    ["eventId", EventId, "sk_live.0123456789", "eventId must match ^[A-Za-z0-9_-]{16,64}$"],
    ["idempotencyKey", IdempotencyKey, "sk_live secret", "idempotencyKey must match ^[A-Za-z0-9._:-]{1,128}$"],
    ["createdAt", CreatedAt, "2025-02-30T09:30:00Z", "createdAt must be an RFC 3339 UTC time ending in Z"],
    ["an attribute key", AttributeKey, "Sk_live", "attribute keys must match ^[a-z][a-z0-9_.-]{0,63}$"],
    [
      "an attribute value",
      AttributeValue,
      "sk_live\u0000",
      "attribute values are at most 1024 code points, no control characters but tab and LF"
    ],
    ["the attributes", Attributes, secrets(33), "at most 32 attributes"]
  ])("%s", (_, schema, value, message) => {
    const found = issues(schema, value)
    expect(found.map((issue) => issue.message)).toEqual([message])
    expect(JSON.stringify(found)).not.toMatch(/sk_live|Sk_live|2025-02-30/)
  })
})

describe("invalidAt: the first problem, at a path made only of schema member names", () => {
  const firstProblem = (schema: Schema.Schema.Any, value: unknown) =>
    invalidAt(
      Either.flip(Schema.decodeUnknownEither(schema as Schema.Schema<unknown>, { errors: "first" })(value)).pipe(
        Either.getOrThrow
      )
    )

  it("a failed check is the value's own problem: a path the check names (client text) is not followed", () => {
    const atMostOne = Schema.Record({ key: Schema.String, value: Schema.String }).pipe(
      Schema.filter((record) => {
        const [, second] = Object.keys(record)
        return second === undefined || { path: [second], message: "one entry at most" }
      })
    )
    const schema = Schema.Struct({ attributes: atMostOne })
    expect(firstProblem(schema, { attributes: { a: "x", sk_live_key: "y" } })).toEqual({
      problem: "invalid-value",
      at: "/attributes"
    })
  })

  it("a check over a whole struct that fails inside a member reports that member", () => {
    const checked = Schema.Struct({ route: Route, sequence: Schema.Number }).pipe(Schema.filter(() => true))
    expect(firstProblem(checked, { route: { tenant: "Acme", project: "p", producer: "q" }, sequence: 1 })).toEqual({
      problem: "invalid-value",
      at: "/route/tenant"
    })
  })

  it("a multi-key path (as a transformation may report) is followed key by key", () => {
    const nested = Schema.transformOrFail(Schema.Unknown, Schema.Unknown, {
      decode: (input, _, ast) =>
        ParseResult.fail(new ParseResult.Pointer(["metadata", "attributes"], input, new ParseResult.Type(ast, input))),
      encode: ParseResult.succeed
    })
    expect(firstProblem(Schema.Struct({ body: nested }), { body: {} })).toEqual({
      problem: "invalid-value",
      at: "/body/metadata/attributes"
    })
  })

  it("a member a synchronous parse cannot decode (Forbidden) is invalid-value at that member", () => {
    const later = Schema.transformOrFail(Schema.String, Schema.String, {
      decode: (text) => Effect.delay(Effect.succeed(text), "1 millis"),
      encode: ParseResult.succeed
    })
    expect(firstProblem(Schema.Struct({ a: Schema.String, b: later }), { a: "x", b: "y" })).toEqual({
      problem: "invalid-value",
      at: "/b"
    })
  })
})
