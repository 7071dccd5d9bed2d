import { privateKeyFromSeed } from "@delivery/signer"
import { Config, ConfigError, Effect, Redacted } from "effect"
import type { KeyObject } from "node:crypto"
import { makeClient } from "../Client.ts"
import { UsageError } from "./Failure.ts"

// Settings come from the environment only, so no secret ever sits in a shell history or a process list. A
// missing or invalid variable is a usage error that names the variable and never quotes its value.

export const DEFAULT_URL = "http://127.0.0.1:3000"

const setting = <A>(name: string, config: Config.Config<A>, rule: string) =>
  Effect.mapError(config, (error) =>
    new UsageError({ message: ConfigError.isMissingDataOnly(error) ? `${name} is not set` : `${name} is invalid: ${rule}` }))

// URL.canParse rather than URL.parse, which Node 20 lacks.
const isHttpUrl = (text: string) => {
  if (!URL.canParse(text)) return false
  const url = new URL(text)
  return (url.protocol === "http:" || url.protocol === "https:") && url.username === "" && url.password === ""
}

const secret = (name: string) =>
  setting(
    name,
    // Stryker disable next-line StringLiteral: `setting` replaces the validation's message with its own
    Config.redacted(name).pipe(Config.validate({ message: "empty", validation: (value) => Redacted.value(value).length > 0 })),
    "it is empty"
  )

/** `DELIVERY_URL`: the backend's base URL. */
export const baseUrl = setting(
  "DELIVERY_URL",
  // Stryker disable next-line StringLiteral: `setting` replaces the validation's message with its own
  Config.string("DELIVERY_URL").pipe(Config.withDefault(DEFAULT_URL), Config.validate({ message: "not a URL", validation: isHttpUrl })),
  "an http:// or https:// URL without credentials"
)

export const operatorToken = secret("OPERATOR_TOKEN")
export const deviceToken = secret("DELIVERY_DEVICE_TOKEN")
export const apiKeyToken = secret("DELIVERY_API_KEY")

/** A 32-byte seed as unpadded base64url; the round trip refuses padding, foreign characters and second spellings. */
export const decodeSeed = (text: string): Uint8Array | undefined => {
  const bytes = Buffer.from(text, "base64url")
  return bytes.length === 32 && bytes.toString("base64url") === text ? new Uint8Array(bytes) : undefined
}

/** `DELIVERY_SIGNING_KEY`: the tenant's Ed25519 private key, as `SIGNER_KEYS` takes it (the seed). */
export const signingKey: Effect.Effect<KeyObject, UsageError> = Effect.flatMap(secret("DELIVERY_SIGNING_KEY"), (value) => {
  const seed = decodeSeed(Redacted.value(value))
  return seed === undefined
    ? Effect.fail(new UsageError({ message: "DELIVERY_SIGNING_KEY is invalid: unpadded base64url of a 32-byte Ed25519 seed" }))
    : Effect.succeed(privateKeyFromSeed(seed))
})

const variableName = /^[A-Za-z_][A-Za-z0-9_]*$/

/** A password read from the variable `--password-env` names: the password itself is never an argument. */
export const passwordFrom = (variable: string) =>
  variableName.test(variable)
    ? secret(variable)
    : Effect.fail(new UsageError({ message: "--password-env takes the name of an environment variable" }))

/** The typed client with the operator bearer, for every `/operator` route. */
export const operatorClient = Effect.gen(function* () {
  const url = yield* baseUrl
  const token = yield* operatorToken
  return yield* makeClient({ baseUrl: url, token })
})

/** The typed client with a tenant API key (`DELIVERY_API_KEY`), for the tenant's own `/api` routes. */
export const tenantClient = Effect.gen(function* () {
  const url = yield* baseUrl
  const token = yield* apiKeyToken
  return yield* makeClient({ baseUrl: url, token })
})
