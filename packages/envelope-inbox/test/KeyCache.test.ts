import { expect, layer } from "@effect/vitest"
import { KeyId, RawPublicKey, rawPublicKey, Signer } from "@delivery/signer"
import { SqlCounter } from "@delivery/testing"
import { Effect } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { auditOf, counts, generousEnv, KeyLookups, post, producer, streamOf, SuiteLive } from "./support/Harness.ts"
import { envelopeJson, signJson } from "./support/Signing.ts"

/** Statements and key lookups performed while `effect` runs. */
const work = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const counter = yield* SqlCounter
    const lookups = yield* KeyLookups
    const before = { statements: (yield* counter.statements).length, lookups: yield* lookups.count }
    const result = yield* effect
    return {
      result,
      statements: (yield* counter.statements).slice(before.statements),
      keyLookups: (yield* lookups.count) - before.lookups
    }
  })

// A one-second replay window, so that a retired key expires and a revoked one can be purged within a test.
layer(SuiteLive({ ...generousEnv, SIGNER_REPLAY_WINDOW: "1 second" }), { excludeTestServices: true })(
  "spec 000 step 3 with cached public keys: the key's state is read in the committing transaction",
  (it) => {
    it.effect("a key's public key is looked up once per process: the next envelope costs the credential lookup and the one ingest statement", () =>
      Effect.gen(function* () {
        const p = yield* producer()
        const first = yield* work(post(p.envelope({ sequence: 1 }), p.token))
        expect([first.result.status, first.keyLookups, first.statements.length]).toEqual([201, 1, 3])
        const next = yield* work(post(p.envelope({ sequence: 2 }), p.token))
        expect([next.result.status, next.keyLookups]).toEqual([201, 0])
        expect(next.statements).toHaveLength(2)
        expect(next.statements[0]).toContain("identity_device_credentials")
        expect(next.statements[1]).toContain("FROM inbox_ingest_batch(")
        expect(next.statements.some((s) => s.includes("signer_keys"))).toBe(false)
      }))

    it.effect("a key revoked while its public key is cached is refused at once: 403 key-revoked, its audit row the only write", () =>
      Effect.gen(function* () {
        const p = yield* producer()
        const signer = yield* Signer
        expect((yield* post(p.envelope({ sequence: 1 }), p.token)).status).toBe(201)
        yield* signer.revoke(p.tenant, p.keyId)
        // The key's bytes are still cached (no lookup): the refusal comes from the ingest statement's transaction.
        const { keyLookups, result, statements } = yield* work(post(p.envelope({ sequence: 2 }), p.token))
        expect([result.status, result.body._tag, result.body.reason]).toEqual([403, "EnvelopeForbidden", "key-revoked"])
        expect(keyLookups).toBe(0)
        expect(statements).toHaveLength(2)
        expect(statements[1]).toContain("FROM inbox_ingest_batch(")
        // Nothing committed but the refusal's audit row: no identity, no payload, the cursor where it was.
        expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 1, payloads: 1, audit: 2 })
        expect((yield* streamOf(p.tenant))?.cursor).toBe(1)
        const audit = yield* auditOf(p.tenant)
        expect(audit.map((row) => [row.outcome, row.reason])).toEqual([["accepted", "accepted"], ["refused", "key-revoked"]])
        expect(audit[1]!.event_identity).toMatch(/^[0-9a-f]{64}$/)
        // And every later envelope under that key is refused too, now after an ordinary lookup (the entry was dropped).
        const again = yield* work(post(p.envelope({ sequence: 2 }), p.token))
        expect([again.result.status, again.result.body.reason, again.keyLookups]).toEqual([403, "key-revoked", 1])
        expect(yield* counts(p.tenant)).toMatchObject({ identities: 1, payloads: 1, audit: 3 })
      }))

    it.effect("a stream first seen under a key revoked while cached is not even created", () =>
      Effect.gen(function* () {
        const p = yield* producer()
        const signer = yield* Signer
        expect((yield* post(p.envelope({ sequence: 1 }), p.token)).status).toBe(201)
        yield* signer.revoke(p.tenant, p.keyId)
        const other = yield* post(p.envelope({ sequence: 1, producer: "phone-2" }), p.token)
        expect([other.status, other.body.reason]).toEqual([403, "key-revoked"])
        expect(yield* streamOf(p.tenant, "phone-2")).toBeUndefined()
      }))

    it.effect("step 3 still wins with a cached key: a bad signature or bad metadata under a key revoked since it was cached is key-revoked", () =>
      Effect.gen(function* () {
        const p = yield* producer()
        const signer = yield* Signer
        expect((yield* post(p.envelope({ sequence: 1 }), p.token)).status).toBe(201)
        yield* signer.revoke(p.tenant, p.keyId)
        const stranger = generateKeyPairSync("ed25519").privateKey
        const badSignature = yield* work(post(signJson(envelopeJson({ tenant: p.tenant, sequence: 2 }), stranger), p.token))
        expect([badSignature.result.status, badSignature.result.body.reason, badSignature.keyLookups]).toEqual([403, "key-revoked", 1])
        const q = yield* producer()
        expect((yield* post(q.envelope({ sequence: 1 }), q.token)).status).toBe(201)
        yield* signer.revoke(q.tenant, q.keyId)
        const version2 = signJson({ ...envelopeJson({ tenant: q.tenant, sequence: 2 }), schemaVersion: 2 }, q.privateKey)
        const badVersion = yield* work(post(version2, q.token))
        expect([badVersion.result.status, badVersion.result.body.reason, badVersion.keyLookups]).toEqual([403, "key-revoked", 1])
        expect((yield* auditOf(q.tenant)).map((row) => row.reason)).toEqual(["accepted", "key-revoked"])
      }))

    it.effect("a retired key whose replay window ends while its public key is cached is refused key-expired", () =>
      Effect.gen(function* () {
        const p = yield* producer()
        const signer = yield* Signer
        expect((yield* post(p.envelope({ sequence: 1 }), p.token)).status).toBe(201)
        yield* signer.rotate(p.tenant, KeyId.make("k2"), RawPublicKey.make(rawPublicKey(generateKeyPairSync("ed25519").privateKey)))
        // Retired: it keeps verifying through its window, still from the cache.
        const within = yield* work(post(p.envelope({ sequence: 2 }), p.token))
        expect([within.result.status, within.keyLookups]).toEqual([201, 0])
        yield* Effect.sleep("1100 millis")
        const after = yield* post(p.envelope({ sequence: 3 }), p.token)
        expect([after.status, after.body.reason]).toEqual([403, "key-expired"])
        expect(yield* counts(p.tenant)).toMatchObject({ identities: 2, audit: 3 })
      }))

    it.effect("a key id purged and registered again with other bytes: the cached bytes are replaced, never trusted", () =>
      Effect.gen(function* () {
        const p = yield* producer()
        const signer = yield* Signer
        expect((yield* post(p.envelope({ sequence: 1 }), p.token)).status).toBe(201)
        yield* signer.revoke(p.tenant, p.keyId)
        yield* Effect.sleep("1100 millis")
        expect((yield* signer.purgeRevoked()).some((key) => key.tenant === p.tenant)).toBe(true)
        const replacement = generateKeyPairSync("ed25519").privateKey
        yield* signer.registerKey(p.tenant, p.keyId, RawPublicKey.make(rawPublicKey(replacement)))
        // Signed by the old key, which verifies against the cached bytes: the ingest statement finds other bytes
        // registered, writes nothing, and the signature is checked again against them.
        const old = yield* work(post(p.envelope({ sequence: 2 }), p.token))
        expect([old.result.status, old.result.body.reason, old.keyLookups]).toEqual([403, "signature-invalid", 1])
        // Signed by the new key: accepted, from the bytes now cached.
        const fresh = yield* work(post(signJson(envelopeJson({ tenant: p.tenant, sequence: 2 }), replacement), p.token))
        expect([fresh.result.status, fresh.keyLookups]).toEqual([201, 0])
        expect((yield* auditOf(p.tenant)).map((row) => row.reason)).toEqual(["accepted", "signature-invalid", "accepted"])
      }))
  }
)
