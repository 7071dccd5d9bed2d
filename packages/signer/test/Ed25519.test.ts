import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { createPrivateKey, generateKeyPairSync } from "node:crypto"
import {
  decodeBase64Url,
  encodeBase64Url,
  privateKeyFromSeed,
  publicKeyFromRaw,
  rawPublicKey,
  seedFromPkcs8
} from "../src/Ed25519.ts"
import { keyPair, seedOf } from "./fixtures.ts"

const pkcs8Of = (seed: Uint8Array) =>
  new Uint8Array(privateKeyFromSeed(seed).export({ format: "der", type: "pkcs8" }))

describe("strict unpadded base64url: the unused bits of the last character are zero", () => {
  // 1 byte is 2 characters with 4 unused bits; 2 bytes are 3 characters with 2 unused bits.
  it.each<[string, number, string, ReadonlyArray<number> | string]>([
    ["1 byte, last character 16 (Q): its low 4 bits are zero", 1, "AQ", [0x01]],
    ["1 byte, last character 48 (w)", 1, "_w", [0xff]],
    ["1 byte, last character 1 (B)", 1, "AB", "signature-non-canonical"],
    ["1 byte, last character 8 (I)", 1, "AI", "signature-non-canonical"],
    ["2 bytes, last character 4 (E)", 2, "AAE", [0x00, 0x01]],
    ["2 bytes, last character 2 (C)", 2, "AAC", "signature-non-canonical"],
    ["3 bytes: no unused bit, every last character is canonical", 3, "AAAB", [0x00, 0x00, 0x01]]
  ])("%s", (_, bytes, text, expected) => {
    const decoded = decodeBase64Url(text, bytes)
    if (typeof expected === "string") {
      expect(decoded).toEqual(Either.left(expected))
    } else {
      expect(Either.map(decoded, (value) => Array.from(value))).toEqual(Either.right(expected))
    }
  })
})

describe("Ed25519 key forms: the 32-byte seed, its 48-byte PKCS#8 DER, the raw 32-byte public key", () => {
  it("privateKeyFromSeed refuses anything but 32 bytes with a RangeError", () => {
    for (const length of [0, 31, 33, 48]) {
      expect(() => privateKeyFromSeed(new Uint8Array(length))).toThrow(new RangeError("an Ed25519 seed is 32 bytes"))
    }
  })

  it("seedFromPkcs8 returns the seed of a 48-byte Ed25519 PKCS#8 key, and undefined for any other DER", () => {
    const der = pkcs8Of(seedOf(1))
    expect(der.length).toBe(48)
    expect(Array.from(seedFromPkcs8(der)!)).toEqual(Array.from(seedOf(1)))
    // The right prefix with a byte too many or too few is not an Ed25519 PKCS#8 key.
    expect(seedFromPkcs8(new Uint8Array([...der, 0]))).toBeUndefined()
    expect(seedFromPkcs8(der.subarray(0, 47))).toBeUndefined()
    // An X25519 key has the same length and another algorithm identifier.
    const x25519 = new Uint8Array(generateKeyPairSync("x25519").privateKey.export({ format: "der", type: "pkcs8" }))
    expect(x25519.length).toBe(48)
    expect(seedFromPkcs8(x25519)).toBeUndefined()
  })

  it("rawPublicKey gives the same 32 bytes for a private key and for its public key object", () => {
    const { privateKey, publicKey } = keyPair(1)
    expect(publicKey.length).toBe(32)
    expect(Array.from(rawPublicKey(privateKey))).toEqual(Array.from(publicKey))
    expect(Array.from(rawPublicKey(publicKeyFromRaw(publicKey)))).toEqual(Array.from(publicKey))
    // The RFC 8032 test vector 1: seed 9d61...7f60 has the public key d75a...511a.
    const seed = Buffer.from("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "hex")
    expect(Buffer.from(rawPublicKey(privateKeyFromSeed(seed))).toString("hex"))
      .toBe("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    expect(encodeBase64Url(rawPublicKey(createPrivateKey({ key: Buffer.from(pkcs8Of(seed)), format: "der", type: "pkcs8" }))))
      .toBe(encodeBase64Url(rawPublicKey(privateKeyFromSeed(seed))))
  })
})
