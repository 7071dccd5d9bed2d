import { Canonical } from "@delivery/core"
import { Either } from "effect"
import { type KeyObject, sign, verify } from "node:crypto"
import { SignatureMalformed } from "./Domain.ts"
import { decodeSignature, encodeBase64Url, publicKeyFromRaw } from "./Ed25519.ts"
import type { Envelope, UnsignedEnvelope } from "./Envelope.ts"

// The signing rule of `controlplane/v1`: the signed bytes are the UTF-8 bytes of the RFC 8785
// (JCS) form of the envelope object without its `signature` member; the signature is Ed25519
// (pure, RFC 8032) over those bytes, carried as unpadded base64url.

const withoutSignature = ({ signature: _, ...unsigned }: UnsignedEnvelope & { readonly signature?: string }): UnsignedEnvelope =>
  unsigned

/**
 * The exact bytes an envelope's signature covers; a `signature` member, if present, is left out.
 * The schemas admit only JSON with an RFC 8785 form (safe integers, no lone surrogates), so
 * a failure here means a value bypassed them: a defect, thrown.
 */
export const signingBytes = (envelope: UnsignedEnvelope | Envelope): Uint8Array =>
  Either.getOrThrowWith(
    Canonical.canonicalBytes(withoutSignature(envelope)),
    (error) => new Error(`envelope has no RFC 8785 form at ${error.path} (${error.code})`)
  )

/** The canonical signed text, for documentation and debugging (what `signingBytes` encodes as UTF-8). */
export const signingText = (envelope: UnsignedEnvelope | Envelope): string => new TextDecoder().decode(signingBytes(envelope))

/**
 * The envelope's identity for audit rows and duplicate detection: SHA-256 (lower-case hex) of the
 * signed bytes. It never depends on the signature text, so one event has one identity.
 */
export const eventIdentity = (envelope: UnsignedEnvelope | Envelope): string => Canonical.sha256Hex(signingBytes(envelope))

/** Signs with a private key held in memory (tests, the documented example, the environment key source). */
export const signEnvelope = (unsigned: UnsignedEnvelope, privateKey: KeyObject): Envelope => ({
  ...withoutSignature(unsigned),
  signature: encodeBase64Url(sign(null, signingBytes(unsigned), privateKey))
})

/** The signature text as 64 bytes, or the stable reason it is not a signature at all. */
export const decodeEnvelopeSignature = (envelope: Envelope): Either.Either<Uint8Array, SignatureMalformed> =>
  Either.mapLeft(decodeSignature(envelope.signature), (defect) =>
    new SignatureMalformed({ reason: "signature-malformed", defect }))

const toKeyObject = (publicKey: KeyObject | Uint8Array): KeyObject =>
  publicKey instanceof Uint8Array ? publicKeyFromRaw(publicKey) : publicKey

/** Verifies raw signature bytes over the envelope's signed bytes. */
export const verifySignatureBytes = (
  envelope: UnsignedEnvelope | Envelope,
  signature: Uint8Array,
  publicKey: KeyObject | Uint8Array
): boolean => verify(null, signingBytes(envelope), toKeyObject(publicKey), signature)

/**
 * Pure check: true only for a well-formed signature by `publicKey` over this envelope.
 * A malformed signature is simply false here; `decodeEnvelopeSignature` says why.
 */
export const verifyEnvelopeSignature = (envelope: Envelope, publicKey: KeyObject | Uint8Array): boolean =>
  Either.match(decodeEnvelopeSignature(envelope), {
    onLeft: () => false,
    onRight: (signature) => verifySignatureBytes(envelope, signature, publicKey)
  })
