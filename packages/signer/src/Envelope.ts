import { Either, ParseResult, Schema } from "effect"
import { KeyId, ProducerId, ProjectId, SchemaVersionUnsupported, SubjectId, TenantId } from "./Domain.ts"

// The `controlplane/v1` envelope: docs/controlplane-envelope.md describes every bound below,
// and test/EnvelopeExample.test.ts keeps that page and this schema in step.
// Every struct is closed (unknown members are refused, never dropped), whatever parse
// options a caller passes: a dropped member would change the signed bytes.

const closed = { parseOptions: { onExcessProperty: "error" } } as const

/** Producer-chosen event id: 16..64 of `A-Z a-z 0-9 _ -`; UUIDs (36) and ULIDs (26) fit. */
export const EventId = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9_-]{16,64}$/, { message: () => "eventId must match ^[A-Za-z0-9_-]{16,64}$" }),
  // Stryker disable next-line StringLiteral: a brand is a compile-time tag; at run time it only shows in the schema's printed description
  Schema.brand("EventId")
)
export type EventId = typeof EventId.Type

export const IdempotencyKey = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9._:-]{1,128}$/, { message: () => "idempotencyKey must match ^[A-Za-z0-9._:-]{1,128}$" }),
  // Stryker disable next-line StringLiteral: a brand is a compile-time tag; at run time it only shows in the schema's printed description
  Schema.brand("IdempotencyKey")
)
export type IdempotencyKey = typeof IdempotencyKey.Type

/** The producer's sequence number on its stream: 1..2^53-1, so every JSON parser reads it exactly. */
// Stryker disable next-line StringLiteral: a brand is a compile-time tag; at run time it only shows in the schema's printed description
export const Sequence = Schema.Int.pipe(Schema.between(1, Number.MAX_SAFE_INTEGER), Schema.brand("Sequence"))
export type Sequence = typeof Sequence.Type

const RFC3339_UTC = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,9})?Z$/

// The regex bounds the shape; this rejects dates that do not exist (02-30, 24:00, leap second 60).
// A field out of range carries into the next larger one (02-30 becomes 03-02, 24:00 the next day), so a
// time is real exactly when it reads back as written. setUTCFullYear, unlike Date.UTC, keeps years 0000-0099.
const isRealInstant = (text: string) => {
  const m = RFC3339_UTC.exec(text)
  if (m === null) return false
  const [y, mo, d, h, mi, s] = m.slice(1).map(Number) as [number, number, number, number, number, number]
  const date = new Date(0)
  date.setUTCFullYear(y, mo - 1, d)
  date.setUTCHours(h, mi, s)
  return date.toISOString().slice(0, 19) === m[0].slice(0, 19)
}

/** RFC 3339 in UTC with `Z`, optional 1..9 fraction digits; kept as text because it is signed as text. */
export const CreatedAt = Schema.String.pipe(
  Schema.maxLength(30),
  Schema.filter(isRealInstant, { message: () => "createdAt must be an RFC 3339 UTC time ending in Z" }),
  // Stryker disable next-line StringLiteral: a brand is a compile-time tag; at run time it only shows in the schema's printed description
  Schema.brand("CreatedAt")
)
export type CreatedAt = typeof CreatedAt.Type

/** Parsing admits 1..99 so that a newer producer gets `schema-version-unsupported` (step 4), not a parse error. */
export const SchemaVersion = Schema.Int.pipe(Schema.between(1, 99))

export const SUPPORTED_SCHEMA_VERSION = 1

/** The closed set of control-plane kinds; adding one is a reviewed change of this schema and the doc. */
export const MetadataKind = Schema.Literal("task.proposed", "task.updated", "task.cancelled")
export type MetadataKind = typeof MetadataKind.Type

export const AttributeKey = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9_.-]{0,63}$/, { message: () => "attribute keys must match ^[a-z][a-z0-9_.-]{0,63}$" })
)

export const MAX_ATTRIBUTES = 32
export const MAX_ATTRIBUTE_CODE_POINTS = 1024

// Lone surrogates have no UTF-8 form (so no RFC 8785 form); control characters other than
// tab and line feed (C0, DEL and C1: every Unicode `Cc`) only ever smuggle something into a log
// or a terminal (U+0085 is a line break to some, U+009B a terminal's escape introducer).
const FORBIDDEN_TEXT = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F]|\p{Surrogate}/u

export const AttributeValue = Schema.String.pipe(
  Schema.filter(
    // A code point is one or two UTF-16 units, so 2049 units always hold more than 1024 code points: counting
    // the first 2049 decides, and a huge value is never spread into an array.
    (value) =>
      // Stryker disable next-line MethodExpression: counting the whole value decides the same; the slice only bounds the work
      Array.from(value.slice(0, 2 * MAX_ATTRIBUTE_CODE_POINTS + 1)).length <= MAX_ATTRIBUTE_CODE_POINTS &&
      !FORBIDDEN_TEXT.test(value),
    {
      message: () =>
        `attribute values are at most ${MAX_ATTRIBUTE_CODE_POINTS} code points, no control characters but tab and LF`
    }
  )
)

// Counted before any member is decoded: a body of 100,000 attributes is refused for its size, not after
// 100,000 key and value checks.
const atMostMaxAttributes = Schema.Object.pipe(
  Schema.filter((object) => {
    let members = 0
    for (const _ in object) if (++members > MAX_ATTRIBUTES) return false
    return true
  }, { message: () => `at most ${MAX_ATTRIBUTES} attributes` })
)

const AttributeRecord = Schema.Record({ key: AttributeKey, value: AttributeValue })

// Stryker disable next-line ObjectLiteral,BooleanLiteral: `strict` only types compose's two sides; compose ignores its options at run time
export const Attributes = Schema.compose(atMostMaxAttributes, AttributeRecord, { strict: false })

export const Metadata = Schema.Struct({
  kind: MetadataKind,
  subject: SubjectId,
  attributes: Attributes
}).annotations({ ...closed, identifier: "Metadata" })
export type Metadata = typeof Metadata.Type

export const Route = Schema.Struct({
  tenant: TenantId,
  project: ProjectId,
  producer: ProducerId
}).annotations({ ...closed, identifier: "Route" })
export type Route = typeof Route.Type

/**
 * Bounded here only so parsing stays cheap; the exact encoding (unpadded base64url of 64 bytes,
 * 86 characters) is checked while verifying (step 3), where it is refused as `signature-malformed`.
 */
export const SignatureText = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(128))

const unsignedFields = {
  type: Schema.Literal("controlplane/v1"),
  route: Route,
  eventId: EventId,
  idempotencyKey: IdempotencyKey,
  sequence: Sequence,
  keyId: KeyId,
  createdAt: CreatedAt,
  schemaVersion: SchemaVersion,
  metadata: Metadata
}

/** The envelope without `signature`: exactly the object whose RFC 8785 form is signed. */
export const UnsignedEnvelope = Schema.Struct(unsignedFields).annotations({ ...closed, identifier: "UnsignedEnvelope" })
export type UnsignedEnvelope = typeof UnsignedEnvelope.Type

export const Envelope = Schema.Struct({ ...unsignedFields, signature: SignatureText }).annotations({
  ...closed,
  identifier: "ControlPlaneEnvelope"
})
export type Envelope = typeof Envelope.Type

/**
 * The envelope with its metadata left undecoded: what a verifier checks before the signature
 * (spec 000 steps 2-3), the closed metadata waiting for step 4.
 */
// Present, whatever it holds: a struct member that accepts `undefined` would also accept a missing member, and
// a missing `metadata` is step 2's `missing-member`, not a metadata problem for step 4.
const UndecodedMetadata = Schema.Unknown.pipe(Schema.filter((value) => value !== undefined))

export const EnvelopeHead = Schema.Struct({ ...unsignedFields, metadata: UndecodedMetadata, signature: SignatureText })
  .annotations({ ...closed, identifier: "EnvelopeHead" })
export type EnvelopeHead = typeof EnvelopeHead.Type

/**
 * The envelope failed to parse. `at` is a JSON pointer made only of schema member names and
 * validated attribute keys (an unexpected member is reported at its parent), so the error can
 * go into an audit row without quoting anything the client sent.
 */
export class EnvelopeInvalid extends Schema.TaggedError<EnvelopeInvalid>()("EnvelopeInvalid", {
  reason: Schema.Literal("envelope-invalid"),
  problem: Schema.Literal("unexpected-member", "missing-member", "invalid-value"),
  at: Schema.String
}) {}

/** What is wrong and where: the details of `envelope-invalid` and `metadata-invalid`. */
export interface InvalidAt {
  readonly problem: "unexpected-member" | "missing-member" | "invalid-value"
  readonly at: string
}

/**
 * The first problem of a failed parse, found by walking the issue tree. Never through a formatter: its
 * messages print the received value, which costs as much as the value is large and recurses as deep as
 * it is nested (a 20,000-deep array overflowed the stack). The walk follows the schema, not the value,
 * so its length is bounded by the schema's depth. Paths are schema member names and attribute keys that
 * passed their pattern; an unexpected member, the one name nobody validated, is reported at its parent.
 */
export const invalidAt = (error: ParseResult.ParseError): InvalidAt => {
  const path: Array<PropertyKey> = []
  let issue: ParseResult.ParseIssue = error.issue
  for (;;) {
    switch (issue._tag) {
      case "Pointer":
        if (Array.isArray(issue.path)) path.push(...issue.path)
        else path.push(issue.path as PropertyKey)
        issue = issue.issue
        continue
      case "Composite":
        issue = Array.isArray(issue.issues) ? issue.issues[0]! : issue.issues as ParseResult.ParseIssue
        continue
      case "Refinement":
        // A failed predicate is the value's own problem, whatever it failed inside.
        if (issue.kind === "Predicate") return { problem: "invalid-value", at: pointer(path) }
        issue = issue.issue
        continue
      case "Transformation":
        issue = issue.issue
        continue
      case "Unexpected":
        return { problem: "unexpected-member", at: pointer(path.slice(0, -1)) }
      case "Missing":
        return { problem: "missing-member", at: pointer(path) }
      case "Type":
      case "Forbidden":
        return { problem: "invalid-value", at: pointer(path) }
    }
  }
}

const pointer = (path: ReadonlyArray<PropertyKey>) => path.map((p) => "/" + String(p)).join("")

const toInvalid = (error: ParseResult.ParseError): EnvelopeInvalid =>
  new EnvelopeInvalid({ reason: "envelope-invalid", ...invalidAt(error) })

const options = { onExcessProperty: "error", errors: "first" } as const
const decodeEnvelopeEither = Schema.decodeUnknownEither(Envelope, options)
const decodeUnsignedEither = Schema.decodeUnknownEither(UnsignedEnvelope, options)

/** Steps 2 and 4 (shape): a closed parse of a received JSON value. Returns an Either, which is also an Effect. */
export const decodeEnvelope = (input: unknown): Either.Either<Envelope, EnvelopeInvalid> =>
  Either.mapLeft(decodeEnvelopeEither(input), toInvalid)

export const decodeUnsignedEnvelope = (input: unknown): Either.Either<UnsignedEnvelope, EnvelopeInvalid> =>
  Either.mapLeft(decodeUnsignedEither(input), toInvalid)

/** Step 4 of spec 000: only version 1 is understood, though 1..99 parse. */
export const requireSupportedSchemaVersion = <E extends UnsignedEnvelope>(
  envelope: E
): Either.Either<E, SchemaVersionUnsupported> =>
  envelope.schemaVersion === SUPPORTED_SCHEMA_VERSION
    ? Either.right(envelope)
    : Either.left(
      new SchemaVersionUnsupported({ reason: "schema-version-unsupported", schemaVersion: envelope.schemaVersion })
    )
