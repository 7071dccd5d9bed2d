import { describe, expect, it } from "@effect/vitest"
import type { SigningKey } from "@delivery/signer"
import { randomBytes } from "node:crypto"
import { keyObjectOf } from "../src/EnvelopeInbox.ts"

// Step 3 looks the key up on every request (that lookup decides whether it may verify); only the decoding of its
// public key into a KeyObject is cached. A hit returns the very object decoded before, a miss a new one.
const key = (publicKey: Uint8Array = randomBytes(32)) => ({ publicKey }) as unknown as SigningKey

describe("decoded signing keys (spec 000 step 3: resolve keys inside the verified scope, verify Ed25519)", () => {
  it("a public key is decoded once and reused by its bytes, whichever row or copy carries them; another key gets its own", () => {
    const a = key()
    const decoded = keyObjectOf(a)
    const other = keyObjectOf(key())
    expect(other).not.toBe(decoded)
    expect(keyObjectOf(a)).toBe(decoded)
    expect(keyObjectOf(key(Uint8Array.from(a.publicKey)))).toBe(decoded)
  })

  it("at most 1,024 decoded keys are kept: a new key past that empties the cache, so key churn cannot grow it", () => {
    // Whatever the cache holds now, fresh keys fill it within 1,024 insertions; the one that finds it full
    // empties it. Watching a marker key shows when: from then on the cache holds exactly two keys.
    let marker = key()
    let decoded = keyObjectOf(marker)
    let emptied = false
    for (let i = 0; i < 1_024 && !emptied; i++) {
      keyObjectOf(key())
      const again = keyObjectOf(marker)
      emptied = again !== decoded
      decoded = again
    }
    expect(emptied).toBe(true)
    // Two keys held; 1,022 more fill it to 1,024, every one still there.
    marker = key(marker.publicKey)
    for (let i = 0; i < 1_022; i++) keyObjectOf(key())
    expect(keyObjectOf(marker)).toBe(decoded)
    // The next new key finds it full: the marker is decoded afresh.
    keyObjectOf(key())
    expect(keyObjectOf(marker)).not.toBe(decoded)
  })
})
