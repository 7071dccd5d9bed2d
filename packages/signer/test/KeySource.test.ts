import { afterAll, describe, expect, it } from "@effect/vitest"
import { BunContext } from "@effect/platform-bun"
import { Cause, ConfigProvider, Effect, Exit, Layer } from "effect"
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { encodeBase64Url, KeySource, SigningKeySource } from "../src/index.ts"
import { keyId, keyPair, tenant } from "./fixtures.ts"

const a = keyPair(1)
const b = keyPair(2)
const seedText = encodeBase64Url(a.seed)
const pkcs8Text = encodeBase64Url(a.privateKey.export({ format: "der", type: "pkcs8" }))

const withEnv = (env: Record<string, string>) => Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))

/** Builds the source from `layer` and signs one message with (acme, k1). */
const signWith = (layer: Layer.Layer<SigningKeySource, unknown>) =>
  Effect.gen(function* () {
    const source = yield* SigningKeySource
    const message = new TextEncoder().encode("hello")
    const signature = yield* source.sign(tenant("acme"), keyId("k1"), message)
    return { signature, publicKey: yield* source.publicKey(tenant("acme"), keyId("k1")) }
  }).pipe(Effect.provide(layer))

/** Everything a failure could show anywhere: its JSON, its string and the pretty cause. */
const rendered = <A, E>(exit: Exit.Exit<A, E>) =>
  Exit.match(exit, {
    onFailure: (cause) => [Cause.pretty(cause), JSON.stringify(Cause.squash(cause)), String(Cause.squash(cause))].join("\n"),
    onSuccess: () => "succeeded"
  })

describe("SigningKeySource: sign-by-reference, private keys never leave it", () => {
  it.effect("SIGNER_KEYS as JSON, compact and PKCS#8 all load the same key", () =>
    Effect.gen(function* () {
      for (const value of [
        JSON.stringify({ acme: { k1: seedText, k2: encodeBase64Url(b.seed) } }),
        `acme:k1:${seedText}, acme:k2:${encodeBase64Url(b.seed)}`,
        `acme:k1:${pkcs8Text}`
      ]) {
        const { publicKey, signature } = yield* withEnv({ SIGNER_KEYS: value })(signWith(KeySource.layerFromEnvironment))
        expect(Buffer.from(publicKey).equals(Buffer.from(a.publicKey))).toBe(true)
        expect(signature.length).toBe(64)
      }
    }))

  it.effect("SIGNER_KEYS unset means no private keys: signing is key-unavailable (a verify-only process)", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(withEnv({})(signWith(KeySource.layerFromEnvironment)))
      expect(error).toMatchObject({ _tag: "KeyUnavailable", reason: "key-unavailable", tenant: "acme", keyId: "k1" })
    }))

  const broken: ReadonlyArray<[string, string, string, number | undefined]> = [
    ["truncated JSON", `{"acme": {"k1": "${seedText}"`, "not-json", undefined],
    ["JSON of the wrong shape", JSON.stringify({ acme: [seedText] }), "bad-shape", undefined],
    ["a compact entry without a key id", `acme:${seedText}`, "bad-entry", 0],
    ["a bad tenant", `acme:k1:${seedText},ACME:k2:${seedText}`, "bad-tenant", 1],
    ["a key that is not base64url", `acme:k1:${seedText.slice(0, 40)}+/=`, "bad-private-key", 0],
    ["a key of the wrong length", `acme:k1:${seedText}AA`, "bad-private-key", 0],
    ["the same key id twice", `acme:k1:${seedText},acme:k1:${encodeBase64Url(b.seed)}`, "duplicate-key", 1]
  ]
  it.effect.each(broken)("a broken SIGNER_KEYS (%s) names the entry, never the key text", ([, value, reason, entry]) =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(withEnv({ SIGNER_KEYS: value })(signWith(KeySource.layerFromEnvironment)))
      expect(exit).toMatchObject({ _tag: "Failure" })
      const error = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(error).toMatchObject({ _tag: "KeySourceInvalid", source: "environment", reason })
      expect((error as { readonly entry?: number }).entry).toBe(entry)
      const text = rendered(exit)
      expect(text).not.toContain(seedText.slice(0, 16))
      expect(text).not.toContain(seedText.slice(-16))
      expect(text).not.toContain(encodeBase64Url(b.seed).slice(0, 16))
    }))

  describe("SIGNER_KEYS_FILE (development): a JSON file outside the repository, readable by its owner only", () => {
    const dir = mkdtempSync(join(tmpdir(), "signer-keys-"))
    afterAll(() => rmSync(dir, { recursive: true, force: true }))
    const file = (name: string, mode: number) => {
      const path = join(dir, name)
      writeFileSync(path, JSON.stringify({ acme: { k1: seedText } }))
      chmodSync(path, mode)
      return path
    }
    const fromFile = (path: string) => KeySource.layerFromFile(path).pipe(Layer.provide(BunContext.layer))

    it.effect("a 0600 file loads", () =>
      Effect.gen(function* () {
        const { publicKey } = yield* signWith(fromFile(file("keys.json", 0o600)))
        expect(Buffer.from(publicKey).equals(Buffer.from(a.publicKey))).toBe(true)
      }))

    it.effect.each<[string, () => string, string]>([
      ["group- or world-readable (0644)", () => file("open.json", 0o644), "file-permissions"],
      ["group-readable (0640)", () => file("group.json", 0o640), "file-permissions"],
      ["missing", () => join(dir, "missing.json"), "file-unreadable"],
      ["inside the repository", () => new URL("../package.json", import.meta.url).pathname, "file-inside-repository"]
    ])("refused: %s", ([, path, reason]) =>
      Effect.gen(function* () {
        const exit = yield* Effect.exit(signWith(fromFile(path())))
        expect(Exit.isFailure(exit) && Cause.squash(exit.cause)).toMatchObject({ source: "file", reason })
        expect(rendered(exit)).not.toContain(seedText.slice(0, 16))
      }))

    it.effect("SIGNER_KEYS_FILE and SIGNER_KEYS together are refused", () =>
      Effect.gen(function* () {
        const layer = KeySource.layerFromConfig.pipe(Layer.provide(BunContext.layer))
        const env = { SIGNER_KEYS_FILE: file("both.json", 0o600), SIGNER_KEYS: `acme:k1:${seedText}` }
        const error = yield* Effect.flip(withEnv(env)(signWith(layer)))
        expect(error).toMatchObject({ reason: "both-sources-set" })
        const viaFile = yield* withEnv({ SIGNER_KEYS_FILE: file("only.json", 0o600) })(signWith(layer))
        expect(viaFile.signature.length).toBe(64)
      }))
  })
})
