import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Option, Redacted } from "effect"
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from "node:crypto"
import { generateResetToken, isResetToken, makeResetTokenKeys, ResetTokenKeyConfig } from "../src/ResetToken.ts"

// Reset tokens are kept only sealed (docs/reset-mail.md, "The token"): AES-256-GCM bound to the verification id,
// found by an HMAC under a second key derived from PASSWORD_RESET_TOKEN_KEY.

const keyText = () => randomBytes(32).toString("base64")
const keys = (text = keyText()) => makeResetTokenKeys(Redacted.make(text))
const id = "0b7f6a52-4a43-4d8e-9a57-0d1c2e3f4a5b"

describe("reset tokens", () => {
  it("a token is reset_ and 43 base64url characters (32 random bytes); anything else is not a token", () => {
    const token = Redacted.value(generateResetToken())
    expect(token).toMatch(/^reset_[A-Za-z0-9_-]{43}$/)
    expect(isResetToken(token)).toBe(true)
    expect(Redacted.value(generateResetToken())).not.toBe(token)
    for (const bad of ["", "reset_", `reset_${"a".repeat(42)}`, `reset_${"a".repeat(44)}`, `session_${"a".repeat(43)}`, `reset_${"a".repeat(42)}=`, ` ${token}`]) {
      expect([bad, isResetToken(bad)]).toEqual([bad, false])
    }
  })

  it("a dump alone does not reveal a token: the sealed value holds neither the token nor its secret, and opens only under the same key for the same verification", () => {
    const k = keys()
    const token = generateResetToken()
    const sealed = k.seal(token, id)
    const secret = Redacted.value(token).slice("reset_".length)
    for (const form of [sealed.toString("utf8"), sealed.toString("hex"), sealed.toString("base64"), sealed.toString("base64url")]) {
      expect(form).not.toContain(secret)
    }
    expect(Option.map(k.open(sealed, id), Redacted.value)).toEqual(Option.some(Redacted.value(token)))
    // A fresh nonce per seal: the same token never seals to the same bytes.
    expect(k.seal(token, id).equals(sealed)).toBe(false)
    // Moved to another row, tampered with, cut short, or under another key: it does not open.
    expect(Option.isNone(k.open(sealed, "7c1d0e7a-0000-4000-8000-000000000000"))).toBe(true)
    const tampered = Buffer.from(sealed)
    tampered[20] = tampered[20]! ^ 1
    expect(Option.isNone(k.open(tampered, id))).toBe(true)
    expect(Option.isNone(k.open(sealed.subarray(0, 28), id))).toBe(true)
    expect(Option.isNone(keys().open(sealed, id))).toBe(true)
  })

  it("the lookup is an HMAC under the key: the same token and key give the same 32 bytes, another key or token another value, and it does not contain the token", () => {
    const text = keyText()
    const token = generateResetToken()
    const lookup = keys(text).lookup(token)
    expect(lookup).toHaveLength(32)
    expect(keys(text).lookup(token).equals(lookup)).toBe(true)
    expect(keys().lookup(token).equals(lookup)).toBe(false)
    expect(keys(text).lookup(generateResetToken()).equals(lookup)).toBe(false)
    expect(lookup.toString("hex")).not.toContain(Buffer.from(Redacted.value(token)).toString("hex").slice(0, 16))
  })

  it("the construction is the documented one, so what one version sealed and indexed the next still opens and finds: HKDF-SHA256 of the key (no salt) with info `delivery/password-reset/seal/v1` seals with AES-256-GCM (nonce || ciphertext || tag, the verification id as associated data), with info `delivery/password-reset/lookup/v1` keys the HMAC-SHA256 lookup", () => {
    const master = randomBytes(32)
    const k = keys(master.toString("base64"))
    const derive = (info: string) => Buffer.from(hkdfSync("sha256", master, Buffer.alloc(0), info, 32))
    const token = generateResetToken()
    expect(k.lookup(token)).toEqual(createHmac("sha256", derive("delivery/password-reset/lookup/v1")).update(Redacted.value(token)).digest())
    const nonce = randomBytes(12)
    const cipher = createCipheriv("aes-256-gcm", derive("delivery/password-reset/seal/v1"), nonce)
    cipher.setAAD(Buffer.from(id))
    const body = Buffer.concat([cipher.update(Redacted.value(token)), cipher.final()])
    const sealed = Buffer.concat([nonce, body, cipher.getAuthTag()])
    expect(Option.map(k.open(sealed, id), Redacted.value)).toEqual(Option.some(Redacted.value(token)))
    // And the other way round: what this version seals opens under the documented construction.
    const ours = k.seal(token, id)
    const decipher = createDecipheriv("aes-256-gcm", derive("delivery/password-reset/seal/v1"), ours.subarray(0, 12))
    decipher.setAAD(Buffer.from(id))
    decipher.setAuthTag(ours.subarray(ours.length - 16))
    expect(Buffer.concat([decipher.update(ours.subarray(12, ours.length - 16)), decipher.final()]).toString()).toBe(Redacted.value(token))
  })

  it.effect("PASSWORD_RESET_TOKEN_KEY is 32 bytes in base64 or base64url; anything else is refused naming the variable, never the value", () =>
    Effect.gen(function* () {
      const read = (value: string) =>
        Effect.either(Effect.withConfigProvider(ResetTokenKeyConfig, ConfigProvider.fromMap(new Map([["PASSWORD_RESET_TOKEN_KEY", value]]))))
      const bytes = randomBytes(32)
      // Surrounding whitespace (a trailing newline from a file) is not part of the key.
      for (const good of [bytes.toString("base64"), bytes.toString("base64url"), ` ${bytes.toString("base64")}\n`]) {
        expect([good, Either.isRight(yield* read(good))]).toEqual([good, true])
      }
      // Both spellings of one key are one key: bytes whose base64 holds both `+` and `/` (base64url: `-` and `_`).
      const both = Buffer.from(Array.from({ length: 32 }, (_, i) => (i % 2 === 0 ? 0xfb : 0xff)))
      expect(both.toString("base64")).toMatch(/\+.*\/|\/.*\+/)
      const same = (text: string) => keys(text).lookup(Redacted.make("reset_x"))
      expect(same(both.toString("base64url"))).toEqual(same(`${both.toString("base64")}\n`))
      expect(same(both.toString("base64url"))).not.toEqual(same(bytes.toString("base64")))
      for (const bad of ["", "short", randomBytes(31).toString("base64"), randomBytes(33).toString("base64"), `${bytes.toString("base64")}x`, `!${bytes.toString("base64")}`, `a ${bytes.toString("base64")}`]) {
        const result = yield* read(bad)
        expect(Either.isLeft(result)).toBe(true)
        const message = String(Either.isLeft(result) ? result.left : "")
        expect(message).toContain("PASSWORD_RESET_TOKEN_KEY")
        expect(message).toContain("Expected 32 bytes as base64")
        if (bad.length > 8) expect(message).not.toContain(bad)
      }
    }))
})
