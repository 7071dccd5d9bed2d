import { expect, it, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { connect, freshDatabaseClient } from "@delivery/testing"
import { EmptyTestDatabaseLive, PgClusterFromVitest, TestDatabaseLive } from "@delivery/testing/vitest"
import { Duration, Effect, Either, Layer, TestClock, TestContext } from "effect"
import {
  AuditActor,
  CorrelationId,
  decodeEnvelope,
  type Envelope,
  KeySource,
  PURGE_BATCH,
  Signer,
  type SignRequest,
  signEnvelope,
  verifyEnvelopeSignature
} from "../src/index.ts"
import { keyId, keyPair, tenant, unsigned } from "./fixtures.ts"

// Key pairs by number; the key source holds the private halves the tests sign with through Signer.
const k = { a1: keyPair(1), a2: keyPair(2), a3: keyPair(3), other: keyPair(9) }
const KeySourceLive = KeySource.layerMemory(
  ["rot", "scope-a", "sign", "mismatch", "version"].flatMap((t) => [
    { tenant: tenant(t), keyId: keyId("k1"), seed: k.a1.seed },
    { tenant: tenant(t), keyId: keyId("k2"), seed: k.a2.seed }
  ])
)
const TestLayer = Signer.Default.pipe(Layer.provide(KeySourceLive), Layer.provideMerge(TestDatabaseLive))

/** An envelope signed in memory by `pair` for `t` under `kid` (what a producer would send). */
const envelopeFor = (t: string, kid: string, pair: ReturnType<typeof keyPair>, overrides: Record<string, unknown> = {}) =>
  signEnvelope(unsigned({ route: { tenant: t, project: "website", producer: "laptop-7" }, keyId: kid, ...overrides }), pair.privateKey)

/** The stable reason a refusal carries (the tag for errors without one, such as storage outages). */
const refusedReason = <A, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.flip(effect), (error) => ("reason" in error ? error.reason : error._tag))

// Expiry is driven by TestClock: time moves only when a test adjusts it.
const withTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, TestContext.TestContext)
const window = Duration.days(90)

layer(TestLayer, { excludeTestServices: true })("Signer on PostgreSQL (spec 000 step 3: keys resolved inside the verified scope)", (it) => {
  it.effect("sign/verify round trip: the signer signs with the tenant's active key id, verify accepts it", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      yield* signer.registerKey(tenant("sign"), keyId("k1"), k.a1.publicKey)
      const { keyId: _, ...request } = unsigned({ route: { tenant: "sign", project: "website", producer: "p" } })
      const signed = yield* signer.sign(request as SignRequest)
      expect(signed.keyId).toBe("k1")
      expect(verifyEnvelopeSignature(signed, k.a1.publicKey)).toBe(true)
      const verified = yield* signer.verify(signed)
      expect(verified.key.keyId).toBe("k1")
      expect(verified.eventIdentity).toMatch(/^[0-9a-f]{64}$/)
    }))

  it.effect("registerKey is idempotent for the same public key and a key-conflict for a different one", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const first = yield* signer.registerKey(tenant("reg"), keyId("k1"), k.a1.publicKey)
      expect(first).toMatchObject({ tenant: "reg", keyId: "k1", state: "active", verifyUntil: null })
      expect(Buffer.from(first.publicKey).equals(Buffer.from(k.a1.publicKey))).toBe(true)
      const again = yield* signer.registerKey(tenant("reg"), keyId("k1"), k.a1.publicKey)
      expect(again).toEqual(first)
      const conflict = yield* Effect.flip(signer.registerKey(tenant("reg"), keyId("k1"), k.a2.publicKey))
      expect(conflict).toMatchObject({ _tag: "KeyConflict", reason: "key-conflict", detail: "public-key-differs" })
      // A second key while one is active is a rotation, not a registration.
      const second = yield* Effect.flip(signer.registerKey(tenant("reg"), keyId("k2"), k.a2.publicKey))
      expect(second).toMatchObject({ reason: "key-conflict", detail: "tenant-has-active-key" })
      // No private key material is stored: the table has no column that could hold one.
      const sql = yield* SqlClient.SqlClient
      const columns = yield* sql<{ column_name: string }>`
        SELECT column_name FROM information_schema.columns WHERE table_name = 'signer_keys' ORDER BY ordinal_position`
      expect(columns.map((c) => c.column_name)).toEqual([
        "tenant", "key_id", "public_key", "state", "created_at", "retired_at", "revoked_at", "verify_until"
      ])
    }))

  it.effect("a wrong key id is key-unknown", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      yield* signer.registerKey(tenant("wrong-id"), keyId("k1"), k.a1.publicKey)
      expect(yield* refusedReason(signer.verify(envelopeFor("wrong-id", "k7", k.a1)))).toBe("key-unknown")
    }))

  it.effect("another tenant's key id is key-unknown: keys resolve only inside the verified tenant", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      yield* signer.registerKey(tenant("scope-a"), keyId("shared-name"), k.a1.publicKey)
      yield* signer.registerKey(tenant("scope-b"), keyId("only-b"), k.a2.publicKey)
      // Tenant a's envelope naming tenant b's key id: not found in a's scope.
      expect(yield* refusedReason(signer.verify(envelopeFor("scope-a", "only-b", k.a2)))).toBe("key-unknown")
      expect(yield* refusedReason(signer.resolveVerificationKey(tenant("scope-a"), keyId("only-b")))).toBe("key-unknown")
      // An envelope routed to tenant a, verified for authenticated tenant b, never reaches a's keys.
      const forA = envelopeFor("scope-a", "shared-name", k.a1)
      expect((yield* signer.verify(forA)).key.tenant).toBe("scope-a")
      expect(yield* refusedReason(signer.verify(forA, tenant("scope-b")))).toBe("key-unknown")
    }))

  it.effect("an envelope routed to another tenant is key-unknown even when the verified tenant holds the same key id and public key", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      yield* signer.registerKey(tenant("twin-a"), keyId("k1"), k.a1.publicKey)
      yield* signer.registerKey(tenant("twin-b"), keyId("k1"), k.a1.publicKey)
      const forA = envelopeFor("twin-a", "k1", k.a1)
      expect((yield* signer.verify(forA, tenant("twin-a"))).key.tenant).toBe("twin-a")
      // The signature would verify under twin-b's key: the route, not the key, decides.
      const outcome = yield* Effect.either(signer.verify(forA, tenant("twin-b")))
      expect(Either.isLeft(outcome) ? outcome.left : `verified with ${outcome.right.key.tenant}'s key`)
        .toMatchObject({ _tag: "KeyRefused", reason: "key-unknown", tenant: "twin-b", keyId: "k1" })
    }))

  it.effect("a bad signature is signature-invalid; bad base64url is signature-malformed before any key lookup", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      yield* signer.registerKey(tenant("bad-sig"), keyId("k1"), k.a1.publicKey)
      const good = envelopeFor("bad-sig", "k1", k.a1)
      expect(yield* refusedReason(signer.verify(envelopeFor("bad-sig", "k1", k.a2)))).toBe("signature-invalid")
      const tampered = { ...good, sequence: good.sequence + 1 } as Envelope
      expect(yield* refusedReason(signer.verify(tampered))).toBe("signature-invalid")
      for (const signature of [good.signature + "==", good.signature.replace(/^./, "+"), good.signature.slice(1)]) {
        const error = yield* Effect.flip(signer.verify({ ...good, signature }))
        expect(error).toMatchObject({ _tag: "SignatureRefused", reason: "signature-malformed" })
        expect(JSON.stringify(error)).not.toContain(good.signature.slice(5, 40))
      }
      // Malformed beats unknown: no database work is spent on a signature that cannot be one.
      const unknownAndMalformed = { ...envelopeFor("bad-sig", "nope", k.a1), signature: "x==" }
      expect(yield* refusedReason(signer.verify(unknownAndMalformed))).toBe("signature-malformed")
    }))

  it.effect("rotation: the new key id signs; the retired key verifies until verify_until, then key-expired", () =>
    withTestClock(Effect.gen(function* () {
      const signer = yield* Signer
      yield* TestClock.setTime(Date.parse("2025-01-01T00:00:00Z"))
      yield* signer.registerKey(tenant("rot"), keyId("k1"), k.a1.publicKey)
      const old = envelopeFor("rot", "k1", k.a1)
      yield* TestClock.adjust(Duration.hours(1))
      const rotated = yield* signer.rotate(tenant("rot"), keyId("k2"), k.a2.publicKey)
      expect(rotated.key).toMatchObject({ keyId: "k2", state: "active" })
      expect(rotated.retired.map((key) => [key.keyId, key.state])).toEqual([["k1", "retired"]])
      expect(rotated.retired[0]!.verifyUntil).toEqual(new Date(Date.parse("2025-01-01T01:00:00Z") + Duration.toMillis(window)))
      // Rotating again to the same key is acknowledged, not a second rotation.
      expect((yield* signer.rotate(tenant("rot"), keyId("k2"), k.a2.publicKey)).retired).toEqual([])
      expect(yield* refusedReason(signer.rotate(tenant("rot"), keyId("k1"), k.a1.publicKey))).toBe("key-conflict")
      // A key id names one public key for good: rotating to it with another key is refused, active or not.
      for (const [kid, pair] of [["k2", k.a3], ["k1", k.a3]] as const) {
        const outcome = yield* Effect.either(signer.rotate(tenant("rot"), keyId(kid), pair.publicKey))
        expect(Either.isLeft(outcome) ? outcome.left : `rotated to ${outcome.right.key.keyId}`)
          .toMatchObject({ _tag: "KeyConflict", reason: "key-conflict", keyId: kid, detail: "public-key-differs" })
      }

      const { keyId: _, ...request } = unsigned({ route: { tenant: "rot", project: "website", producer: "p" } })
      expect((yield* signer.sign(request as SignRequest)).keyId).toBe("k2")
      // Just before the end of the window the retired key still verifies ...
      yield* TestClock.adjust(Duration.subtract(window, Duration.millis(1)))
      expect((yield* signer.verify(old)).key.state).toBe("retired")
      // ... and from verify_until on it is expired, while the new key keeps verifying.
      yield* TestClock.adjust(Duration.millis(1))
      expect(yield* refusedReason(signer.verify(old))).toBe("key-expired")
      expect((yield* signer.verify(envelopeFor("rot", "k2", k.a2))).key.keyId).toBe("k2")
    })))

  it.effect("a revoked key is refused at once, and purgeRevoked removes it only after its window", () =>
    withTestClock(Effect.gen(function* () {
      const signer = yield* Signer
      yield* TestClock.setTime(Date.parse("2025-03-01T00:00:00Z"))
      yield* signer.registerKey(tenant("rev"), keyId("k1"), k.a1.publicKey)
      const envelope = envelopeFor("rev", "k1", k.a1)
      expect((yield* signer.verify(envelope)).key.keyId).toBe("k1")
      const revoked = yield* signer.revoke(tenant("rev"), keyId("k1"))
      expect(revoked).toMatchObject({ state: "revoked" })
      expect(yield* refusedReason(signer.verify(envelope))).toBe("key-revoked")
      expect(yield* signer.revoke(tenant("rev"), keyId("k1"))).toEqual(revoked)
      expect(yield* refusedReason(signer.revoke(tenant("rev"), keyId("nope")))).toBe("key-unknown")

      // Still inside the replay window: the row (and so the key id) stays, refusing as revoked.
      yield* TestClock.adjust(Duration.subtract(window, Duration.seconds(1)))
      expect(yield* signer.purgeRevoked()).toEqual([])
      expect(yield* refusedReason(signer.verify(envelope))).toBe("key-revoked")
      yield* TestClock.adjust(Duration.seconds(1))
      expect(yield* signer.purgeRevoked()).toEqual([{ tenant: "rev", keyId: "k1" }])
      expect(yield* signer.keys(tenant("rev"))).toEqual([])
      expect(yield* refusedReason(signer.verify(envelope))).toBe("key-unknown")
    })))

  it.effect("revoking a retired key keeps the end of its original window; active and retired keys are never purged", () =>
    withTestClock(Effect.gen(function* () {
      const signer = yield* Signer
      yield* TestClock.setTime(Date.parse("2025-05-01T00:00:00Z"))
      yield* signer.registerKey(tenant("rev-old"), keyId("k1"), k.a1.publicKey)
      const { retired } = yield* signer.rotate(tenant("rev-old"), keyId("k2"), k.a2.publicKey)
      yield* TestClock.adjust(Duration.days(30))
      const revoked = yield* signer.revoke(tenant("rev-old"), keyId("k1"))
      expect(revoked.verifyUntil).toEqual(retired[0]!.verifyUntil)
      yield* TestClock.adjust(Duration.days(365))
      expect(yield* signer.purgeRevoked()).toEqual([{ tenant: "rev-old", keyId: "k1" }])
      expect((yield* signer.keys(tenant("rev-old"))).map((key) => key.keyId)).toEqual(["k2"])
    })))

  it.effect("the operator forms say whether anything changed: applied the first time, unchanged on a repeat", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const by = { actor: AuditActor.make("operator:environment"), correlationId: CorrelationId.make("outcomes-1") }
      const t = tenant("outcomes")
      for (let round = 0; round < 2; round++) {
        const outcome = round === 0 ? "applied" : "unchanged"
        expect(yield* signer.registerKeyAs(t, keyId("k1"), k.a1.publicKey, by)).toMatchObject({ outcome, key: { keyId: "k1" } })
      }
      for (let round = 0; round < 2; round++) {
        const change = yield* signer.rotateAs(t, keyId("k2"), k.a2.publicKey, by)
        expect([change.outcome, change.key.keyId, change.retired.map((key) => key.keyId)])
          .toEqual(round === 0 ? ["applied", "k2", ["k1"]] : ["unchanged", "k2", []])
      }
      for (let round = 0; round < 2; round++) {
        expect(yield* signer.revokeAs(t, keyId("k1"), by))
          .toMatchObject({ outcome: round === 0 ? "applied" : "unchanged", key: { keyId: "k1", state: "revoked" }, retired: [] })
      }
    }))

  it.effect(`purgeRevoked deletes in batches of ${PURGE_BATCH} until none is left: one sweep removes every expired revoked key`, () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const sql = yield* SqlClient.SqlClient
      const count = PURGE_BATCH + 1
      yield* sql`
        INSERT INTO signer_keys (tenant, key_id, public_key, state, created_at, revoked_at, verify_until)
        SELECT 'bulk', 'b' || n, ${Buffer.from(k.a1.publicKey)}, 'revoked', '2000-01-01', '2000-01-01', '2000-03-31'
        FROM generate_series(1, ${count}) AS n`
      const purged = (yield* signer.purgeRevoked()).filter((key) => key.tenant === "bulk")
      expect(new Set(purged.map((key) => key.keyId)).size).toBe(count)
      expect(yield* signer.keys(tenant("bulk"))).toEqual([])
      const [audit] = yield* sql<{ n: number }>`
        SELECT count(*)::int AS n FROM signer_key_audit WHERE tenant = 'bulk' AND action = 'purge'`.withoutTransform
      expect(audit!.n).toBe(count)
    }))

  it.effect("sign refuses without an active key, and refuses when the source's key is not the registered one", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const { keyId: _, ...request } = unsigned({ route: { tenant: "mismatch", project: "website", producer: "p" } })
      expect(yield* refusedReason(signer.sign(request as SignRequest))).toBe("no-active-key")
      // The source holds pair a1 under k1, but k1 is registered with another pair's public key.
      yield* signer.registerKey(tenant("mismatch"), keyId("k1"), k.other.publicKey)
      expect(yield* refusedReason(signer.sign(request as SignRequest))).toBe("key-mismatch")
    }))

  it.effect("schemaVersion 2 passes parsing and signature verification; the version rule refuses it later", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      yield* signer.registerKey(tenant("version"), keyId("k1"), k.a1.publicKey)
      const v2 = Either.getOrThrow(decodeEnvelope(envelopeFor("version", "k1", k.a1, { schemaVersion: 2 })))
      expect((yield* signer.verify(v2)).key.keyId).toBe("k1")
      const { keyId: _, ...request } = unsigned({ schemaVersion: 2, route: { tenant: "version", project: "w", producer: "p" } })
      expect(yield* refusedReason(signer.sign(request as SignRequest))).toBe("schema-version-unsupported")
    }))

  it.effect("key management is serialized per tenant: concurrent registrations leave exactly one active key", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const results = yield* Effect.all(
        ["c1", "c2", "c3", "c4"].map((id, i) => Effect.either(signer.registerKey(tenant("race"), keyId(id), keyPair(20 + i).publicKey))),
        { concurrency: "unbounded" }
      )
      expect(results.filter(Either.isRight)).toHaveLength(1)
      for (const refused of results.filter(Either.isLeft)) {
        expect(refused.left).toMatchObject({ reason: "key-conflict", detail: "tenant-has-active-key" })
      }
      expect((yield* signer.keys(tenant("race"))).filter((key) => key.state === "active")).toHaveLength(1)
    }))
})

layer(Signer.Default.pipe(Layer.provide(KeySource.layerNone), Layer.provideMerge(EmptyTestDatabaseLive)), {
  excludeTestServices: true
})("Signer when its table cannot be read", (it) => {
  it.effect("a database failure is a typed SignerStorageUnavailable naming the operation, not a defect", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const error = yield* Effect.flip(signer.verify(envelopeFor("acme", "k1", k.a1)))
      expect(error).toEqual(expect.objectContaining({ _tag: "SignerStorageUnavailable", operation: "find" }))
      const rotate = yield* Effect.flip(signer.rotate(tenant("acme"), keyId("k2"), k.a2.publicKey))
      expect(rotate).toMatchObject({ _tag: "SignerStorageUnavailable" })
    }))
})

it.scoped("a database that went away: each key change fails as SignerStorageUnavailable naming its transaction", () =>
  Effect.gen(function* () {
    const { db, sql } = yield* freshDatabaseClient({ maxConnections: 1 })
    const signer = yield* Effect.provide(
      Signer,
      Signer.Default.pipe(Layer.provide(KeySource.layerNone), Layer.provide(Layer.succeed(SqlClient.SqlClient, sql)))
    )
    const admin = yield* connect(db.adminUrl, { maxConnections: 1 })
    yield* admin`DROP DATABASE ${admin(db.name)} WITH (FORCE)`
    // BEGIN is the first statement of each change: its failure is named after the change.
    const changes: ReadonlyArray<[string, Effect.Effect<unknown, { readonly _tag: string }>]> = [
      ["registerKey", signer.registerKey(tenant("gone"), keyId("k1"), k.a1.publicKey)],
      ["rotate", signer.rotate(tenant("gone"), keyId("k2"), k.a2.publicKey)],
      ["revoke", signer.revoke(tenant("gone"), keyId("k1"))]
    ]
    for (const [operation, change] of changes) {
      expect(yield* Effect.flip(change)).toMatchObject({ _tag: "SignerStorageUnavailable", operation })
    }
  }).pipe(Effect.provide(PgClusterFromVitest)))
