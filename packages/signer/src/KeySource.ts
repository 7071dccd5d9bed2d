import { FileSystem, Path } from "@effect/platform"
import { repositoryRootOf } from "@delivery/core"
import { Config, Context, Effect, Layer, Option, Redacted } from "effect"
import { sign as ed25519Sign } from "node:crypto"
import { type KeyId, KeySourceInvalid, KeyUnavailable, type TenantId } from "./Domain.ts"
import { privateKeyFromSeed, rawPublicKey } from "./Ed25519.ts"
import { parseKeyList, type PrivateKeyEntry } from "./KeyList.ts"

/**
 * Where tenant signing keys live. The port is sign-by-reference on purpose: a KMS or HSM never
 * exports a private key, so nothing here returns one. A KMS implementation satisfies it with
 *
 *   sign(tenant, keyId, bytes)  -> the KMS's Ed25519 (pure EdDSA, no pre-hash) signature over
 *                                  `bytes`, 64 raw bytes, for the KMS key mapped to (tenant, keyId);
 *   publicKey(tenant, keyId)    -> the raw 32-byte public key of that KMS key;
 *
 * and fails with `KeyUnavailable` (reason `key-unavailable`) for a key it does not hold or cannot
 * use right now, never with the provider's error text. Which key is active is not the source's
 * business: the registered keys in `signer_keys` decide, so verifiers and signer agree.
 */
export interface SigningKeySourceShape {
  readonly sign: (tenant: TenantId, keyId: KeyId, bytes: Uint8Array) => Effect.Effect<Uint8Array, KeyUnavailable>
  readonly publicKey: (tenant: TenantId, keyId: KeyId) => Effect.Effect<Uint8Array, KeyUnavailable>
  /**
   * `sign` made at once, for a source that holds its keys in this process: the same signature, or the same
   * `KeyUnavailable` returned rather than failed. A source that must ask elsewhere (a KMS) leaves it out, and its
   * callers use `sign`.
   */
  readonly signNow?: (tenant: TenantId, keyId: KeyId, bytes: Uint8Array) => Uint8Array | KeyUnavailable
}

export class SigningKeySource extends Context.Tag("@delivery/signer/SigningKeySource")<
  SigningKeySource,
  SigningKeySourceShape
>() {}

/** `SIGNER_KEYS`: the private-key list (see KeyList.ts for both spellings). Secret. */
export const SIGNER_KEYS = "SIGNER_KEYS"
/** `SIGNER_KEYS_FILE`: a development alternative, the path of a 0600 JSON file outside the repository. */
export const SIGNER_KEYS_FILE = "SIGNER_KEYS_FILE"

/** An in-process source over key objects; the objects stay in this closure and are never rendered. */
export const fromEntries = (entries: ReadonlyArray<PrivateKeyEntry>): SigningKeySourceShape => {
  const keys = new Map(entries.map((entry) => [`${entry.tenant}:${entry.keyId}`, entry.privateKey]))
  const find = (tenant: TenantId, keyId: KeyId) =>
    Option.match(Option.fromNullable(keys.get(`${tenant}:${keyId}`)), {
      onNone: () => Effect.fail(new KeyUnavailable({ reason: "key-unavailable", tenant, keyId })),
      onSome: Effect.succeed
    })
  const signNow = (tenant: TenantId, keyId: KeyId, bytes: Uint8Array) => {
    const privateKey = keys.get(`${tenant}:${keyId}`)
    return privateKey === undefined
      ? new KeyUnavailable({ reason: "key-unavailable", tenant, keyId })
      : new Uint8Array(ed25519Sign(null, bytes, privateKey))
  }
  return {
    // One step per signature (every webhook delivery signs once).
    sign: (tenant, keyId, bytes) =>
      Effect.suspend(() => {
        const signed = signNow(tenant, keyId, bytes)
        return signed instanceof KeyUnavailable ? Effect.fail(signed) : Effect.succeed(signed)
      }),
    signNow,
    publicKey: (tenant, keyId) => Effect.map(find(tenant, keyId), rawPublicKey)
  }
}

/** For tests: keys from 32-byte seeds. */
export const layerMemory = (
  keys: ReadonlyArray<{ readonly tenant: TenantId; readonly keyId: KeyId; readonly seed: Uint8Array }>
) =>
  Layer.succeed(
    SigningKeySource,
    fromEntries(keys.map(({ keyId, seed, tenant }) => ({ tenant, keyId, privateKey: privateKeyFromSeed(seed) })))
  )

/** A source that holds no key: for processes that only verify. */
// Stryker disable next-line ArrayDeclaration: a non-entry element maps to an undefined key object, which the lookup treats as absent
export const layerNone = Layer.succeed(SigningKeySource, fromEntries([]))

/**
 * Keys from `SIGNER_KEYS`, read as `Config.redacted` so the value is never rendered by config
 * errors or logs; unset means no keys. Parse failures name the entry's position only.
 */
export const fromEnvironment = Effect.gen(function* () {
  const secret = yield* Config.option(Config.redacted(SIGNER_KEYS))
  const text = Option.match(secret, { onNone: () => "", onSome: Redacted.value })
  const entries = yield* parseKeyList(text, "environment")
  return fromEntries(entries)
})

export const layerFromEnvironment = Layer.effect(SigningKeySource, fromEnvironment)

/** The repository this package sits in: a key file inside it is one `git add` away from being published. */
const repositoryRoot = repositoryRootOf(import.meta.url)

/**
 * Development keys from a JSON file (the JSON spelling of KeyList.ts). The file must be outside the
 * repository, a regular file, and readable by its owner only (no group or other bits: 0600 or 0400).
 */
export const fromFile = (file: string) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const fail = (reason: KeySourceInvalid["reason"]) => new KeySourceInvalid({ source: "file", reason })
    const unreadable = () => fail("file-unreadable")
    const real = yield* Effect.mapError(fs.realPath(file), unreadable)
    // The repository holds this module, so its real path resolves; if it ever did not, refuse.
    const root = yield* Effect.mapError(fs.realPath(repositoryRoot), unreadable)
    // Outside means climbing out (`..` as a whole path segment: `..keys.json` is a name inside) or
    // another root; "" (the repository itself) is inside.
    const relative = path.relative(root, real)
    const outside = relative === ".." || relative.startsWith(`..${path.sep}`) || path.isAbsolute(relative)
    if (!outside) {
      return yield* fail("file-inside-repository")
    }
    const info = yield* Effect.mapError(fs.stat(real), unreadable)
    if (info.type !== "File") return yield* fail("file-unreadable")
    if ((info.mode & 0o077) !== 0) return yield* fail("file-permissions")
    const text = yield* Effect.mapError(fs.readFileString(real), unreadable)
    // Only the JSON spelling: a file is edited by hand, and JSON errors are caught early.
    if (!text.trim().startsWith("{")) return yield* fail("not-json")
    return fromEntries(yield* parseKeyList(text, "file"))
  })

export const layerFromFile = (file: string) => Layer.effect(SigningKeySource, fromFile(file))

/**
 * `SIGNER_KEYS_FILE` (development) or `SIGNER_KEYS`; both set is refused, since which keys sign
 * must never depend on a precedence rule nobody remembers.
 */
export const layerFromConfig = Layer.effect(
  SigningKeySource,
  Effect.gen(function* () {
    const file = yield* Config.option(Config.nonEmptyString(SIGNER_KEYS_FILE))
    if (Option.isNone(file)) return yield* fromEnvironment
    const inline = yield* Config.option(Config.redacted(SIGNER_KEYS))
    if (Option.isSome(inline)) return yield* new KeySourceInvalid({ source: "environment", reason: "both-sources-set" })
    return yield* fromFile(file.value)
  })
)
