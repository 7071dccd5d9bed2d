import { presentedKeyMaterial } from "@delivery/identity"
import { encodeBase64Url, privateKeyFromSeed, publicKeyFromRaw, rawPublicKey } from "@delivery/signer"
import { describe, expect, it } from "@effect/vitest"
import { Either, Option, Schema } from "effect"
import { readFileSync } from "node:fs"
import type { StackId } from "../src/Domain.ts"
import { challengeOf, presentedFingerprint } from "../src/Fingerprint.ts"
import { type Bytes32, decodeCapability, DrainAssertion, DrainReport, signingBytes, signObject, verifyObject } from "../src/Protocol.ts"

// The worked example of docs/idle-wake.md, recomputed from the page itself: keys from the seeds, the assertion's
// signed bytes and signature, the challenge, the key fingerprint, and the signed report that answers it (which
// ReportExamples.test.ts produces with a real tenant).

const page = readFileSync(new URL("../../../docs/idle-wake.md", import.meta.url), "utf8")
const blocks = new Map<string, string>()
for (const match of page.matchAll(/^```[a-z]+ ([a-z0-9-]+)\n([\s\S]*?)\n```$/gm)) {
  if (blocks.has(match[1]!)) throw new Error(`docs/idle-wake.md labels two blocks "${match[1]}"`)
  blocks.set(match[1]!, match[2]!)
}
const block = (label: string): string => {
  const text = blocks.get(label)
  if (text === undefined) throw new Error(`docs/idle-wake.md has no block labelled "${label}"`)
  return text
}

describe("docs/idle-wake.md: the worked example is reproduced byte for byte", () => {
  const cloud = privateKeyFromSeed(new Uint8Array(Buffer.from(block("cloud-seed-hex"), "hex")))
  const report = privateKeyFromSeed(new Uint8Array(Buffer.from(block("report-seed-hex"), "hex")))
  const assertion = JSON.parse(block("assertion"))
  const { signature, ...unsigned } = assertion

  it("the public keys are the seeds' keys", () => {
    expect(encodeBase64Url(rawPublicKey(cloud))).toBe(block("cloud-public-key"))
    expect(encodeBase64Url(rawPublicKey(report))).toBe(block("report-public-key"))
    expect(Buffer.from(block("idle-hold"), "base64url")).toEqual(Buffer.from(Array.from({ length: 32 }, (_, i) => 0xe0 + i)))
  })

  it("the assertion is closed and well-formed, its capability the closed shape", () => {
    expect(Either.isRight(Schema.decodeUnknownEither(DrainAssertion, { onExcessProperty: "error" })(assertion))).toBe(true)
    expect(Either.isRight(decodeCapability(assertion.idleCapabilities))).toBe(true)
  })

  it("its signed bytes are the RFC 8785 form shown, and the signature is the cloud key's over them", () => {
    const bytes = signingBytes(assertion)
    expect(new TextDecoder().decode(bytes)).toBe(block("assertion-signing-bytes"))
    expect(bytes.length).toBe(Buffer.byteLength(block("assertion-signing-bytes")))
    expect(page).toContain(`(${bytes.length} bytes of UTF-8)`)
    expect(signObject(unsigned, cloud).signature).toBe(signature)
    expect(verifyObject(assertion, publicKeyFromRaw(Buffer.from(block("cloud-public-key"), "base64url")))).toBe(true)
  })

  it("the challenge and the board key's fingerprint follow from the stack, the idle hold and the token", () => {
    const challenge = challengeOf(assertion.stack as StackId, assertion.cycle.idleHold as Bytes32)
    expect(challenge).toBe(block("challenge"))
    const material = Option.getOrThrow(presentedKeyMaterial(block("board-token")))
    expect(presentedFingerprint(challenge, material)).toBe(block("board-fingerprint"))
  })

  it("the answer is a version 3 report signed by the report key, with the challenge and both keys' fingerprints", () => {
    const answer = JSON.parse(block("report-both"))
    expect(Either.isRight(Schema.decodeUnknownEither(DrainReport, { onExcessProperty: "error" })(answer))).toBe(true)
    expect(verifyObject(answer, publicKeyFromRaw(Buffer.from(block("report-public-key"), "base64url")))).toBe(true)
    expect(answer).toMatchObject({ version: 3, requestId: assertion.requestId, idle: true })
    expect(answer.incomingWake.challenge).toBe(block("challenge"))
    expect(answer.incomingWake.capability).toEqual(assertion.idleCapabilities.incomingWake)
    const fingerprints = answer.incomingWake.profiles["tenant-api-http-v2"].keys.map((key: { fingerprint: string }) => key.fingerprint)
    const fromTokens = ["board-token", "agent-token"].map((label) =>
      presentedFingerprint(block("challenge") as Bytes32, Option.getOrThrow(presentedKeyMaterial(block(label)))))
    expect([...fingerprints].sort()).toEqual([...fromTokens].sort())
    // Any change of the signed report breaks its signature.
    expect(verifyObject({ ...answer, idle: false }, publicKeyFromRaw(Buffer.from(block("report-public-key"), "base64url")))).toBe(false)
  })
})
