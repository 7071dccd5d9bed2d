import { describe, expect, it } from "@effect/vitest"
import { BunFileSystem } from "@effect/platform-bun"
import { FetchHttpClient } from "@effect/platform"
import { LoopbackProvider } from "@delivery/testing"
import { ConfigProvider, Effect, Layer, Redacted } from "effect"
import { createPublicKey } from "node:crypto"
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import {
  apiKeyToken,
  baseUrl,
  decodeSeed,
  DEFAULT_URL,
  deviceToken,
  operatorClient,
  operatorToken,
  passwordFrom,
  signingKey,
  tenantClient
} from "../src/cli/Environment.ts"
import { generateKeyFile, publicKeyFromFile } from "../src/cli/KeyFile.ts"
import { keyPair } from "./support/World.ts"

// The command line's settings and key files (docs/operations.md, "Command line"): every setting comes from
// the environment, a missing or invalid one is a usage error naming the variable and never quoting its value;
// a key file keeps the seed and gives out only the public key.

const withEnv = (env: Record<string, string>) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.withConfigProvider(effect, ConfigProvider.fromMap(new Map(Object.entries(env))))

/** The usage error's message, or "ok" when the setting was accepted. */
const messageOf = <A, R>(effect: Effect.Effect<A, { readonly message: string }, R>) =>
  Effect.match(effect, { onFailure: (error) => error.message, onSuccess: () => "ok" })

const SEED = keyPair().seed

describe("settings from the environment", () => {
  it.effect("DELIVERY_URL defaults to the local backend; any http:// or https:// URL without credentials is taken, anything else is invalid without its value quoted", () =>
    Effect.gen(function* () {
      expect(yield* baseUrl.pipe(withEnv({}))).toBe(DEFAULT_URL)
      expect(DEFAULT_URL).toBe("http://127.0.0.1:3000")
      expect(yield* baseUrl.pipe(withEnv({ DELIVERY_URL: "https://delivery.example:8443/base" }))).toBe("https://delivery.example:8443/base")
      expect(yield* baseUrl.pipe(withEnv({ DELIVERY_URL: "http://10.0.0.1" }))).toBe("http://10.0.0.1")
      for (const bad of ["ftp://delivery.example", "delivery.example", "", "http://ops:pw-secret@delivery.example", "http://ops@delivery.example", "http://:pw-secret@delivery.example"]) {
        const message = yield* messageOf(baseUrl.pipe(withEnv({ DELIVERY_URL: bad })))
        expect(message).toBe("DELIVERY_URL is invalid: an http:// or https:// URL without credentials")
      }
    }))

  it.effect("each bearer (OPERATOR_TOKEN, DELIVERY_DEVICE_TOKEN, DELIVERY_API_KEY) is redacted when set, 'not set' when absent, and 'invalid' when empty", () =>
    Effect.gen(function* () {
      const bearers = [["OPERATOR_TOKEN", operatorToken], ["DELIVERY_DEVICE_TOKEN", deviceToken], ["DELIVERY_API_KEY", apiKeyToken]] as const
      for (const [name, setting] of bearers) {
        const value = yield* setting.pipe(withEnv({ [name]: "tok-secret" }))
        expect(Redacted.isRedacted(value)).toBe(true)
        expect(Redacted.value(value)).toBe("tok-secret")
        expect(String(value)).not.toContain("tok-secret")
        expect(yield* messageOf(setting.pipe(withEnv({})))).toBe(`${name} is not set`)
        expect(yield* messageOf(setting.pipe(withEnv({ [name]: "" })))).toBe(`${name} is invalid: it is empty`)
      }
    }))

  it("a seed is exactly 32 bytes of unpadded base64url in its one spelling: padding, the other alphabet's characters and other lengths are refused", () => {
    expect(decodeSeed(SEED)).toEqual(new Uint8Array(Buffer.from(SEED, "base64url")))
    expect(decodeSeed(SEED)).toHaveLength(32)
    expect(decodeSeed(`${SEED}=`)).toBeUndefined()
    const zeros = Buffer.alloc(32).toString("base64url")
    expect(decodeSeed(zeros)).toEqual(new Uint8Array(32))
    // 43 characters carry 258 bits: a last character with its two spare bits set names the same bytes.
    expect(decodeSeed(`${zeros.slice(0, -1)}B`)).toBeUndefined()
    const ff = Buffer.alloc(32, 0xff)
    expect(decodeSeed(ff.toString("base64").replace(/=+$/, ""))).toBeUndefined()
    expect(decodeSeed(Buffer.alloc(31).toString("base64url"))).toBeUndefined()
    expect(decodeSeed(Buffer.alloc(33).toString("base64url"))).toBeUndefined()
    expect(decodeSeed("")).toBeUndefined()
  })

  it.effect("DELIVERY_SIGNING_KEY is the private key of its seed; a malformed one is invalid without its value quoted, an absent one not set", () =>
    Effect.gen(function* () {
      const pair = keyPair()
      const key = yield* signingKey.pipe(withEnv({ DELIVERY_SIGNING_KEY: pair.seed }))
      expect(key.type).toBe("private")
      expect(createPublicKey(key).export({ format: "jwk" }).x).toBe(Buffer.from(pair.publicKey).toString("base64url"))
      const malformed = yield* messageOf(signingKey.pipe(withEnv({ DELIVERY_SIGNING_KEY: `${pair.seed}=` })))
      expect(malformed).toBe("DELIVERY_SIGNING_KEY is invalid: unpadded base64url of a 32-byte Ed25519 seed")
      expect(malformed).not.toContain(pair.seed)
      expect(yield* messageOf(signingKey.pipe(withEnv({})))).toBe("DELIVERY_SIGNING_KEY is not set")
    }))

  it.effect("--password-env names a variable (letters, digits, underscores, not a digit first) whose value is the password; anything else is refused before it is read", () =>
    Effect.gen(function* () {
      const env = withEnv({ OPS_PASSWORD: "correct horse battery", _P1: "another one", "1ST": "x", "A-B": "x" })
      expect(Redacted.value(yield* passwordFrom("OPS_PASSWORD").pipe(env))).toBe("correct horse battery")
      expect(Redacted.value(yield* passwordFrom("_P1").pipe(env))).toBe("another one")
      for (const bad of ["1ST", "A-B", "", " OPS_PASSWORD", "OPS_PASSWORD "]) {
        expect(yield* messageOf(passwordFrom(bad).pipe(env))).toBe("--password-env takes the name of an environment variable")
      }
      expect(yield* messageOf(passwordFrom("UNSET_PASSWORD").pipe(env))).toBe("UNSET_PASSWORD is not set")
    }))

  it.scoped("the operator client sends OPERATOR_TOKEN to DELIVERY_URL, the tenant client DELIVERY_API_KEY; each needs its variables", () =>
    Effect.gen(function* () {
      expect(yield* messageOf(operatorClient.pipe(withEnv({ DELIVERY_API_KEY: "k" })))).toBe("OPERATOR_TOKEN is not set")
      expect(yield* messageOf(operatorClient.pipe(withEnv({ OPERATOR_TOKEN: "t", DELIVERY_URL: "nope" })))).toMatch(/^DELIVERY_URL is invalid/)
      expect(yield* messageOf(tenantClient.pipe(withEnv({ OPERATOR_TOKEN: "t" })))).toBe("DELIVERY_API_KEY is not set")
      expect(yield* messageOf(tenantClient.pipe(withEnv({ DELIVERY_API_KEY: "k", DELIVERY_URL: "nope" })))).toMatch(/^DELIVERY_URL is invalid/)

      const server = yield* LoopbackProvider
      const operator = yield* operatorClient.pipe(withEnv({ OPERATOR_TOKEN: "op-token", DELIVERY_URL: server.url }))
      const tenant = yield* tenantClient.pipe(withEnv({ DELIVERY_API_KEY: "api-key", DELIVERY_URL: server.url }))
      // The loopback's empty 200 does not decode; only the requests matter here.
      yield* Effect.either(operator.provisioning.listTenants({ urlParams: {} }))
      yield* Effect.either(tenant.identity.whoami())
      const requests = yield* server.requests
      expect(requests.map((r) => [r.path, r.headers.authorization])).toEqual([
        ["/operator/tenants", "Bearer op-token"],
        ["/api/whoami", "Bearer api-key"]
      ])
    }).pipe(Effect.provide(Layer.merge(FetchHttpClient.layer, LoopbackProvider.Default))))
})

describe("signing key files", () => {
  const dir = () => mkdtempSync(join(tmpdir(), "delivery-keys-"))
  const Fs = BunFileSystem.layer

  it.effect("generate writes {tenant: {keyId: seed}} to a new file of mode 0600 and returns the public key, which is the one the file gives back", () =>
    Effect.gen(function* () {
      const path = join(dir(), "acme.json")
      const { publicKey } = yield* generateKeyFile(path, "acme", "k1")
      expect(statSync(path).mode & 0o777).toBe(0o600)
      const stored = JSON.parse(readFileSync(path, "utf8")) as Record<string, Record<string, string>>
      expect(Object.keys(stored)).toEqual(["acme"])
      expect(Object.keys(stored.acme!)).toEqual(["k1"])
      expect(decodeSeed(stored.acme!.k1!)).toHaveLength(32)
      expect(publicKey).toMatch(/^[A-Za-z0-9_-]{43}$/)
      const read = yield* publicKeyFromFile(path, "acme", "k1")
      expect(Buffer.from(read).toString("base64url")).toBe(publicKey)
    }).pipe(Effect.provide(Fs)))

  it.effect("an existing file is never overwritten; an unwritable path is named", () =>
    Effect.gen(function* () {
      const path = join(dir(), "acme.json")
      writeFileSync(path, "keep me")
      expect(yield* messageOf(generateKeyFile(path, "acme", "k1"))).toBe(`${path} exists: a key file is never overwritten`)
      expect(readFileSync(path, "utf8")).toBe("keep me")
      const nowhere = join(dir(), "missing", "acme.json")
      expect(yield* messageOf(generateKeyFile(nowhere, "acme", "k1"))).toBe(`cannot write ${nowhere}`)
    }).pipe(Effect.provide(Fs)))

  it.effect("reading a public key: an unreadable file, a file that is not a key file (with the parser's reason) and a key the file lacks are each a usage error, never the seed", () =>
    Effect.gen(function* () {
      const folder = dir()
      const missing = join(folder, "none.json")
      expect(yield* messageOf(publicKeyFromFile(missing, "acme", "k1"))).toBe(`cannot read the key file ${missing}`)
      const garbage = join(folder, "garbage.json")
      writeFileSync(garbage, JSON.stringify({ acme: { k1: "short" } }))
      expect(yield* messageOf(publicKeyFromFile(garbage, "acme", "k1"))).toBe(`${garbage} is not a signing key file (bad-private-key)`)
      const path = join(folder, "acme.json")
      writeFileSync(path, JSON.stringify({ acme: { k1: SEED }, other: { k2: keyPair().seed } }))
      expect(yield* messageOf(publicKeyFromFile(path, "acme", "k2"))).toBe(`${path} has no key k2 of tenant acme`)
      expect(yield* messageOf(publicKeyFromFile(path, "other", "k1"))).toBe(`${path} has no key k1 of tenant other`)
      const other = yield* publicKeyFromFile(path, "other", "k2")
      expect(other).toHaveLength(32)
      const message = yield* messageOf(publicKeyFromFile(path, "acme", "k9"))
      expect(message).not.toContain(SEED)
    }).pipe(Effect.provide(Fs)))
})
