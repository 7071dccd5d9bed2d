import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
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

  it.effect("PASSWORD_RESET_TOKEN_KEY is 32 bytes in base64 or base64url; anything else is refused naming the variable, never the value", () =>
    Effect.gen(function* () {
      const read = (value: string) =>
        Effect.either(Effect.withConfigProvider(ResetTokenKeyConfig, ConfigProvider.fromMap(new Map([["PASSWORD_RESET_TOKEN_KEY", value]]))))
      const bytes = randomBytes(32)
      for (const good of [bytes.toString("base64"), bytes.toString("base64url")]) expect(Either.isRight(yield* read(good))).toBe(true)
      for (const bad of ["", "short", randomBytes(31).toString("base64"), randomBytes(33).toString("base64"), `${bytes.toString("base64")}x`]) {
        const result = yield* read(bad)
        expect(Either.isLeft(result)).toBe(true)
        const message = String(Either.isLeft(result) ? result.left : "")
        expect(message).toContain("PASSWORD_RESET_TOKEN_KEY")
        if (bad.length > 8) expect(message).not.toContain(bad)
      }
    }))
})
