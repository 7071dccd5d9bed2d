import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { spawnSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import {
  decodeEnvelope,
  encodeBase64Url,
  eventIdentity,
  privateKeyFromSeed,
  rawPublicKey,
  requireSupportedSchemaVersion,
  signEnvelope,
  signingBytes,
  verifyEnvelopeSignature
} from "../src/index.ts"

// The worked example of docs/controlplane-envelope.md, recomputed from the page itself: every
// fenced block labelled "```<lang> <label>" is read, so the page cannot drift from the code.
const page = readFileSync(new URL("../../../docs/controlplane-envelope.md", import.meta.url), "utf8")

const blocks = new Map<string, string>()
for (const match of page.matchAll(/^```[a-z]+ ([a-z0-9-]+)\n([\s\S]*?)\n```$/gm)) {
  if (blocks.has(match[1]!)) throw new Error(`docs/controlplane-envelope.md labels two blocks "${match[1]}"`)
  blocks.set(match[1]!, match[2]!)
}
const block = (label: string): string => {
  const text = blocks.get(label)
  if (text === undefined) throw new Error(`docs/controlplane-envelope.md has no block labelled "${label}"`)
  return text
}

describe("docs/controlplane-envelope.md: the worked example is reproduced byte for byte", () => {
  const seed = new Uint8Array(Buffer.from(block("seed-hex"), "hex"))
  const privateKey = privateKeyFromSeed(seed)
  const publicKey = rawPublicKey(privateKey)
  const envelopeText = block("envelope")
  const envelope = Either.getOrThrow(decodeEnvelope(JSON.parse(envelopeText)))

  it("the fixed key pair is derived from the documented seed 00..1f", () => {
    expect(seed).toEqual(new Uint8Array(Array.from({ length: 32 }, (_, i) => i)))
    expect(Buffer.from(publicKey).toString("hex")).toBe(block("public-key-hex"))
    expect(encodeBase64Url(publicKey)).toBe(block("public-key-base64url"))
  })

  it("the documented envelope parses as a closed controlplane/v1 envelope of schema version 1", () => {
    expect(Either.isRight(requireSupportedSchemaVersion(envelope))).toBe(true)
  })

  it("the signed bytes are exactly the documented RFC 8785 text, UTF-8 encoded (JCS without `signature`)", () => {
    const expected = Buffer.from(block("canonical-signing-bytes"), "utf8")
    expect(Buffer.from(signingBytes(envelope)).equals(expected)).toBe(true)
    expect(String(expected.length)).toBe(block("signing-bytes-length"))
  })

  it("the event identity is the documented SHA-256 of the signed bytes", () => {
    expect(eventIdentity(envelope)).toBe(block("event-identity"))
  })

  it("signing with the fixed key gives the documented signature (Ed25519 is deterministic), and it verifies", () => {
    const { signature: _, ...unsigned } = envelope
    expect(signEnvelope(unsigned, privateKey).signature).toBe(block("signature"))
    expect(envelope.signature).toBe(block("signature"))
    expect(verifyEnvelopeSignature(envelope, publicKey)).toBe(true)
  })

  it("the 'verify it yourself' snippet prints true under Node with only node:crypto", () => {
    const dir = mkdtempSync(join(tmpdir(), "envelope-example-"))
    try {
      writeFileSync(join(dir, "envelope.json"), envelopeText)
      writeFileSync(join(dir, "verify.mjs"), block("verify-node"))
      const run = spawnSync("node", ["verify.mjs"], { cwd: dir, encoding: "utf8", timeout: 30_000 })
      expect(run.stderr).toBe("")
      expect(run.stdout.trim()).toBe("true")
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
