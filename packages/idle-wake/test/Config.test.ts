import { describe, expect, it } from "@effect/vitest"
import { ConfigError, ConfigProvider, Duration, Effect, Either, Option, Redacted } from "effect"
import { generateKeyPairSync, randomBytes } from "node:crypto"
import { encodeBase64Url, rawPublicKey } from "@delivery/signer"
import { loadIdleWakeSettings, MAX_CLOUD_KEYS, parseCloudKeys, parseReportKey } from "../src/IdleWakeConfig.ts"
import { TRANSPORT_NAMES, TRANSPORTS } from "../src/Ingress.ts"

// Idle wake's configuration (docs/idle-wake.md, "Configuration"): a half-configured stack, unknown transports and
// malformed keys stop start-up with the variable named and no secret printed; unset, the protocol is off.

const publicKey = () => encodeBase64Url(rawPublicKey(generateKeyPairSync("ed25519").publicKey))
const seed = randomBytes(32).toString("base64url")
const stack = { IDLE_WAKE_STACK: "stack-1", IDLE_WAKE_AUDIENCE: "tenant:stack-1", IDLE_WAKE_CLOUD_KEYS: `cloud-1:${publicKey()}`, IDLE_WAKE_REPORT_KEY: `report-1:${seed}` }

const load = (env: Record<string, string>) =>
  Effect.either(Effect.withConfigProvider(loadIdleWakeSettings, ConfigProvider.fromMap(new Map(Object.entries(env)))))

const problems = (error: ConfigError.ConfigError): ReadonlyArray<string> =>
  ConfigError.reduceWithContext(error, undefined, {
    andCase: (_, left, right) => [...left, ...right],
    orCase: (_, left, right) => [...left, ...right],
    invalidDataCase: (_, path, message) => [`${path.join("_")}: ${message}`],
    missingDataCase: (_, path, message) => [`${path.join("_")}: ${message}`],
    sourceUnavailableCase: (_, path, message) => [`${path.join("_")}: ${message}`],
    unsupportedCase: (_, path, message) => [`${path.join("_")}: ${message}`]
  })

describe("idle wake configuration", () => {
  it.effect("unset: the tenant protocol is off, no transport configured, the timing defaults", () =>
    Effect.gen(function* () {
      const settings = Either.getOrThrow(yield* load({}))
      expect(Option.isNone(settings.tenant)).toBe(true)
      expect(settings.ingress).toEqual([])
    }))

  it.effect("a complete stack: its id, audience, the cloud's keys by id, the report key kept Redacted, the default bounds", () =>
    Effect.gen(function* () {
      const settings = Either.getOrThrow(yield* load(stack))
      const tenant = Option.getOrThrow(settings.tenant)
      expect(tenant.stack).toBe("stack-1")
      expect(tenant.audience).toBe("tenant:stack-1")
      expect([...tenant.cloudKeys.keys()]).toEqual(["cloud-1"])
      expect(tenant.reportKeyId).toBe("report-1")
      expect(Redacted.isRedacted(tenant.reportKey)).toBe(true)
      expect(String(tenant.reportKey)).not.toContain(seed)
      expect(Duration.toMillis(tenant.maxAssertionLifetime)).toBe(300_000)
      expect(Duration.toMillis(tenant.clockSkew)).toBe(30_000)
      expect(Duration.toMillis(tenant.maxHold)).toBe(120_000)
    }))

  it.effect("IDLE_WAKE_STACK alone names each of the three it needs", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(Effect.flatten(load({ IDLE_WAKE_STACK: "stack-1" })))
      expect(problems(error).map((p) => p.split(":")[0])).toEqual(["IDLE_WAKE_AUDIENCE", "IDLE_WAKE_CLOUD_KEYS", "IDLE_WAKE_REPORT_KEY"])
    }))

  it.effect("the audience, the cloud keys or the report key without IDLE_WAKE_STACK stops start-up, the value not shown", () =>
    Effect.gen(function* () {
      const { IDLE_WAKE_STACK: _, ...withoutStack } = stack
      const error = yield* Effect.flip(Effect.flatten(load(withoutStack)))
      const lines = problems(error)
      expect(lines.map((p) => p.split(":")[0])).toEqual(["IDLE_WAKE_AUDIENCE", "IDLE_WAKE_CLOUD_KEYS", "IDLE_WAKE_REPORT_KEY"])
      for (const line of lines) expect(line).toContain("Set only together with IDLE_WAKE_STACK (value not shown)")
      expect(lines.join("\n")).not.toContain(seed)
    }))

  it.effect("every transport of the registry can be configured; an unknown one fails closed, named", () =>
    Effect.gen(function* () {
      expect(TRANSPORT_NAMES).toEqual(TRANSPORTS.map((t) => t.name))
      const all = Either.getOrThrow(yield* load({ IDLE_WAKE_INGRESS: ` ${TRANSPORT_NAMES.join(" , ")},slack-webhook ` }))
      expect(all.ingress).toEqual(TRANSPORT_NAMES)
      const error = yield* Effect.flip(Effect.flatten(load({ IDLE_WAKE_INGRESS: "slack-webhook,carrier-pigeon" })))
      expect(problems(error)).toEqual([expect.stringMatching(/^IDLE_WAKE_INGRESS: Unknown transport\(s\): carrier-pigeon; expected/)])
    }))

  it.effect("bounds: a stack id, an audience, the lifetimes", () =>
    Effect.gen(function* () {
      const cases: ReadonlyArray<[Record<string, string>, string]> = [
        [{ ...stack, IDLE_WAKE_STACK: "Stack One" }, "IDLE_WAKE_STACK"],
        [{ ...stack, IDLE_WAKE_AUDIENCE: "has space" }, "IDLE_WAKE_AUDIENCE"],
        [{ ...stack, IDLE_WAKE_AUDIENCE: "x".repeat(257) }, "IDLE_WAKE_AUDIENCE"],
        [{ ...stack, IDLE_WAKE_ASSERTION_MAX_LIFETIME: "61 minutes" }, "IDLE_WAKE_ASSERTION_MAX_LIFETIME"],
        [{ ...stack, IDLE_WAKE_CLOCK_SKEW: "6 minutes" }, "IDLE_WAKE_CLOCK_SKEW"],
        [{ ...stack, IDLE_WAKE_HOLD_MAX: "0 seconds" }, "IDLE_WAKE_HOLD_MAX"],
        [{ ...stack, IDLE_WAKE_HOLD_MAX: "61 minutes" }, "IDLE_WAKE_HOLD_MAX"]
      ]
      for (const [env, name] of cases) {
        const error = yield* Effect.flip(Effect.flatten(load(env)))
        expect([name, problems(error).map((p) => p.split(":")[0])]).toEqual([name, [name]])
      }
      const edge = Either.getOrThrow(yield* load({ ...stack, IDLE_WAKE_ASSERTION_MAX_LIFETIME: "1 hour", IDLE_WAKE_CLOCK_SKEW: "5 minutes", IDLE_WAKE_HOLD_MAX: "1 hour" }))
      expect(Duration.toMillis(Option.getOrThrow(edge.tenant).maxHold)).toBe(3_600_000)
    }))
})

describe("key lists", () => {
  it("cloud keys: 1 to 4 `keyId:publicKey` entries, each a strict 32-byte key, ids unique and of the id pattern", () => {
    const keys = Array.from({ length: MAX_CLOUD_KEYS }, (_, i) => `cloud-${i}:${publicKey()}`)
    expect([...Either.getOrThrow(parseCloudKeys(keys.join(","))).keys()]).toEqual(keys.map((k) => k.split(":")[0]))
    expect(parseCloudKeys("")).toEqual(Either.left("Expected at least one keyId:publicKey entry"))
    expect(parseCloudKeys([...keys, `cloud-9:${publicKey()}`].join(","))).toEqual(Either.left(`Expected at most ${MAX_CLOUD_KEYS} keys`))
    expect(parseCloudKeys(`Cloud:${publicKey()}`)).toEqual(Either.left(expect.stringMatching(/^entry 1: expected keyId:publicKey/)))
    expect(parseCloudKeys(`a:b:c`)).toEqual(Either.left(expect.stringMatching(/^entry 1: expected keyId:publicKey/)))
    expect(parseCloudKeys(`cloud-1:${publicKey()},cloud-2:${publicKey().slice(0, -1)}`)).toEqual(Either.left("entry 2: the public key must be unpadded base64url of 32 bytes"))
    expect(parseCloudKeys(`cloud-1:${publicKey()},cloud-1:${publicKey()}`)).toEqual(Either.left("entry 2: key id listed twice"))
  })

  it("the report key: `keyId:seed`, refusals that never quote it", () => {
    const parsed = Either.getOrThrow(parseReportKey(` report-1:${seed} `))
    expect(parsed.keyId).toBe("report-1")
    expect(parsed.privateKey.type).toBe("private")
    for (const text of [seed, `Report:${seed}`, `report-1:${seed.slice(0, -1)}`, `report-1:${seed}=`]) {
      const refused = parseReportKey(text)
      expect(Either.isLeft(refused)).toBe(true)
      expect(Either.getLeft(refused).pipe(Option.getOrThrow)).toMatch(/\(value not shown\)$/)
      expect(Either.getLeft(refused).pipe(Option.getOrThrow)).not.toContain(seed.slice(0, 10))
    }
  })
})
