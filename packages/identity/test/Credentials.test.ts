import { describe, expect, it } from "@effect/vitest"
import type { HttpServerRequest } from "@effect/platform"
import { Effect, Option, Redacted } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { requireBearerHeader } from "../src/BearerHeader.ts"
import { materialOfRow, presentedKeyMaterial } from "../src/KeyMaterial.ts"
import { checkPassword, passwordMaxLength, passwordMinLength } from "../src/Password.ts"
import * as Token from "../src/Token.ts"

// The credential grammar and its bounds, without storage: what a presented token, header or password must look like
// before any lookup or hash is spent on it (spec 000 step 1: fail closed on anything unknown).

const lookupId = () => randomBytes(12).toString("hex")
const secret = () => randomBytes(32).toString("base64url")
const tokenOf = (kind: string) => `${kind}_${lookupId()}_${secret()}`
const sha256 = (text: string) => createHash("sha256").update(text, "utf8").digest()

/** A request carrying only an Authorization header, as the bearer middlewares read it. */
const requestWith = (authorization: string | undefined) =>
  ({ headers: authorization === undefined ? {} : { authorization } }) as unknown as HttpServerRequest.HttpServerRequest

describe("opaque tokens", () => {
  it("a token is exactly <kind>_<24 hex>_<43 base64url>: characters before or after it make it malformed, not a token with garbage around it", () => {
    for (const kind of ["board", "agent", "device", "session"] as const) {
      const id = lookupId()
      const key = secret()
      const token = `${kind}_${id}_${key}`
      expect(Token.parse(token)).toEqual(Option.some({ kind, lookupId: id, secret: key }))
      expect(Token.parse(`x${token}`)).toEqual(Option.none())
      expect(Token.parse(`${token}x`)).toEqual(Option.none())
    }
    // Within the length bound, so only the grammar can refuse them.
    const board = tokenOf("board")
    expect(board.length + 2).toBeLessThanOrEqual(Token.maxTokenLength)
    for (const bad of [`xx${board}`, `${board}==`, ` ${board}`, `${board}\n`, board.toUpperCase()]) {
      expect([bad, Token.parse(bad)]).toEqual([bad, Option.none()])
    }
  })

  it("the longest well-formed token (a session's, maxTokenLength characters) parses; one character more is refused", () => {
    const session = tokenOf("session")
    expect(session).toHaveLength(Token.maxTokenLength)
    expect(Option.isSome(Token.parse(session))).toBe(true)
    expect(Option.isNone(Token.parse(`${session}a`))).toBe(true)
  })

  it("only SHA-256 of the secret is kept, and a secret matches only its own hash; a stored hash of another length is a mismatch, not an error", () => {
    const generated = Token.generate("device")
    const parsed = Option.getOrThrow(Token.parse(generated.token))
    expect(generated.secretHash).toEqual(sha256(parsed.secret))
    expect(Token.matches(parsed.secret, generated.secretHash)).toBe(true)
    expect(Token.matches(secret(), generated.secretHash)).toBe(false)
    expect(Token.matches(parsed.secret, generated.secretHash.subarray(0, 31))).toBe(false)
    expect(Token.matches(parsed.secret, Buffer.concat([generated.secretHash, Buffer.from([0])]))).toBe(false)
    expect(Token.matches(parsed.secret, new Uint8Array(0))).toBe(false)
  })
})

describe("the Authorization header", () => {
  const reasonOf = (authorization: string | undefined) =>
    Effect.runSync(Effect.flip(requireBearerHeader(requestWith(authorization))).pipe(Effect.map((e) => e.reason)))

  it("no header or a blank one is missing; any scheme but Bearer (case-insensitive, at the start) is malformed; a Bearer header passes on to the token", () => {
    expect(reasonOf(undefined)).toBe("missing")
    for (const blank of ["", " ", "\t  "]) expect([blank, reasonOf(blank)]).toEqual([blank, "missing"])
    for (const other of ["Basic YTpi", "Basic bearer x", "Token bearer x", "bearerx", "Bearer"]) {
      expect([other, reasonOf(other)]).toEqual([other, "malformed"])
    }
    for (const ok of ["Bearer x", "bearer x", "BEARER x"]) {
      expect([ok, Effect.runSync(Effect.exit(requireBearerHeader(requestWith(ok))))._tag]).toEqual([ok, "Success"])
    }
  })
})

describe("passwords", () => {
  const outcome = (length: number) =>
    Effect.runSync(checkPassword(Redacted.make("p".repeat(length))).pipe(
      Effect.as("accepted"),
      Effect.catchTag("PasswordRejected", (e) => Effect.succeed(e.reason))
    ))

  it("a password is 12 to 1,024 characters: both bounds are accepted, one character outside either is refused with its reason", () => {
    expect([passwordMinLength, passwordMaxLength]).toEqual([12, 1024])
    expect(outcome(0)).toBe("too-short")
    expect(outcome(passwordMinLength - 1)).toBe("too-short")
    expect(outcome(passwordMinLength)).toBe("accepted")
    expect(outcome(passwordMaxLength)).toBe("accepted")
    expect(outcome(passwordMaxLength + 1)).toBe("too-long")
  })
})

describe("API key material (idle wake's key projection)", () => {
  it("a presented board or agent key gives its kind, lookup id and SHA-256 of its secret; a device or session token, or anything malformed, gives none", () => {
    for (const kind of ["board", "agent"] as const) {
      const id = lookupId()
      const key = secret()
      expect(presentedKeyMaterial(`${kind}_${id}_${key}`)).toEqual(
        Option.some({ kind, lookupId: id, secretHash: new Uint8Array(sha256(key)) })
      )
    }
    for (const other of [tokenOf("device"), tokenOf("session"), "board_nope", `x${tokenOf("board")}`, ""]) {
      expect([other, presentedKeyMaterial(other)]).toEqual([other, Option.none()])
    }
  })

  it("a stored key row becomes its material with the hash kept redacted", () => {
    const hash = new Uint8Array(sha256("secret"))
    const expiresAt = new Date("2026-12-31T00:00:00.000Z")
    const material = materialOfRow({ kind: "agent", lookup_id: "a".repeat(24), secret_hash: hash, expires_at: expiresAt })
    expect({ ...material, secretHash: Redacted.value(material.secretHash) }).toEqual({
      kind: "agent",
      lookupId: "a".repeat(24),
      secretHash: hash,
      expiresAt
    })
    expect(String(material.secretHash)).not.toContain(Buffer.from(hash).toString("hex"))
    expect(materialOfRow({ kind: "board", lookup_id: "b".repeat(24), secret_hash: hash, expires_at: null }).expiresAt).toBeNull()
  })
})
