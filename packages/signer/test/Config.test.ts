import { describe, expect, it } from "@effect/vitest"
import { ConfigError, ConfigProvider, Duration, Effect, Either, ParseResult, Schema } from "effect"
import { Ed25519PublicKey, encodeBase64Url, replayWindowConfig, SIGNER_CONFIG, SignerConfig } from "../src/index.ts"
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
      ["SIGNER_KEYS_FILE", false],
      ["SIGNER_PURGE_INTERVAL", false]
    ])
  })
})

describe("SignerConfig: every signer variable checked up front, each problem under its variable's name", () => {
  const load = (env: Record<string, string>) =>
    Effect.withConfigProvider(SignerConfig, ConfigProvider.fromMap(new Map(Object.entries(env))))
  const seed = encodeBase64Url(keyPair(1).seed)
  const problems = (error: ConfigError.ConfigError) =>
    ConfigError.reduceWithContext(error, undefined, {
      andCase: (_, left, right) => [...left, ...right],
      orCase: (_, left, right) => [...left, ...right],
      invalidDataCase: (_, path, message) => [`${path.join("_")}: ${message}`],
      missingDataCase: (_, path, message) => [`${path.join("_")}: ${message}`],
      sourceUnavailableCase: (_, path, message) => [`${path.join("_")}: ${message}`],
      unsupportedCase: (_, path, message) => [`${path.join("_")}: ${message}`]
    } satisfies ConfigError.ConfigErrorReducer<undefined, ReadonlyArray<string>>)

  it.effect("defaults: 90-day window, hourly purge, no key source; keys are summarized, never returned", () =>
    Effect.gen(function* () {
      const defaults = yield* load({})
      expect(Duration.toMillis(defaults.purgeInterval)).toBe(3_600_000)
      expect(defaults.keySource).toEqual({ source: "none" })
      expect((yield* load({ SIGNER_KEYS: `acme:k1:${seed}` })).keySource).toEqual({ source: "environment", keys: 1 })
      expect((yield* load({ SIGNER_KEYS_FILE: "/secure/keys.json" })).keySource).toEqual({ source: "file" })
    }))

  it.effect("bad values are all reported together, named, and the key list by reason and entry only (value not shown)", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(load({
        SIGNER_REPLAY_WINDOW: "0 seconds",
        SIGNER_PURGE_INTERVAL: "often",
        SIGNER_KEYS: `acme:k1:${seed},acme:k2:${seed.slice(0, 40)}`
      }))
      const lines = problems(error)
      expect(lines.map((line) => line.split(":")[0]).sort()).toEqual(["SIGNER_KEYS", "SIGNER_PURGE_INTERVAL", "SIGNER_REPLAY_WINDOW"])
      expect(lines).toContain("SIGNER_KEYS: Expected the key list documented for SIGNER_KEYS: bad-private-key at entry 1 (value not shown)")
      expect(JSON.stringify(error)).not.toContain(seed.slice(0, 16))
    }))

  it.effect("SIGNER_KEYS_FILE together with SIGNER_KEYS is refused up front", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(load({ SIGNER_KEYS_FILE: "/secure/keys.json", SIGNER_KEYS: `acme:k1:${seed}` }))
      expect(problems(error)).toEqual(["SIGNER_KEYS_FILE: refused together with SIGNER_KEYS: set only one"])
    }))
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

  const refusal = (value: unknown) =>
    Either.match(decode(value), { onLeft: ParseResult.TreeFormatter.formatErrorSync, onRight: () => "accepted" })

  it.each([["padding", text + "="], ["alphabet", text.replace(/^./, "+")], ["length", text.slice(0, 42)], [
    "non-canonical",
    text.slice(0, 42) + "B"
  ]])("each refusal names its defect, without the signature- prefix of the shared decoder: (%s)", (defect, value) => {
    expect(refusal(value)).toBe(
      `Ed25519PublicKey\n└─ Transformation process failure\n   └─ public key must be unpadded base64url of 32 bytes (${defect})`
    )
  })

  it("a value that is not a string is refused under the schema's name", () => {
    expect(refusal(42).split("\n")[0]).toBe("Ed25519PublicKey")
  })
})
