import { Canonical } from "@delivery/core"
import {
  decodeSignature,
  type Envelope,
  EnvelopeHead,
  invalidAt,
  type InvalidAt,
  Metadata,
  SUPPORTED_SCHEMA_VERSION
} from "@delivery/signer"
import { Either, Option, Schema } from "effect"

// The envelope is parsed in stages so that each of spec 000's checks only sees what it needs and a
// refusal costs no more than its own stage: route and bounded identities (step 2) before any key or
// signature work (step 3), schema version and the closed metadata (step 4) only for signed bytes.
// All functions here are pure; EnvelopeInbox decides what each outcome costs (audit, status).
// None of them recurses over the received value or formats it into a message, so neither a deep nor a
// wide body can cost more than linear time or exhaust the stack (JSON.parse itself is iterative).

export type Invalid = InvalidAt

const utf8 = new TextDecoder("utf-8", { fatal: true })
const utf8Encoder = new TextEncoder()

/** Before step 2: the body as a JSON value, none when it is malformed. Invalid UTF-8 is malformed too (it has no JSON reading). */
export const parseJson = (body: Uint8Array): Option.Option<unknown> => {
  try {
    return Option.some(JSON.parse(utf8.decode(body)))
  } catch {
    return Option.none()
  }
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * Step 2, first half: the route names a tenant other than the verified one. Only a string that differs from
 * the verified tenant is a mismatch (403); a route that is not even shaped like one is left to the bounded
 * parse (422).
 */
export const routeNamesOtherTenant = (json: unknown, tenant: string): boolean => {
  const route = isObject(json) ? json.route : undefined
  const claimed = isObject(route) ? route.tenant : undefined
  return typeof claimed === "string" && claimed !== tenant
}

/** Everything but the metadata payload, closed at the top level; metadata waits for step 4. */
export const Head = EnvelopeHead
export type Head = typeof Head.Type

// Closed on its own (signer's schemas refuse unknown members whatever the parse options), first error only by default.
const decodeHeadEither = Schema.decodeUnknownEither(Head)

/** Step 2, second half: bounded identities (route, event id, idempotency key, sequence, key id, time). */
export const decodeHead = (json: unknown): Either.Either<Head, Invalid> => Either.mapLeft(decodeHeadEither(json), invalidAt)

export interface SignedBytes {
  readonly bytes: Uint8Array
  /** The same bytes as text: the RFC 8785 form of the envelope without `signature`. */
  readonly text: string
  /** SHA-256 (hex) of `bytes`: the event identity of audit rows and duplicate detection. */
  readonly eventIdentity: string
}

/** Step 3, first: the signature's text as 64 bytes, or how it is malformed (before any key lookup). */
export const signatureOf = (head: Head): Either.Either<Uint8Array, string> => decodeSignature(head.signature)

/**
 * Step 3, before the key lookup: the RFC 8785 bytes of the envelope without `signature` (exactly what
 * `signingBytes` of @delivery/signer computes). Everything but the metadata passed step 2, so the only
 * way to have no RFC 8785 form is a lone surrogate in the still undecoded metadata: then nothing can have
 * been signed, and `requireVersionAndMetadata` says why once the key lookup has had its say.
 */
export const signedBytes = (json: Record<string, unknown>): Either.Either<SignedBytes, "no-signed-bytes"> => {
  const { signature: _, ...unsigned } = json
  return Either.match(Canonical.canonicalString(unsigned), {
    onLeft: () => Either.left("no-signed-bytes" as const),
    onRight: (text) => {
      const bytes = utf8Encoder.encode(text)
      return Either.right({ bytes, text, eventIdentity: Canonical.sha256Hex(bytes) })
    }
  })
}

const decodeMetadataEither = Schema.decodeUnknownEither(Metadata)

/** Step 4: only schema version 1 is understood; then the closed metadata payload. */
export const requireVersionAndMetadata = (
  json: Record<string, unknown>,
  head: Head
): Either.Either<Envelope, "schema-version-unsupported" | Invalid> => {
  if (head.schemaVersion !== SUPPORTED_SCHEMA_VERSION) return Either.left("schema-version-unsupported")
  // The rest of the envelope passed in step 2; only the metadata is left to decode.
  return Either.match(decodeMetadataEither(json.metadata), {
    onLeft: (error) => {
      const invalid = invalidAt(error)
      return Either.left({ ...invalid, at: `/metadata${invalid.at}` })
    },
    onRight: (metadata) => Either.right({ ...head, metadata })
  })
}

// RFC 8785 sorts members by name, and the closed envelope's last member is always `type`, whose value
// is fixed (step 2 decoded every member but the metadata); `signature` sorts right before it.
const TYPE_MEMBER = ',"type":"controlplane/v1"}'

/**
 * What the payload table keeps: the whole envelope in RFC 8785 form, signature included. It is built from
 * the signed text (no second canonicalization): removing `"signature"` from it gives the signed bytes back.
 */
export const storedEnvelope = (signed: SignedBytes, envelope: Envelope): string => {
  return `${signed.text.slice(0, -TYPE_MEMBER.length)},"signature":${JSON.stringify(envelope.signature)}${TYPE_MEMBER}`
}
