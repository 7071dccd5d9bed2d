import { Command, Options } from "@effect/cli"
import { Ed25519PublicKey, encodeBase64Url, type RawPublicKey } from "@delivery/signer"
import { Effect, Option, Schema } from "effect"
import { answer } from "./Answers.ts"
import { keyId, tenant } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { UsageError } from "./Failure.ts"
import { group } from "./Group.ts"
import { generateKeyFile, publicKeyFromFile } from "./KeyFile.ts"
import { show, table, time } from "./Output.ts"

const out = Options.file("out", { exists: "no" }).pipe(Options.withDescription("the key file to create (mode 0600, never overwritten)"))

const Generated = Schema.Struct({ tenant: Schema.String, keyId: Schema.String, publicKey: Schema.String, file: Schema.String })

const generate = Command.make("generate", { tenant, keyId, out }, ({ keyId, out, tenant }) =>
  Effect.gen(function* () {
    const { publicKey } = yield* generateKeyFile(out, tenant, keyId)
    yield* show(Generated, { tenant, keyId, publicKey, file: out }, () => [
      `key ${keyId} of tenant ${tenant}: private seed written to ${out} (mode 0600)`,
      `public key: ${publicKey}`
    ])
  })).pipe(Command.withDescription("Make a new Ed25519 key pair: the seed goes to a new file, the public key is printed (no server is called)"))

/** `--public-key <b64url>` or `--key-file <file>` (a file from `generate`): exactly one of the two. */
const material = {
  publicKey: Options.text("public-key").pipe(
    Options.withSchema(Ed25519PublicKey),
    Options.withDescription("raw 32-byte public key, unpadded base64url"),
    Options.optional
  ),
  keyFile: Options.file("key-file", { exists: "yes" }).pipe(
    Options.withDescription("a key file written by `signing-keys generate` (its public key is derived from the seed)"),
    Options.optional
  )
}

const publicKeyOf = (publicKey: Option.Option<RawPublicKey>, keyFile: Option.Option<string>, tenant: string, keyId: string) =>
  Option.isSome(publicKey) && Option.isNone(keyFile)
    ? Effect.succeed(publicKey.value)
    : Option.isSome(keyFile) && Option.isNone(publicKey)
    ? publicKeyFromFile(keyFile.value, tenant, keyId)
    : Effect.fail(new UsageError({ message: "give exactly one of --public-key and --key-file" }))

const keyChange = (name: "register" | "rotate") =>
  Command.make(name, { tenant, keyId, ...material }, ({ keyFile, keyId, publicKey: given, tenant }) =>
    Effect.gen(function* () {
      const publicKey = yield* publicKeyOf(given, keyFile, tenant, keyId)
      const client = yield* operatorClient
      const request = { path: { tenant }, payload: { keyId, publicKey } }
      const answered = name === "register" ? client.signer.register(request) : client.signer.rotate(request)
      yield* answered.pipe(
        Effect.flatMap(answer("signer", name, (changed) => [
          `key ${changed.key.keyId} of tenant ${tenant}: ${changed.outcome} (${changed.key.state})`,
          ...changed.retired.map((key) => `key ${key.keyId} retired: verifies until ${time(key.verifyUntil)}`)
        ]))
      )
    })).pipe(
      Command.withDescription(
        name === "register"
          ? "Register the tenant's first signing key (or the next one once none is active)"
          : "Rotate: the new key becomes active, the previous one is retired"
      )
    )

const list = Command.make("list", { tenant }, ({ tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.signer.list({ path: { tenant } }).pipe(
      Effect.flatMap(answer("signer", "list", ({ keys }) =>
        table(
          ["key", "state", "created", "verify until", "public key"],
          keys.map((key) => [key.keyId, key.state, time(key.createdAt), time(key.verifyUntil), encodeBase64Url(key.publicKey)])
        )))
    )
  })).pipe(Command.withDescription("List the tenant's signing keys (public keys, states, verification windows)"))

const revoke = Command.make("revoke", { tenant, keyId }, ({ keyId, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.signer.revoke({ path: { tenant, keyId } }).pipe(
      Effect.flatMap(answer("signer", "revoke", (changed) => [`key ${changed.key.keyId} of tenant ${tenant}: ${changed.outcome}`]))
    )
  })).pipe(Command.withDescription("Revoke a signing key: it stops verifying at once"))

export const signingKeys = group("signing-keys", "Generate, register, rotate, list and revoke a tenant's Ed25519 signing keys", [
  generate,
  keyChange("register"),
  keyChange("rotate"),
  list,
  revoke
])
