import { Canonical } from "@delivery/core"
import {
  decodeSignature,
  type Envelope,
  EnvelopeHead,
  Metadata,
  SUPPORTED_SCHEMA_VERSION
} from "@delivery/signer"
import { Either, ParseResult, Schema } from "effect"

// The envelope is parsed in stages so that each of spec 000's checks only sees what it needs and a
// refusal costs no more than its own stage: route and bounded identities (step 2) before any key or
// signature work (step 3), schema version and the closed metadata (step 4) only for signed bytes.
// All functions here are pure; EnvelopeInbox decides what each outcome costs (audit, status).

export interface Invalid {
  readonly problem: "unexpected-member" | "missing-member" | "invalid-value"
  readonly at: string
}

const utf8 = new TextDecoder("utf-8", { fatal: true })
const utf8Encoder = new TextEncoder()

/** Before step 2: the body as a JSON value. Invalid UTF-8 is malformed too (it has no JSON reading). */
export const parseJson = (body: Uint8Array): Either.Either<unknown, "json-malformed"> => {
  try {
    return Either.right(JSON.parse(utf8.decode(body)))
  } catch {
    return Either.left("json-malformed")
  }
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * Step 2, first half: the route names the verified tenant. Only a string that differs from the verified
 * tenant is a mismatch (403); a route that is not even shaped like one is left to the bounded parse (422).
 */
export const routeNamesTenant = (json: unknown, tenant: string): boolean | "unshaped" => {
  const route = isObject(json) ? json.route : undefined
  const claimed = isObject(route) ? route.tenant : undefined
  return typeof claimed === "string" ? claimed === tenant : "unshaped"
}

/** Everything but the metadata payload, closed at the top level; metadata waits for step 4. */
export const Head = EnvelopeHead
export type Head = typeof Head.Type

const decodeHeadEither = Schema.decodeUnknownEither(Head, { onExcessProperty: "error", errors: "first" })

const pointer = (path: ReadonlyArray<PropertyKey>) => path.map((p) => "/" + String(p)).join("")

// Only member names from the schema reach `at` (an unexpected member is reported at its parent),
// so the refusal never quotes what the client sent.
const toInvalid = (error: ParseResult.ParseError): Invalid => {
  const issue = ParseResult.ArrayFormatter.formatErrorSync(error)[0]
  const path = issue?.path ?? []
  if (issue?._tag === "Unexpected") return { problem: "unexpected-member", at: pointer(path.slice(0, -1)) }
  return { problem: issue?._tag === "Missing" ? "missing-member" : "invalid-value", at: pointer(path) }
}

/** Step 2, second half: bounded identities (route, event id, idempotency key, sequence, key id, time). */
export const decodeHead = (json: unknown): Either.Either<Head, Invalid> => Either.mapLeft(decodeHeadEither(json), toInvalid)

export interface SignedBytes {
  readonly bytes: Uint8Array
  /** The same bytes as text: the RFC 8785 form of the envelope without `signature`. */
  readonly text: string
  /** SHA-256 (hex) of `bytes`: the event identity of audit rows and duplicate detection. */
  readonly eventIdentity: string
  readonly signature: Uint8Array
}

/**
 * Step 3, before the key lookup: the RFC 8785 bytes of the envelope without `signature` (exactly what
 * `signingBytes` of @delivery/signer computes) and the decoded signature. The metadata is still
 * unvalidated here, so a value without an RFC 8785 form (a lone surrogate) is refused as invalid.
 */
export const signedBytes = (
  json: Record<string, unknown>,
  head: Head
): Either.Either<SignedBytes, { readonly malformed: string } | Invalid> => {
  const signature = decodeSignature(head.signature)
  if (Either.isLeft(signature)) return Either.left({ malformed: signature.left })
  const { signature: _, ...unsigned } = json
  return Either.match(Canonical.canonicalString(unsigned), {
    onLeft: (error) => Either.left({ problem: "invalid-value" as const, at: error.path }),
    onRight: (text) => {
      const bytes = utf8Encoder.encode(text)
      return Either.right({ bytes, text, eventIdentity: Canonical.sha256Hex(bytes), signature: signature.right })
    }
  })
}

const decodeMetadataEither = Schema.decodeUnknownEither(Metadata, { onExcessProperty: "error", errors: "first" })

/** Step 4: only schema version 1 is understood; then the closed metadata payload. */
export const requireVersionAndMetadata = (
  json: Record<string, unknown>,
  head: Head
): Either.Either<Envelope, "schema-version-unsupported" | Invalid> => {
  if (head.schemaVersion !== SUPPORTED_SCHEMA_VERSION) return Either.left("schema-version-unsupported")
  // The rest of the envelope passed in step 2; only the metadata is left to decode.
  return Either.match(decodeMetadataEither(json.metadata), {
    onLeft: (error) => {
      const invalid = toInvalid(error)
      return Either.left({ ...invalid, at: `/metadata${invalid.at}` })
    },
    onRight: (metadata) => Either.right({ ...head, metadata })
  })
}

// RFC 8785 sorts members by name, and the closed envelope's last member is always `type`, whose value
// is fixed; `signature` sorts right before it.
const TYPE_MEMBER = ',"type":"controlplane/v1"}'

/**
 * What the payload table keeps: the whole envelope in RFC 8785 form, signature included. It is built from
 * the signed text (no second canonicalization): removing `"signature"` from it gives the signed bytes back.
 */
export const storedEnvelope = (signed: SignedBytes, envelope: Envelope): string => {
  if (!signed.text.endsWith(TYPE_MEMBER)) throw new Error("the signed text of a controlplane/v1 envelope ends with its type")
  return `${signed.text.slice(0, -TYPE_MEMBER.length)},"signature":${JSON.stringify(envelope.signature)}${TYPE_MEMBER}`
}
