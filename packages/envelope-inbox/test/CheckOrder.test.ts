import { expect, layer } from "@effect/vitest"
import { HttpBody, HttpServer } from "@effect/platform"
import { Effect, Redacted, Stream } from "effect"
import { generateKeyPairSync, randomBytes } from "node:crypto"
import { vi } from "vitest"
import { rawExchange, SqlCounter } from "@delivery/testing"
import { auditOf, counts, generousEnv, KeyLookups, post, producer, secondDevice, SuiteLive } from "./support/Harness.ts"
import { envelopeJson, signJson } from "./support/Signing.ts"

// Counts every Ed25519 verification made through node:crypto (the inbox's signature check), so
// "no signature work" is observed rather than inferred from the order of the code.
const signatures = vi.hoisted(() => ({ verifications: 0 }))
vi.mock("node:crypto", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:crypto")>()
  const verify = ((...args: Parameters<typeof actual.verify>) => {
    signatures.verifications++
    return actual.verify(...args)
  }) as typeof actual.verify
  return { ...actual, default: { ...actual, verify }, verify }
})

/** Statements, key lookups and signature verifications performed while `effect` runs. */
const work = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const counter = yield* SqlCounter
    const lookups = yield* KeyLookups
    const before = { statements: (yield* counter.statements).length, lookups: yield* lookups.count, verifications: signatures.verifications }
    const result = yield* effect
    const statements = (yield* counter.statements).slice(before.statements)
    return {
      result,
      statements,
      keyLookups: (yield* lookups.count) - before.lookups,
      verifications: signatures.verifications - before.verifications
    }
  })

const bogusToken = () => `device_${randomBytes(12).toString("hex")}_${randomBytes(32).toString("base64url")}`

layer(SuiteLive(), { excludeTestServices: true })("spec 000: the inbound checks run in order, and the order is observable", (it) => {
  it.effect("authenticate the opaque credential first: an unauthenticated request causes no key lookup, no signature work and no query beyond the credential's own lookup, and writes no audit row", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const envelope = p.envelope({ sequence: 1 })
      // Missing and malformed credentials cost nothing at all; an unknown one costs its one indexed lookup.
      for (const token of [undefined, "not-a-token"]) {
        const { keyLookups, result, statements, verifications } = yield* work(post(envelope, token))
        expect(result.status).toBe(401)
        expect({ statements: statements.length, keyLookups, verifications }).toEqual({ statements: 0, keyLookups: 0, verifications: 0 })
      }
      const { keyLookups, result, statements, verifications } = yield* work(post(envelope, bogusToken()))
      expect([result.status, result.body.reason]).toEqual([401, "unknown"])
      expect(statements).toHaveLength(1)
      expect(statements[0]).toContain("identity_device_credentials")
      expect({ keyLookups, verifications }).toEqual({ keyLookups: 0, verifications: 0 })
      expect(yield* counts(p.tenant)).toEqual({ streams: 0, identities: 0, payloads: 0, audit: 0 })
    }))

  it.effect("compare the envelope route with the verified tenant before resolving keys: a foreign tenant is 403 route-tenant-mismatch with no key lookup or signature work, and its audit row is the only write", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const victim = yield* producer()
      const foreign = victim.envelope({ sequence: 1 })
      const { keyLookups, result, statements, verifications } = yield* work(post(foreign, p.token))
      expect([result.status, result.body.reason]).toEqual([403, "route-tenant-mismatch"])
      expect({ keyLookups, verifications }).toEqual({ keyLookups: 0, verifications: 0 })
      // The credential lookup, then the audit insert; nothing touches keys, streams or identities.
      expect(statements).toHaveLength(2)
      expect(statements[1]).toMatch(/^INSERT INTO inbox_audit/)
      expect(statements.some((s) => s.includes("signer_keys") || s.includes("inbox_streams"))).toBe(false)
      // The audit row belongs to the verified tenant, never to the one the route claimed.
      expect((yield* auditOf(p.tenant)).map((row) => [row.outcome, row.reason, row.device])).toEqual([["refused", "route-tenant-mismatch", "d-1"]])
      expect(yield* counts(victim.tenant)).toEqual({ streams: 0, identities: 0, payloads: 0, audit: 0 })
    }))

  it.effect("a valid envelope does its work in order: credential lookup, one key lookup, one signature verification, then one transaction in one statement", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const { keyLookups, result, statements, verifications } = yield* work(post(p.envelope({ sequence: 1 }), p.token))
      expect(result.status).toBe(201)
      expect({ keyLookups, verifications }).toEqual({ keyLookups: 1, verifications: 1 })
      const shape = statements.map((s) => s.trim().split(/\s+/).slice(0, 3).join(" "))
      expect(shape).toEqual([
        expect.stringContaining("SELECT"), // the device credential
        expect.stringContaining("SELECT"), // the signing key, inside the verified tenant
        // Steps 5 and 6 in one autocommit statement, so one transaction: the stream lock, the identity
        // checks, then identity, payload, audit and cursor (migrations/0005_inbox_ingest_function.sql), for this
        // envelope alone (nothing else was arriving: migrations/0035_inbox_ingest_batch.sql).
        "SELECT o_index AS"
      ])
      expect(statements[1]).toContain("signer_keys")
      expect(statements[2]).toContain("FROM inbox_ingest_batch(")
    }))

  // Each of these envelopes fails both step 3 and step 4: the answer must be step 3's.
  const failsStep4 = (tenant: string): ReadonlyArray<[string, Record<string, unknown>]> => [
    ["schema version 2", { ...envelopeJson({ tenant, sequence: 1 }), schemaVersion: 2 }],
    ["metadata with an unknown member", { ...envelopeJson({ tenant, sequence: 1 }), metadata: { kind: "task.proposed", subject: "t", attributes: {}, x: 1 } }],
    ["metadata of the wrong kind", { ...envelopeJson({ tenant, sequence: 1 }), metadata: { kind: "task.deleted", subject: "t", attributes: {} } }]
  ]

  it.effect("resolve keys and verify the Ed25519 signature (step 3) before the schema version and metadata (step 4): a bad signature on an envelope that also fails step 4 is 403 signature-invalid after one key lookup and one verification", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const stranger = generateKeyPairSync("ed25519").privateKey
      for (const [name, json] of failsStep4(p.tenant)) {
        const { keyLookups, result, verifications } = yield* work(post(signJson(json, stranger), p.token))
        expect([name, result.status, result.body.reason]).toEqual([name, 403, "signature-invalid"])
        expect({ keyLookups, verifications }).toEqual({ keyLookups: 1, verifications: 1 })
        // The same envelope signed by the producer's own key reaches step 4.
        const signed = yield* post(signJson(json, p.privateKey), p.token)
        expect([name, signed.status]).toEqual([name, 422])
        expect(["schema-version-unsupported", "metadata-invalid"]).toContain(signed.body.reason)
      }
    }))

  it.effect("keys are resolved inside the verified scope before step 4: an unknown key id with invalid metadata does the key lookup and is 403 key-unknown, never metadata-invalid, with no verification", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      for (const [name, json] of failsStep4(p.tenant)) {
        const { keyLookups, result, verifications } = yield* work(post(signJson({ ...json, keyId: "k9" }, p.privateKey), p.token))
        expect([name, result.status, result.body.reason]).toEqual([name, 403, "key-unknown"])
        expect({ keyLookups, verifications }).toEqual({ keyLookups: 1, verifications: 0 })
      }
      // Metadata without an RFC 8785 form (a lone surrogate) has no signed bytes; the key is still looked up first.
      const text = JSON.stringify(signJson({ ...envelopeJson({ tenant: p.tenant, sequence: 1 }), keyId: "k9" }, p.privateKey))
        .replace("task-42", "task-42\\ud800")
      const lone = yield* work(post(text, p.token))
      expect([lone.result.status, lone.result.body.reason, lone.keyLookups, lone.verifications]).toEqual([403, "key-unknown", 1, 0])
      expect((yield* auditOf(p.tenant)).map((row) => row.reason)).toEqual([...failsStep4(p.tenant).map(() => "key-unknown"), "key-unknown"])
    }))

  it.effect("the outer adapter enforces its body limit before constructing a request: an oversized body is 413 body-too-large before authentication, with no query at all", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const huge = JSON.stringify({ ...p.envelope({ sequence: 1 }), padding: "x".repeat(70 * 1024) })
      for (const token of [bogusToken(), Redacted.value(p.token)]) {
        const { keyLookups, result, statements, verifications } = yield* work(post(huge, token))
        expect(result.status).toBe(413)
        expect(result.body).toMatchObject({ _tag: "EnvelopeTooLarge", reason: "body-too-large", limit: 65536 })
        expect({ statements: statements.length, keyLookups, verifications }).toEqual({ statements: 0, keyLookups: 0, verifications: 0 })
      }
      expect(yield* counts(p.tenant)).toEqual({ streams: 0, identities: 0, payloads: 0, audit: 0 })
    }))
})

// A suite of its own: the limiter is built with the service, and this one has a small limit.
layer(SuiteLive({ ...generousEnv, SYNC_INGEST_LIMIT: "2", SYNC_INGEST_WINDOW: "1 minute" }), { excludeTestServices: true })(
  "spec 000: the configured sync limiter",
  (it) => {
    it.effect("The limiter runs after authentication and before route/key/signature/database work: past SYNC_INGEST_LIMIT the answer is 429 sync-rate-limited with Retry-After, after only the credential lookup", () =>
      Effect.gen(function* () {
        const p = yield* producer()
        expect((yield* post(p.envelope({ sequence: 1 }), p.token)).status).toBe(201)
        expect((yield* post(p.envelope({ sequence: 2 }), p.token)).status).toBe(201)
        for (const sequence of [3, 4]) {
          const { keyLookups, result, statements, verifications } = yield* work(post(p.envelope({ sequence }), p.token))
          expect([result.status, result.body.reason]).toEqual([429, "sync-rate-limited"])
          const retryAfter = Number(result.headers["retry-after"])
          expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60).toBe(true)
          expect(statements).toHaveLength(1)
          expect(statements[0]).toContain("identity_device_credentials")
          expect({ keyLookups, verifications }).toEqual({ keyLookups: 0, verifications: 0 })
        }
        expect(yield* counts(p.tenant)).toMatchObject({ identities: 2, audit: 2 })
      }))

    it.effect("the limiter is keyed only by verified tenant/account/device plus sync-ingest: another device has its own budget, and a foreign route spends the caller's", () =>
      Effect.gen(function* () {
        const p = yield* producer()
        const other = yield* producer()
        const laptop = yield* secondDevice(p, "d-2")
        // Two refused foreign-route submissions spend d-1's budget, not the other tenant's.
        for (let i = 0; i < 2; i++) expect((yield* post(other.envelope({ sequence: 1 }), p.token)).status).toBe(403)
        expect((yield* post(p.envelope({ sequence: 1 }), p.token)).status).toBe(429)
        expect((yield* post(p.envelope({ sequence: 1 }), laptop.token)).status).toBe(201)
        expect((yield* post(other.envelope({ sequence: 1 }), other.token)).status).toBe(201)
      }))
  }
)

// A chunked body has no Content-Length: the bounded reader stops at the limit.
layer(SuiteLive({ ...generousEnv, INBOX_MAX_ENVELOPE_BYTES: "2048" }), { excludeTestServices: true })("spec 000: the body limit", (it) => {
  it.effect("an undeclared (chunked) body over INBOX_MAX_ENVELOPE_BYTES is 413 body-too-large, read no further than the limit, with no query", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const chunk = new TextEncoder().encode(" ".repeat(1024))
      const body = HttpBody.stream(Stream.make(chunk, chunk, chunk, chunk), "application/json")
      const { result, statements } = yield* work(post(body, p.token))
      expect([result.status, result.body.reason, result.body.limit]).toEqual([413, "body-too-large", 2048])
      expect(statements).toHaveLength(0)
    }))

  it.effect("a declared Content-Length over INBOX_MAX_ENVELOPE_BYTES is 413 body-too-large before a byte of the body is read: the answer comes while the body is never sent, with no query", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const address = (yield* HttpServer.HttpServer).address
      const port = address._tag === "TcpAddress" ? address.port : 0
      const counter = yield* SqlCounter
      const before = (yield* counter.statements).length
      // Only the head goes out: a reader that waited for the declared 4,096 bytes would never answer within the wait.
      const answer = yield* rawExchange(
        port,
        `POST /controlplane/v1/envelopes HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Bearer ${Redacted.value(p.token)}\r\n` +
          "Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n",
        5_000
      )
      expect(answer.raw.split("\r\n")[0]).toBe("HTTP/1.1 413 Payload Too Large")
      expect(JSON.parse(answer.body)).toMatchObject({ reason: "body-too-large", limit: 2048 })
      expect((yield* counter.statements).slice(before)).toHaveLength(0)
    }))
})
