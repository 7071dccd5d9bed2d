import { durationAtMost } from "@delivery/core"
import { IdPattern } from "@delivery/identity"
import { decodeBase64Url, privateKeyFromSeed, publicKeyFromRaw } from "@delivery/signer"
import { Config, ConfigError, Context, Duration, Effect, Either, Option, Redacted } from "effect"
import type { KeyObject } from "node:crypto"
import type { SignerKeyId, StackId } from "./Domain.ts"
import { TRANSPORT_NAMES } from "./Ingress.ts"
import { MAX_HOLD_SECONDS } from "./Protocol.ts"

export const IDLE_WAKE_STACK = "IDLE_WAKE_STACK"
export const IDLE_WAKE_AUDIENCE = "IDLE_WAKE_AUDIENCE"
export const IDLE_WAKE_CLOUD_KEYS = "IDLE_WAKE_CLOUD_KEYS"
export const IDLE_WAKE_REPORT_KEY = "IDLE_WAKE_REPORT_KEY"
export const IDLE_WAKE_INGRESS = "IDLE_WAKE_INGRESS"
export const IDLE_WAKE_GITHUB_WEBHOOK_SECRET = "IDLE_WAKE_GITHUB_WEBHOOK_SECRET"

/** Rotation needs two keys at once (the current and the next); more than four is a mistake, not a rotation. */
export const MAX_CLOUD_KEYS = 4

export interface TenantSettings {
  readonly stack: StackId
  readonly audience: string
  /** The cloud control signer's public keys by key id. */
  readonly cloudKeys: ReadonlyMap<string, KeyObject>
  readonly reportKeyId: SignerKeyId
  readonly reportKey: Redacted.Redacted<KeyObject>
  /** Assertions valid for longer than this are refused, so request ids need keeping only this long. */
  readonly maxAssertionLifetime: Duration.Duration
  /** How far in the future an assertion's issuedAt may be (the two clocks disagree a little). */
  readonly clockSkew: Duration.Duration
  /** The longest idle hold a final read may take. */
  readonly maxHold: Duration.Duration
  /** The GitHub App's webhook secret: connector events are verified with it on delivery (none: refused). */
  readonly githubWebhookSecret: Option.Option<Redacted.Redacted<string>>
}

export interface IdleWakeSettings {
  /** None: IDLE_WAKE_STACK is unset, drain reads are refused (503 `idle-wake-unconfigured`). */
  readonly tenant: Option.Option<TenantSettings>
  /** The configured ingress transports besides the tenant API (IDLE_WAKE_INGRESS). */
  readonly ingress: ReadonlyArray<string>
}

export class IdleWakeSettingsTag extends Context.Tag("@delivery/idle-wake/IdleWakeSettings")<IdleWakeSettingsTag, IdleWakeSettings>() {}

const ID = new RegExp(IdPattern.source)

const invalid = (name: string, message: string) => ConfigError.InvalidData([name], message)
// Before `nested(name)`: the path is filled in by `nested`, so the start-up message names the variable.
const refusal = (message: string) => ConfigError.InvalidData([], message)

/** `keyId:publicKey[,keyId:publicKey]`: unpadded base64url of each raw 32-byte Ed25519 public key. */
export const parseCloudKeys = (text: string): Either.Either<ReadonlyMap<string, KeyObject>, string> => {
  const items = text.split(",").map((item) => item.trim()).filter((item) => item !== "")
  if (items.length === 0) return Either.left("Expected at least one keyId:publicKey entry")
  if (items.length > MAX_CLOUD_KEYS) return Either.left(`Expected at most ${MAX_CLOUD_KEYS} keys`)
  const keys = new Map<string, KeyObject>()
  for (const [index, item] of items.entries()) {
    const parts = item.split(":")
    if (parts.length !== 2 || !ID.test(parts[0]!)) return Either.left(`entry ${index + 1}: expected keyId:publicKey with a key id matching ${IdPattern.source}`)
    const raw = decodeBase64Url(parts[1]!, 32)
    if (Either.isLeft(raw)) return Either.left(`entry ${index + 1}: the public key must be unpadded base64url of 32 bytes`)
    if (keys.has(parts[0]!)) return Either.left(`entry ${index + 1}: key id listed twice`)
    keys.set(parts[0]!, publicKeyFromRaw(raw.right))
  }
  return Either.right(keys)
}

/** `keyId:seed`: the unpadded base64url 32-byte Ed25519 seed. Messages never quote the value. */
export const parseReportKey = (text: string): Either.Either<{ keyId: SignerKeyId; privateKey: KeyObject }, string> => {
  const parts = text.trim().split(":")
  if (parts.length !== 2 || !ID.test(parts[0]!)) return Either.left("Expected keyId:seed (value not shown)")
  const seed = decodeBase64Url(parts[1]!, 32)
  if (Either.isLeft(seed)) return Either.left("Expected keyId:seed with the seed as unpadded base64url of 32 bytes (value not shown)")
  return Either.right({ keyId: parts[0]! as SignerKeyId, privateKey: privateKeyFromSeed(seed.right) })
}

const parseIngress = (text: string): Either.Either<ReadonlyArray<string>, string> => {
  const names = text.split(",").map((name) => name.trim()).filter((name) => name !== "")
  const unknown = names.filter((name) => !TRANSPORT_NAMES.includes(name))
  // Fail closed: a transport this process does not know cannot be known to be safe to sleep with.
  return unknown.length > 0
    ? Either.left(`Unknown transport(s): ${unknown.join(", ")}; expected a comma-separated list of ${TRANSPORT_NAMES.join(", ")}`)
    : Either.right([...new Set(names)])
}

const TimingConfig = Config.all({
  maxAssertionLifetime: durationAtMost("IDLE_WAKE_ASSERTION_MAX_LIFETIME", "5 minutes", Duration.hours(1)),
  clockSkew: durationAtMost("IDLE_WAKE_CLOCK_SKEW", "30 seconds", Duration.minutes(5)),
  maxHold: durationAtMost("IDLE_WAKE_HOLD_MAX", "2 minutes", Duration.seconds(MAX_HOLD_SECONDS))
})

const stackConfig = Config.option(
  Config.string().pipe(
    Config.validate({ message: `Expected a stack id matching ${IdPattern.source}`, validation: (text) => ID.test(text) }),
    Config.nested(IDLE_WAKE_STACK)
  )
)

const audienceConfig = Config.string().pipe(
  Config.validate({ message: "Expected 1-256 printable ASCII characters without spaces", validation: (text) => /^[\x21-\x7e]{1,256}$/.test(text) }),
  Config.nested(IDLE_WAKE_AUDIENCE)
)

const cloudKeysConfig = Config.string().pipe(
  Config.mapOrFail((text) => Either.mapLeft(parseCloudKeys(text), (message) => refusal(message))),
  Config.nested(IDLE_WAKE_CLOUD_KEYS)
)

const reportKeyConfig = Config.redacted().pipe(
  Config.mapOrFail((secret) =>
    Either.match(parseReportKey(Redacted.value(secret)), {
      onLeft: (message) => Either.left(refusal(message)),
      onRight: ({ keyId, privateKey }) => Either.right({ keyId, privateKey: Redacted.make(privateKey) })
    })),
  Config.nested(IDLE_WAKE_REPORT_KEY)
)

const githubSecretConfig = Config.option(
  Config.redacted().pipe(
    Config.validate({
      message: "Expected 16-256 printable ASCII characters (value not shown)",
      validation: (secret) => /^[\x21-\x7e]{16,256}$/.test(Redacted.value(secret))
    }),
    Config.nested(IDLE_WAKE_GITHUB_WEBHOOK_SECRET)
  )
)

const ingressConfig = Config.string().pipe(
  Config.mapOrFail((text) => Either.mapLeft(parseIngress(text), (message) => refusal(message))),
  Config.nested(IDLE_WAKE_INGRESS),
  Config.withDefault<ReadonlyArray<string>>([])
)

const isSet = (name: string) => Effect.map(Config.option(Config.string(name)), Option.isSome)

const requiresStack = (name: string) =>
  Effect.flatMap(isSet(name), (set) =>
    set ? Effect.fail(invalid(name, `Set only together with ${IDLE_WAKE_STACK} (value not shown)`)) : Effect.void)

/**
 * Idle wake's settings, every problem reported together. Without IDLE_WAKE_STACK the tenant protocol is off and
 * setting its other variables is refused (a half-configured stack is a mistake); with it, the audience, the cloud's
 * keys and the report key are all required.
 */
export const loadIdleWakeSettings: Effect.Effect<IdleWakeSettings, ConfigError.ConfigError> = Effect.gen(function* () {
  const stack = yield* Effect.either(stackConfig)
  const ingress = yield* Effect.either(ingressConfig)
  const errors: Array<ConfigError.ConfigError> = []
  if (Either.isLeft(stack)) errors.push(stack.left)
  if (Either.isLeft(ingress)) errors.push(ingress.left)
  let tenant = Option.none<TenantSettings>()
  if (Either.isRight(stack) && Option.isNone(stack.right)) {
    for (const name of [IDLE_WAKE_AUDIENCE, IDLE_WAKE_CLOUD_KEYS, IDLE_WAKE_REPORT_KEY, IDLE_WAKE_GITHUB_WEBHOOK_SECRET]) {
      const refused = yield* Effect.either(requiresStack(name))
      if (Either.isLeft(refused)) errors.push(refused.left)
    }
  }
  const timing = yield* Effect.either(TimingConfig)
  if (Either.isLeft(timing)) errors.push(timing.left)
  if (Either.isRight(stack) && Option.isSome(stack.right)) {
    const [audience, cloudKeys, reportKey, githubSecret] = yield* Effect.all(
      [Effect.either(audienceConfig), Effect.either(cloudKeysConfig), Effect.either(reportKeyConfig), Effect.either(githubSecretConfig)]
    )
    if (Either.isLeft(githubSecret)) errors.push(githubSecret.left)
    if (Either.isLeft(audience)) errors.push(audience.left)
    if (Either.isLeft(cloudKeys)) errors.push(cloudKeys.left)
    if (Either.isLeft(reportKey)) errors.push(reportKey.left)
    if (Either.isRight(audience) && Either.isRight(cloudKeys) && Either.isRight(reportKey) && Either.isRight(timing) && Either.isRight(githubSecret)) {
      tenant = Option.some({
        stack: stack.right.value as StackId,
        audience: audience.right,
        cloudKeys: cloudKeys.right,
        reportKeyId: reportKey.right.keyId,
        reportKey: reportKey.right.privateKey,
        githubWebhookSecret: githubSecret.right,
        ...timing.right
      })
    }
  }
  if (errors.length > 0) return yield* Effect.fail(errors.reduce((left, right) => ConfigError.And(left, right)))
  return { tenant, ingress: Either.getOrElse(ingress, () => []) }
})

/** What the backend lists in its configuration table. */
export const IDLE_WAKE_CONFIG = [
  { name: IDLE_WAKE_STACK, default: "(unset: drain reads refused with 503 `idle-wake-unconfigured`)", meaning: "this stack's id (spec 001): drain assertions for any other stack are refused; setting it requires the three variables below (docs/idle-wake.md)", secret: false },
  { name: IDLE_WAKE_AUDIENCE, default: "(required with IDLE_WAKE_STACK)", meaning: "the audience drain assertions must name: 1-256 printable ASCII characters without spaces", secret: false },
  { name: IDLE_WAKE_CLOUD_KEYS, default: "(required with IDLE_WAKE_STACK)", meaning: `the cloud control signer's Ed25519 public keys, \`keyId:publicKey\` comma-separated (1-${MAX_CLOUD_KEYS}, for rotation), each key unpadded base64url of 32 bytes`, secret: false },
  { name: IDLE_WAKE_REPORT_KEY, default: "(required with IDLE_WAKE_STACK)", meaning: "`keyId:seed`: the Ed25519 key that signs this stack's drain reports, the seed unpadded base64url of 32 bytes", secret: true },
  { name: IDLE_WAKE_GITHUB_WEBHOOK_SECRET, default: "(unset: connector events refused)", meaning: "the GitHub App's webhook secret (16-256 printable ASCII characters): every connector event the cloud delivers is checked against its X-Hub-Signature-256 with it; requires IDLE_WAKE_STACK", secret: true },
  { name: IDLE_WAKE_INGRESS, default: "(empty)", meaning: "ingress transports configured for this stack besides the always-present tenant API, comma-separated, from the closed list in docs/idle-wake.md; an unknown name stops start-up", secret: false },
  { name: "IDLE_WAKE_ASSERTION_MAX_LIFETIME", default: "5 minutes", meaning: "longest validity (expiresAt - issuedAt) of a drain assertion, at most 1 hour; longer ones are refused", secret: false },
  { name: "IDLE_WAKE_CLOCK_SKEW", default: "30 seconds", meaning: "how far in the future an assertion's issuedAt may be, at most 5 minutes", secret: false },
  { name: "IDLE_WAKE_HOLD_MAX", default: "2 minutes", meaning: "longest idle hold a final drain read may ask for (its holdSeconds), at most 1 hour", secret: false }
] as const
