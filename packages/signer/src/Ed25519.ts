import { Either, ParseResult, Schema } from "effect"
import { createPrivateKey, createPublicKey, type KeyObject } from "node:crypto"
import { RawPublicKey, type SignatureDefect } from "./Domain.ts"

export const SIGNATURE_BYTES = 64
export const PUBLIC_KEY_BYTES = 32
export const SEED_BYTES = 32

const ALPHABET = /^[A-Za-z0-9_-]*$/
const CHAR_VALUE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

/** Characters of unpadded base64url for `bytes` bytes: RFC 4648 section 5 without `=`. */
export const base64UrlLength = (bytes: number) => Math.ceil((bytes * 8) / 6)

/**
 * Strict unpadded base64url for exactly `bytes` bytes. Buffer.from(text, "base64url") is
 * lenient (it skips foreign characters and padding), and two texts decoding to the same bytes
 * would give one signature two spellings; so every deviation is refused with its own code.
 */
export const decodeBase64Url = (text: string, bytes: number): Either.Either<Uint8Array, SignatureDefect> => {
  if (text.includes("=")) return Either.left("signature-padding")
  if (!ALPHABET.test(text)) return Either.left("signature-alphabet")
  if (text.length !== base64UrlLength(bytes)) return Either.left("signature-length")
  // The last character carries `unused` zero bits (0, 2 or 4); any other value is a second spelling of
  // the same bytes. With no unused bit the test is `% 1`, which every character passes.
  const unused = text.length * 6 - bytes * 8
  if (CHAR_VALUE.indexOf(text[text.length - 1]!) % (1 << unused) !== 0) {
    return Either.left("signature-non-canonical")
  }
  return Either.right(new Uint8Array(Buffer.from(text, "base64url")))
}

export const encodeBase64Url = (bytes: Uint8Array): string => Buffer.from(bytes).toString("base64url")

/** The 64-byte signature carried on an envelope (86 characters). */
export const decodeSignature = (text: string) => decodeBase64Url(text, SIGNATURE_BYTES)

// PKCS#8 wrapping of an Ed25519 seed (RFC 8410): this fixed prefix, then the 32 seed bytes.
const PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex")
export const PKCS8_BYTES = PKCS8_PREFIX.length + SEED_BYTES

/** The private key for a 32-byte RFC 8032 seed. Throws on a wrong length: callers check it first. */
export const privateKeyFromSeed = (seed: Uint8Array): KeyObject => {
  if (seed.length !== SEED_BYTES) throw new RangeError("an Ed25519 seed is 32 bytes")
  return createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: "der", type: "pkcs8" })
}

/** The seed inside a 48-byte PKCS#8 DER Ed25519 key, or undefined when it is not one. */
export const seedFromPkcs8 = (der: Uint8Array): Uint8Array | undefined =>
  der.length === PKCS8_BYTES && Buffer.from(der.subarray(0, PKCS8_PREFIX.length)).equals(PKCS8_PREFIX)
    ? der.subarray(PKCS8_PREFIX.length)
    : undefined

export const publicKeyFromRaw = (raw: Uint8Array): KeyObject =>
  createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: encodeBase64Url(raw) }, format: "jwk" })

/**
 * Raw 32-byte public key of an Ed25519 key object (private or public): the last 32 bytes of its
 * SubjectPublicKeyInfo DER (RFC 8410), which only a public key object exports.
 */
export const rawPublicKey = (key: KeyObject): Uint8Array => {
  const publicKey = key.type === "private" ? createPublicKey(key) : key
  return new Uint8Array(publicKey.export({ format: "der", type: "spki" }).subarray(-PUBLIC_KEY_BYTES))
}

export const sameBytes = (a: Uint8Array, b: Uint8Array) => Buffer.from(a).equals(Buffer.from(b))

/**
 * A raw Ed25519 public key on the wire: strict unpadded base64url of 32 bytes (43 characters).
 * Ready for the operator's key-registration route.
 */
export const Ed25519PublicKey = Schema.transformOrFail(
  Schema.String.pipe(Schema.maxLength(64)),
  RawPublicKey,
  {
    // Stryker disable next-line BooleanLiteral: `strict` only types the decode and encode functions; nothing changes at run time
    strict: true,
    decode: (text, _, ast) =>
      Either.match(decodeBase64Url(text, PUBLIC_KEY_BYTES), {
        onLeft: (defect) =>
          ParseResult.fail(
            new ParseResult.Type(ast, text, `public key must be unpadded base64url of 32 bytes (${defect.replace("signature-", "")})`)
          ),
        onRight: (bytes) => ParseResult.succeed(RawPublicKey.make(bytes))
      }),
    encode: (bytes) => ParseResult.succeed(encodeBase64Url(bytes))
  }
).annotations({ identifier: "Ed25519PublicKey" })
