import { positiveDuration } from "@delivery/core"
import { Config, ConfigError, Duration, Either, Option, Redacted } from "effect"
import type { KeySourceInvalid } from "./Domain.ts"
import { SIGNER_KEYS, SIGNER_KEYS_FILE } from "./KeySource.ts"
import { parseKeyList } from "./KeyList.ts"
import { replayWindowConfig, SIGNER_REPLAY_WINDOW } from "./Signer.ts"

export const SIGNER_PURGE_INTERVAL = "SIGNER_PURGE_INTERVAL"

/** How often the purge sweep looks for revoked keys whose replay window has passed. */
export const purgeIntervalConfig = positiveDuration(SIGNER_PURGE_INTERVAL, Duration.hours(1))

// Messages name the stable reason and the entry's position only, and end in "(value not shown)":
// the text is the secret (the backend prints such messages and restates any other secret's).
const keyListMessage = (error: KeySourceInvalid) =>
  `Expected the key list documented for ${SIGNER_KEYS}: ${error.reason}${
    error.entry === undefined ? "" : ` at entry ${error.entry}`
  } (value not shown)`

const keyList = Config.redacted().pipe(
  Config.mapOrFail((text) =>
    Either.match(parseKeyList(Redacted.value(text), "environment"), {
      onLeft: (error) => Either.left(ConfigError.InvalidData([], keyListMessage(error))),
      onRight: (entries) => Either.right(entries.length)
    })
  ),
  Config.nested(SIGNER_KEYS),
  Config.option
)

/** Where the signing keys come from, as far as it can be told without reading a file. */
export type KeySourceSummary =
  | { readonly source: "none" }
  | { readonly source: "environment"; readonly keys: number }
  | { readonly source: "file" }

// Set but empty is refused: `Config.nonEmptyString` would report it as missing, which reads as "no file".
const keyFile = Config.string().pipe(
  Config.validate({ message: "Expected a path; an empty value is refused (unset the variable instead)", validation: (text) => text.length > 0 }),
  Config.nested(SIGNER_KEYS_FILE),
  Config.option
)

const keySource = Config.all({
  file: keyFile,
  keys: keyList
}).pipe(
  Config.mapOrFail(({ file, keys }): Either.Either<KeySourceSummary, ConfigError.ConfigError> => {
    if (Option.isSome(file) && Option.isSome(keys)) {
      return Either.left(ConfigError.InvalidData([SIGNER_KEYS_FILE], `refused together with ${SIGNER_KEYS}: set only one`))
    }
    if (Option.isSome(file)) return Either.right({ source: "file" })
    return Either.right(Option.isSome(keys) ? { source: "environment", keys: keys.value } : { source: "none" })
  })
)

/**
 * Every signer variable, checked the way the signer's layers will read them, so a process can
 * refuse a bad configuration before it starts anything. A key file's contents and permissions are
 * I/O: `KeySource.layerFromConfig` checks them when it is built, still before anything listens.
 */
export const SignerConfig = Config.all({
  replayWindow: replayWindowConfig,
  purgeInterval: purgeIntervalConfig,
  keySource
})
export type SignerConfig = Config.Config.Success<typeof SignerConfig>

/** Every variable the signer reads, in the shape of the backend's configuration table. */
export const SIGNER_CONFIG: ReadonlyArray<{
  readonly name: string
  readonly default: string
  readonly meaning: string
  readonly secret: boolean
}> = [
  {
    name: SIGNER_REPLAY_WINDOW,
    default: "90 days",
    meaning: "how long a retired key keeps verifying and a revoked key is kept before purge; at least INBOX_PAYLOAD_RETENTION (start-up refuses a shorter window)",
    secret: false
  },
  {
    name: SIGNER_KEYS,
    default: "(unset: no private keys, verify only)",
    meaning: "tenant signing keys: JSON {\"tenant\":{\"keyId\":\"<key>\"}} or tenant:keyId:<key>,...; <key> is unpadded base64url of the 32-byte Ed25519 seed or its 48-byte PKCS#8 DER",
    secret: true
  },
  {
    name: SIGNER_KEYS_FILE,
    default: "(unset)",
    meaning: "development only: path of a JSON key file (SIGNER_KEYS's JSON form) outside the repository, mode 0600/0400; refused together with SIGNER_KEYS, and when set but empty",
    secret: false
  },
  {
    name: SIGNER_PURGE_INTERVAL,
    default: "1 hour",
    meaning: "how often the signer-purge-revoked worker deletes revoked keys whose replay window has passed (backend role only)",
    secret: false
  }
]
