import { presentedKeyMaterial } from "@delivery/identity"
import { describe, expect, it } from "@effect/vitest"
import { Either, Option, Redacted } from "effect"
import { createHash, generateKeyPairSync, randomBytes } from "node:crypto"
import { groupBlockers } from "../src/Blockers.ts"
import type { StackId } from "../src/Domain.ts"
import { challengeOf, compareForStop, keyFingerprint, presentedFingerprint } from "../src/Fingerprint.ts"
import { ingressBlockers, TRANSPORTS } from "../src/Ingress.ts"
import { projectKeys } from "../src/KeyProjection.ts"
import {
  type Bytes32,
  decodeCapability,
  type IncomingProof,
  type IncomingWakeCapability,
  MAX_PROJECTED_KEYS,
  signObject,
  verifyObject
} from "../src/Protocol.ts"

// Spec 001's protocol rules that need no database: the capability's closed shape, signatures, the challenge and
// fingerprint derivations, the key projection's fail-closed rules, the ingress registry and the cloud's comparison.

const stack = "stack-a" as StackId
const hold = (): Bytes32 => randomBytes(32).toString("base64url") as Bytes32
const both: IncomingWakeCapability = {
  version: 1,
  profiles: [{ profile: "tenant-api-http-v2", routes: ["api"] }, { profile: "github-broker-events-v1", routes: ["connector-events"] }]
}

describe("the capability's closed shape (spec 001: unknown versions and routes fail closed)", () => {
  it("accepts exactly idleCapabilities.incomingWake version 1 with known profiles and routes", () => {
    expect(decodeCapability({ incomingWake: both })).toEqual(Either.right(both))
    expect(decodeCapability({ incomingWake: { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: ["api"] }] } })._tag).toBe("Right")
  })

  const cases: ReadonlyArray<[string, unknown, string]> = [
    ["not an object", [], "capability-malformed"],
    ["an unknown member beside incomingWake", { incomingWake: both, other: true }, "capability-malformed"],
    ["no incomingWake", {}, "capability-malformed"],
    ["an unknown member in incomingWake", { incomingWake: { ...both, extra: 1 } }, "capability-malformed"],
    ["a version that is not an integer", { incomingWake: { ...both, version: "1" } }, "capability-malformed"],
    ["an unknown version", { incomingWake: { ...both, version: 2 } }, "capability-version-unknown"],
    ["no profiles", { incomingWake: { version: 1, profiles: [] } }, "capability-malformed"],
    ["three profiles", { incomingWake: { version: 1, profiles: [...both.profiles, both.profiles[0]] } }, "capability-malformed"],
    ["an unknown profile", { incomingWake: { version: 1, profiles: [{ profile: "slack-events-v1", routes: ["api"] }] } }, "capability-profile-unknown"],
    ["a profile named twice", { incomingWake: { version: 1, profiles: [both.profiles[0], both.profiles[0]] } }, "capability-profile-duplicate"],
    ["an unknown route", { incomingWake: { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: ["mcp"] }] } }, "capability-route-unknown"],
    ["another profile's route", { incomingWake: { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: ["connector-events"] }] } }, "capability-route-unknown"],
    ["a route named twice", { incomingWake: { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: ["api", "api"] }] } }, "capability-malformed"],
    ["no routes", { incomingWake: { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: [] }] } }, "capability-malformed"],
    ["a route that is not a string", { incomingWake: { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: [1] }] } }, "capability-malformed"],
    ["an unknown member in a profile", { incomingWake: { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: ["api"], all: true }] } }, "capability-malformed"],
    ["a profile that is not a string", { incomingWake: { version: 1, profiles: [{ profile: 2, routes: ["api"] }] } }, "capability-malformed"]
  ]
  for (const [name, value, reason] of cases) {
    it(`refuses ${name} (${reason})`, () => {
      expect(decodeCapability(value)).toEqual(Either.left(reason))
    })
  }
})

describe("signatures: Ed25519 over RFC 8785 without `signature`", () => {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519")
  const signed = signObject({ type: "idle-wake/drain-assertion", b: [1, "x"], a: { z: null } }, privateKey)

  it("verifies under the signer's key, whatever the member order", () => {
    expect(verifyObject(signed, publicKey)).toBe(true)
    const reordered = JSON.parse(JSON.stringify({ signature: signed.signature, a: signed.a, b: signed.b, type: signed.type }))
    expect(verifyObject(reordered, publicKey)).toBe(true)
  })

  it("refuses a changed member, an added member, another key and a malformed signature", () => {
    expect(verifyObject({ ...signed, b: [1, "y"] }, publicKey)).toBe(false)
    expect(verifyObject({ ...signed, idleCapabilities: {} } as typeof signed, publicKey)).toBe(false)
    expect(verifyObject(signed, generateKeyPairSync("ed25519").publicKey)).toBe(false)
    expect(verifyObject({ ...signed, signature: `${signed.signature.slice(0, -1)}=` }, publicKey)).toBe(false)
    expect(verifyObject({ ...signed, signature: "" }, publicKey)).toBe(false)
  })
})

describe("derivations (spec 001: the signed challenge is derived from the newly random owned idle hold and stack)", () => {
  it("the challenge changes with the idle hold and with the stack", () => {
    const idleHold = hold()
    expect(challengeOf(stack, idleHold)).toBe(challengeOf(stack, idleHold))
    expect(challengeOf(stack, hold())).not.toBe(challengeOf(stack, idleHold))
    expect(challengeOf("stack-b" as StackId, idleHold)).not.toBe(challengeOf(stack, idleHold))
  })

  it("the tenant's fingerprint from its stored hash equals the cloud's from the presented token, and changes per cycle", () => {
    const secret = randomBytes(32).toString("base64url")
    const token = `board_${"ab".repeat(12)}_${secret}`
    const stored = { kind: "board", lookupId: "ab".repeat(12), secretHash: createHash("sha256").update(secret).digest() }
    const challenge = challengeOf(stack, hold())
    const presented = Option.getOrThrow(presentedKeyMaterial(token))
    expect(presentedFingerprint(challenge, presented)).toBe(keyFingerprint(challenge, stored))
    expect(keyFingerprint(challengeOf(stack, hold()), stored)).not.toBe(keyFingerprint(challenge, stored))
    // Domain-separated inputs: another kind or lookup id with the same secret is another fingerprint.
    expect(keyFingerprint(challenge, { ...stored, kind: "agent" })).not.toBe(keyFingerprint(challenge, stored))
    expect(keyFingerprint(challenge, { ...stored, lookupId: "cd".repeat(12) })).not.toBe(keyFingerprint(challenge, stored))
    // The fingerprint is neither the stored hash nor derived from it without the salt.
    expect(keyFingerprint(challenge, stored)).not.toBe(Buffer.from(stored.secretHash).toString("base64url"))
  })

  it("device credentials and sessions have no wake material", () => {
    const secret = randomBytes(32).toString("base64url")
    expect(Option.isNone(presentedKeyMaterial(`device_${"ab".repeat(12)}_${secret}`))).toBe(true)
    expect(Option.isNone(presentedKeyMaterial(`session_${"ab".repeat(12)}_${secret}`))).toBe(true)
    expect(Option.isNone(presentedKeyMaterial("board_not-a-key"))).toBe(true)
  })
})

const material = (kind = "board", lookupId = randomBytes(12).toString("hex"), expiresAt: Date | null = null, secretHash: Uint8Array = randomBytes(32)) => ({
  kind,
  lookupId,
  secretHash: Redacted.make(secretHash),
  expiresAt
})

describe("tenant-api-http-v2 key projection (spec 001: unknown, duplicate, malformed or overflow projection fails closed)", () => {
  const challenge = challengeOf(stack, hold())

  it("projects up to 1,000 active keys, sorted by fingerprint, with kind and board-key expiry", () => {
    const keys = Array.from({ length: MAX_PROJECTED_KEYS }, (_, i) => material(i % 2 === 0 ? "board" : "agent"))
    const expiring = new Date("2027-01-02T03:04:05.678Z")
    keys[0] = material("board", keys[0]!.lookupId, expiring)
    const projection = projectKeys(challenge, keys)
    if (projection._tag !== "Projected") throw new Error(projection.blocker)
    expect(projection.proof.keys).toHaveLength(MAX_PROJECTED_KEYS)
    const fingerprints = projection.proof.keys.map((key) => key.fingerprint)
    expect([...fingerprints].sort()).toEqual(fingerprints)
    expect(projection.proof.keys.filter((key) => key.expiresAt === "2027-01-02T03:04:05.678Z")).toHaveLength(1)
    expect(projection.proof.keys.filter((key) => key.kind === "agent")).toHaveLength(500)
    // The row order never changes the proof.
    expect(projectKeys(challenge, [...keys].reverse())).toEqual(projection)
  })

  it("refuses 1,001 keys as an overflow, never a truncated list", () => {
    const keys = Array.from({ length: MAX_PROJECTED_KEYS + 1 }, () => material())
    expect(projectKeys(challenge, keys)).toEqual({ _tag: "Refused", blocker: "api-key-projection-overflow", count: 1001 })
  })

  it("refuses an unknown kind, a malformed lookup id, hash or expiry, and a duplicate", () => {
    const ok = material()
    expect(projectKeys(challenge, [ok, material("device")])).toMatchObject({ blocker: "api-key-projection-unknown" })
    expect(projectKeys(challenge, [ok, material("board", "XYZ")])).toMatchObject({ blocker: "api-key-projection-malformed" })
    expect(projectKeys(challenge, [ok, material("board", `${"a".repeat(24)}0`)])).toMatchObject({ blocker: "api-key-projection-malformed" })
    expect(projectKeys(challenge, [ok, material("board", `x${"a".repeat(24)}`)])).toMatchObject({ blocker: "api-key-projection-malformed" })
    expect(projectKeys(challenge, [ok, material("board", "A".repeat(24))])).toMatchObject({ blocker: "api-key-projection-malformed" })
    expect(projectKeys(challenge, [ok, material("board", undefined, null, randomBytes(31))])).toMatchObject({ blocker: "api-key-projection-malformed" })
    expect(projectKeys(challenge, [ok, material("board", undefined, new Date(Number.NaN))])).toMatchObject({ blocker: "api-key-projection-malformed" })
    expect(projectKeys(challenge, [ok, { ...ok }])).toMatchObject({ blocker: "api-key-projection-duplicate" })
  })

  it("a projection of no keys is a proof with no keys", () => {
    expect(projectKeys(challenge, [])).toEqual({ _tag: "Projected", proof: { keys: [] } })
  })
})

describe("the ingress registry (spec 001: without the capability every configured ingress blocks)", () => {
  it("every transport but saved outbound HTTP MCP blocks without a proof", () => {
    const all = TRANSPORTS.map((t) => t.name)
    const blocked = ingressBlockers(all, new Set()).map((b) => b.transport)
    expect(blocked).toEqual(all.filter((name) => name !== "mcp-http-outbound"))
    expect(new Set(ingressBlockers(all, new Set()).map((b) => b.code)).size).toBe(blocked.length)
  })

  it("a proven profile lifts only its own transport's blocker", () => {
    const active = ["tenant-api-http", "github-broker-events", "slack-webhook"]
    expect(ingressBlockers(active, new Set(["tenant-api-http-v2"])).map((b) => b.code)).toEqual(["ingress-github-broker-events", "ingress-slack-webhook"])
    expect(ingressBlockers(active, new Set(["github-broker-events-v1"])).map((b) => b.code)).toEqual(["ingress-tenant-api-http", "ingress-slack-webhook"])
    expect(ingressBlockers(active, new Set(["tenant-api-http-v2", "github-broker-events-v1"])).map((b) => b.code)).toEqual(["ingress-slack-webhook"])
  })

  it("an unknown transport name is a defect, never silently passive", () => {
    expect(() => ingressBlockers(["carrier-pigeon"], new Set())).toThrow(/unknown ingress transport/)
  })
})

describe("blockers are grouped per code, ids sorted and bounded", () => {
  it("merges ids, counts them all and keeps at most 100", () => {
    const ids = Array.from({ length: 150 }, (_, i) => `id-${String(i).padStart(3, "0")}`)
    const grouped = groupBlockers([
      { code: "github-personal-mcp", ids: ids.slice(100) },
      { code: "github-personal-mcp", ids: ids.slice(0, 100) },
      { code: "local-api-activity" },
      { code: "requests-in-flight", count: 3 }
    ])
    expect(grouped.map((b) => b.code)).toEqual(["github-personal-mcp", "local-api-activity", "requests-in-flight"])
    expect(grouped[0]).toEqual({ code: "github-personal-mcp", ids: ids.slice(0, 100), count: 150 })
    expect(grouped[1]).toEqual({ code: "local-api-activity" })
    expect(grouped[2]).toEqual({ code: "requests-in-flight", count: 3 })
  })
})

describe("the cloud's comparison before stop (spec 001: the complete initial and final receipts must match)", () => {
  const idleHold = hold()
  const challenge = challengeOf(stack, idleHold)
  const proof: IncomingProof = {
    version: 1,
    stack,
    challenge,
    capability: both,
    profiles: {
      "tenant-api-http-v2": { keys: [] },
      "github-broker-events-v1": { connectorInstance: null, connectorGeneration: 0, bindings: challenge, bindingCount: 0 }
    }
  }
  const read = (incomingWake: IncomingProof, overrides: Partial<{ version: number; idle: boolean; stack: string }> = {}) => ({
    version: 3,
    stack: stack as string,
    idle: true,
    incomingWake,
    ...overrides
  })
  const compare = (initial: ReturnType<typeof read>, final: ReturnType<typeof read>, requested = both) =>
    compareForStop({ stack, idleHold, requested, initial, final })

  it("gives the final proof as the receipt when everything matches", () => {
    expect(compare(read(proof), read(structuredClone(proof)))).toEqual(Either.right(proof))
  })

  it("refuses a changed credential, a changed challenge, a missing profile, another capability, a busy or older report", () => {
    const changedKeys = { ...proof, profiles: { ...proof.profiles, "tenant-api-http-v2": { keys: [{ fingerprint: challenge, kind: "board" as const, expiresAt: null }] } } }
    expect(compare(read(proof), read(changedKeys))).toEqual(Either.left("proof-changed"))
    const otherChallenge = { ...proof, challenge: challengeOf(stack, hold()) }
    expect(compare(read(otherChallenge), read(otherChallenge))).toEqual(Either.left("challenge-mismatch"))
    const { "github-broker-events-v1": _, ...onlyApi } = proof.profiles
    const missing = { ...proof, profiles: onlyApi }
    expect(compare(read(missing), read(missing))).toEqual(Either.left("profile-missing"))
    const narrower: IncomingWakeCapability = { version: 1, profiles: [both.profiles[0]!] }
    expect(compare(read(proof), read(proof), narrower)).toEqual(Either.left("capability-mismatch"))
    expect(compare(read(proof), read(proof, { idle: false }))).toEqual(Either.left("report-not-idle"))
    expect(compare(read(proof, { version: 2 }), read(proof))).toEqual(Either.left("report-not-version-3"))
    expect(compare(read(proof), read(proof, { stack: "stack-b" }))).toEqual(Either.left("report-wrong-stack"))
    expect(compare(read(proof), read({ ...proof, stack: "stack-b" as StackId }))).toEqual(Either.left("report-wrong-stack"))
    const { incomingWake: _absent, ...withoutProof } = read(proof)
    expect(compareForStop({ stack, idleHold, requested: both, initial: read(proof), final: withoutProof })).toEqual(Either.left("report-not-version-3"))
  })
})
