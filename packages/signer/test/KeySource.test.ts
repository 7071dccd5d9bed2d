import { afterAll, describe, expect, it } from "@effect/vitest"
import { BunContext } from "@effect/platform-bun"
import { Cause, ConfigProvider, Effect, Exit, Layer } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { encodeBase64Url, KeySource, KeySourceInvalid, SigningKeySource } from "../src/index.ts"
import { keyId, keyPair, tenant } from "./fixtures.ts"

const a = keyPair(1)
const b = keyPair(2)
const seedText = encodeBase64Url(a.seed)
const pkcs8Text = encodeBase64Url(a.privateKey.export({ format: "der", type: "pkcs8" }))
/** 48 bytes of PKCS#8 DER like an Ed25519 key's, for another algorithm (X25519): 64 characters too. */
const x25519Text = encodeBase64Url(generateKeyPairSync("x25519").privateKey.export({ format: "der", type: "pkcs8" }))

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
        `acme:k1:${pkcs8Text}`,
        // Surrounding whitespace (a trailing newline from a secret store, an indented JSON block) is not part of the list.
        `\n  ${JSON.stringify({ acme: { k1: seedText } })}\n`,
        ` acme:k1:${seedText}\n`
      ]) {
        const { publicKey, signature } = yield* withEnv({ SIGNER_KEYS: value })(signWith(KeySource.layerFromEnvironment))
        expect(Buffer.from(publicKey).equals(Buffer.from(a.publicKey))).toBe(true)
        expect(signature.length).toBe(64)
      }
    }))

  it.effect("signNow, for a source holding its keys in this process, makes sign's signature at once; an unknown key is KeyUnavailable returned, not thrown", () =>
    Effect.gen(function* () {
      const source = yield* withEnv({ SIGNER_KEYS: `acme:k1:${seedText}` })(Effect.provide(SigningKeySource, KeySource.layerFromEnvironment))
      const message = new TextEncoder().encode("hello")
      const signed = yield* source.sign(tenant("acme"), keyId("k1"), message)
      const now = source.signNow!(tenant("acme"), keyId("k1"), message)
      expect(now).toBeInstanceOf(Uint8Array)
      expect(Buffer.from(now as Uint8Array).equals(Buffer.from(signed))).toBe(true)
      expect(source.signNow!(tenant("acme"), keyId("k2"), message)).toMatchObject({ _tag: "KeyUnavailable", reason: "key-unavailable", tenant: "acme", keyId: "k2" })
      expect(source.signNow!(tenant("beta"), keyId("k1"), message)).toMatchObject({ _tag: "KeyUnavailable", tenant: "beta" })
    }))

  it.effect("SIGNER_KEYS unset means no private keys: signing is key-unavailable (a verify-only process)", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(withEnv({})(signWith(KeySource.layerFromEnvironment)))
      expect(error).toMatchObject({ _tag: "KeyUnavailable", reason: "key-unavailable", tenant: "acme", keyId: "k1" })
    }))

  const broken: ReadonlyArray<[string, string, KeySourceInvalid["reason"], number | undefined]> = [
    ["truncated JSON", `{"acme": {"k1": "${seedText}"`, "not-json", undefined],
    ["JSON of the wrong shape", JSON.stringify({ acme: [seedText] }), "bad-shape", undefined],
    ["JSON with null for a tenant's keys", JSON.stringify({ acme: null }), "bad-shape", undefined],
    ["JSON with a string for a tenant's keys", JSON.stringify({ acme: seedText }), "bad-shape", undefined],
    ["JSON with a number for a tenant's keys", JSON.stringify({ acme: 42 }), "bad-shape", undefined],
    ["JSON with a number for a key", JSON.stringify({ acme: { k1: seedText, k2: 42 } }), "bad-private-key", 1],
    ["JSON with null for a key", JSON.stringify({ acme: { k1: null } }), "bad-private-key", 0],
    ["a bad key id", `acme:k1:${seedText},acme:K2:${seedText}`, "bad-key-id", 1],
    ["a PKCS#8 key of another algorithm (X25519)", `acme:k1:${x25519Text}`, "bad-private-key", 0],
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
      // A refusal of the whole list names no entry at all (not even an undefined one).
      expect(error).toStrictEqual(new KeySourceInvalid(entry === undefined ? { source: "environment", reason } : { source: "environment", reason, entry }))
      const text = rendered(exit)
      expect(text).not.toContain(seedText.slice(0, 16))
      expect(text).not.toContain(seedText.slice(-16))
      expect(text).not.toContain(encodeBase64Url(b.seed).slice(0, 16))
    }))

  describe("SIGNER_KEYS_FILE (development): a JSON file outside the repository, readable by its owner only", () => {
    const dir = mkdtempSync(join(tmpdir(), "signer-keys-"))
    afterAll(() => rmSync(dir, { recursive: true, force: true }))
    const file = (name: string, mode: number, text = JSON.stringify({ acme: { k1: seedText } })) => {
      const path = join(dir, name)
      writeFileSync(path, text)
      chmodSync(path, mode)
      return path
    }
    const fromFile = (path: string) => KeySource.layerFromFile(path).pipe(Layer.provide(BunContext.layer))

    it.effect("a 0600 file loads, and so does a 0400 one whose JSON is surrounded by blank lines", () =>
      Effect.gen(function* () {
        const { publicKey } = yield* signWith(fromFile(file("keys.json", 0o600)))
        expect(Buffer.from(publicKey).equals(Buffer.from(a.publicKey))).toBe(true)
        const padded = file("padded.json", 0o400, `\n\n  ${JSON.stringify({ acme: { k1: seedText } })}\n`)
        expect(Buffer.from((yield* signWith(fromFile(padded))).publicKey).equals(Buffer.from(a.publicKey))).toBe(true)
      }))

    it.effect("the file takes the JSON spelling only: the compact spelling is refused as not-json", () =>
      Effect.gen(function* () {
        const exit = yield* Effect.exit(signWith(fromFile(file("compact.json", 0o600, `acme:k1:${seedText}\n`))))
        expect(Exit.isFailure(exit) && Cause.squash(exit.cause)).toStrictEqual(new KeySourceInvalid({ source: "file", reason: "not-json" }))
        expect(rendered(exit)).not.toContain(seedText.slice(0, 16))
      }))

    it.effect("a bad entry in the file is refused under source file, by reason and position only", () =>
      Effect.gen(function* () {
        const text = JSON.stringify({ acme: { k1: seedText, k2: seedText.slice(0, 40) } })
        const exit = yield* Effect.exit(signWith(fromFile(file("bad-entry.json", 0o600, text))))
        expect(Exit.isFailure(exit) && Cause.squash(exit.cause))
          .toStrictEqual(new KeySourceInvalid({ source: "file", reason: "bad-private-key", entry: 1 }))
        expect(rendered(exit)).not.toContain(seedText.slice(0, 16))
      }))

    it.effect.each<[string, () => string, string]>([
      ["group- or world-readable (0644)", () => file("open.json", 0o644), "file-permissions"],
      ["group-readable (0640)", () => file("group.json", 0o640), "file-permissions"],
      ["missing", () => join(dir, "missing.json"), "file-unreadable"],
      ["inside the repository", () => new URL("../package.json", import.meta.url).pathname, "file-inside-repository"],
      ["the repository's own directory", () => new URL("../../../", import.meta.url).pathname, "file-inside-repository"],
      // Only a regular file is a key file: a device (or a pipe) outside the repository is never read.
      ["a device (/dev/null, mode 0666)", () => "/dev/null", "file-unreadable"],
      ["a directory (the repository's parent)", () => new URL("../../../../", import.meta.url).pathname, "file-unreadable"]
    ])("refused: %s", ([, path, reason]) =>
      Effect.gen(function* () {
        const exit = yield* Effect.exit(signWith(fromFile(path())))
        expect(Exit.isFailure(exit) && Cause.squash(exit.cause)).toMatchObject({ source: "file", reason })
        expect(rendered(exit)).not.toContain(seedText.slice(0, 16))
      }))

    it.effect("a file at the repository's top whose name starts with '..' is inside the repository", () =>
      Effect.gen(function* () {
        const inside = new URL(`../../../..signer-keys-${process.pid}.json`, import.meta.url).pathname
        writeFileSync(inside, JSON.stringify({ acme: { k1: seedText } }), { mode: 0o600 })
        const exit = yield* Effect.exit(signWith(fromFile(inside))).pipe(Effect.ensuring(Effect.sync(() => rmSync(inside, { force: true }))))
        expect(Exit.isFailure(exit) && Cause.squash(exit.cause))
          .toStrictEqual(new KeySourceInvalid({ source: "file", reason: "file-inside-repository" }))
      }))

    it.effect("SIGNER_KEYS_FILE and SIGNER_KEYS together are refused", () =>
      Effect.gen(function* () {
        const layer = KeySource.layerFromConfig.pipe(Layer.provide(BunContext.layer))
        const env = { SIGNER_KEYS_FILE: file("both.json", 0o600), SIGNER_KEYS: `acme:k1:${seedText}` }
        const error = yield* Effect.flip(withEnv(env)(signWith(layer)))
        expect(error).toMatchObject({ reason: "both-sources-set" })
        const viaFile = yield* withEnv({ SIGNER_KEYS_FILE: file("only.json", 0o600) })(signWith(layer))
        expect(viaFile.signature.length).toBe(64)
        // Without SIGNER_KEYS_FILE, SIGNER_KEYS alone is the source.
        const viaEnvironment = yield* withEnv({ SIGNER_KEYS: `acme:k1:${seedText}` })(signWith(layer))
        expect(Buffer.from(viaEnvironment.publicKey).equals(Buffer.from(a.publicKey))).toBe(true)
      }))
  })
})
