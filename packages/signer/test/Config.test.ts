import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Either, Schema } from "effect"
import { Ed25519PublicKey, encodeBase64Url, replayWindowConfig, SIGNER_CONFIG } from "../src/index.ts"
import { keyPair } from "./fixtures.ts"

const windowFrom = (env: Record<string, string>) =>
  Effect.withConfigProvider(replayWindowConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))

describe("SIGNER_REPLAY_WINDOW: the retention/replay window, 90 days by default (the inbox payload retention)", () => {
  it.effect("defaults to 90 days, accepts a duration, refuses zero and garbage", () =>
    Effect.gen(function* () {
      expect(Duration.toMillis(yield* windowFrom({}))).toBe(Duration.toMillis(Duration.days(90)))
      expect(Duration.toMillis(yield* windowFrom({ SIGNER_REPLAY_WINDOW: "7 days" }))).toBe(7 * 86_400_000)
      expect(Either.isLeft(yield* Effect.either(windowFrom({ SIGNER_REPLAY_WINDOW: "0 seconds" })))).toBe(true)
      expect(Either.isLeft(yield* Effect.either(windowFrom({ SIGNER_REPLAY_WINDOW: "soon" })))).toBe(true)
    }))

  it("every variable is listed with its default, and only SIGNER_KEYS is secret", () => {
    expect(SIGNER_CONFIG.map((entry) => [entry.name, entry.secret])).toEqual([
      ["SIGNER_REPLAY_WINDOW", false],
      ["SIGNER_KEYS", true],
      ["SIGNER_KEYS_FILE", false]
    ])
  })
})

describe("Ed25519PublicKey (the operator route's wire form): unpadded base64url of exactly 32 bytes", () => {
  const decode = Schema.decodeUnknownEither(Ed25519PublicKey)
  const text = encodeBase64Url(keyPair(1).publicKey)

  it("round-trips a raw public key", () => {
    const decoded = Either.getOrThrow(decode(text))
    expect(Buffer.from(decoded).equals(Buffer.from(keyPair(1).publicKey))).toBe(true)
    expect(Schema.encodeSync(Ed25519PublicKey)(decoded)).toBe(text)
  })

  it.each([["padded", text + "="], ["standard alphabet", text.replace(/^./, "+")], ["31 bytes", text.slice(0, 42)], [
    "non-canonical last character",
    text.slice(0, 42) + "B"
  ]])("refused: %s", (_, value) => {
    expect(Either.isLeft(decode(value))).toBe(true)
  })
})
