import { FileSystem } from "@effect/platform"
import { encodeBase64Url, parseKeyList, RawPublicKey, rawPublicKey } from "@delivery/signer"
import { Effect, Either } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { UsageError } from "./Failure.ts"

// A signing key file in the `SIGNER_KEYS_FILE` form, `{"<tenant>":{"<keyId>":"<seed>"}}`: the private seed
// stays in it, only the public key is ever printed or sent.

export interface Generated {
  readonly publicKey: string
}

/**
 * A new Ed25519 key pair: the seed written to a new file of mode 0600 (`wx`: an existing file is never
 * replaced), the public key returned as unpadded base64url of its 32 raw bytes.
 */
export const generateKeyFile = (path: string, tenant: string, keyId: string) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const { privateKey, publicKey } = generateKeyPairSync("ed25519")
    // A JWK's `d` and `x` are exactly the unpadded base64url seed and raw public key.
    const jwk = privateKey.export({ format: "jwk" })
    yield* fs.writeFileString(path, `${JSON.stringify({ [tenant]: { [keyId]: jwk.d } })}\n`, { flag: "wx", mode: 0o600 }).pipe(
      Effect.mapError((error) =>
        new UsageError({
          // Stryker disable next-line ConditionalExpression: only a SystemError has a reason; the test narrows the type
          message: error._tag === "SystemError" && error.reason === "AlreadyExists"
            ? `${path} exists: a key file is never overwritten`
            : `cannot write ${path}`
        }))
    )
    return { publicKey: encodeBase64Url(rawPublicKey(publicKey)) } satisfies Generated
  })

/** The public key of `tenant`'s key `keyId` in a key file written by `signing-keys generate`. */
export const publicKeyFromFile = (path: string, tenant: string, keyId: string) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const text = yield* fs.readFileString(path).pipe(Effect.mapError(() => new UsageError({ message: `cannot read the key file ${path}` })))
    const entries = parseKeyList(text, "file")
    if (Either.isLeft(entries)) {
      return yield* new UsageError({ message: `${path} is not a signing key file (${entries.left.reason})` })
    }
    const entry = entries.right.find((candidate) => candidate.tenant === tenant && candidate.keyId === keyId)
    if (entry === undefined) return yield* new UsageError({ message: `${path} has no key ${keyId} of tenant ${tenant}` })
    return RawPublicKey.make(rawPublicKey(entry.privateKey))
  })
