import { expect, it, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Chunk, Duration, Effect, Fiber, Layer, Logger, Queue, TestClock, TestContext } from "effect"
import {
  AuditActor,
  CorrelationId,
  KEY_AUDIT_LIMIT,
  KeySource,
  purgeRevokedLoop,
  Signer,
  SignerStorageUnavailable,
  type TenantId
} from "../src/index.ts"
import { keyId, keyPair, tenant } from "./fixtures.ts"

const TestLayer = Signer.Default.pipe(Layer.provide(KeySource.layerNone), Layer.provideMerge(TestDatabaseLive))
const k = { a1: keyPair(1), a2: keyPair(2) }
const operator = (correlationId: string) => ({
  actor: AuditActor.make("operator:environment"),
  // Deliberately unchecked: a correlation id the table's CHECK refuses makes the audit insert fail.
  correlationId: correlationId as CorrelationId
})

const auditOf = (t: TenantId) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ key_id: string; action: string; outcome: string; actor: string; correlation_id: string }>`
      SELECT key_id, action, outcome, actor, correlation_id FROM signer_key_audit WHERE tenant = ${t} ORDER BY id`
      .withoutTransform)

/**
 * The real Signer whose every purge sweep reports what it purged once its database work is done. With
 * the loop then seen asleep on the TestClock, that is the signal that a tick has finished (its work runs
 * on the real clock, however far the TestClock moved), instead of a sleep and a hope.
 */
const reportingPurges = Effect.gen(function* () {
  const real = yield* Signer
  const sweeps = yield* Queue.unbounded<ReadonlyArray<{ readonly tenant: string; readonly keyId: string }>>()
  const signer = Signer.make({
    ...real,
    purgeRevoked: (by) => real.purgeRevoked(by).pipe(Effect.tap((purged) => Queue.offer(sweeps, purged)))
  })
  /** The key ids of `tenant` that the next sweep purged, once the loop sleeps again. */
  const nextSweep = (tenant: TenantId) =>
    Effect.gen(function* () {
      const purged = yield* Queue.take(sweeps)
      yield* Effect.repeat(TestClock.sleeps(), { until: (sleeps) => Chunk.isNonEmpty(sleeps) })
      return purged.filter((key) => key.tenant === tenant).map((key) => key.keyId)
    })
  return { signer, nextSweep } as const
})

layer(TestLayer, { excludeTestServices: true })("signer_key_audit: every key change has its audit row, in its own transaction", (it) => {
  it.effect("a key change commits with its audit row or not at all: when the audit insert fails, the change rolls back", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const t = tenant("atomic")
      const failed = yield* Effect.flip(signer.registerKeyAs(t, keyId("k1"), k.a1.publicKey, operator("not a valid id!")))
      expect(failed).toBeInstanceOf(SignerStorageUnavailable)
      expect(yield* signer.keys(t)).toEqual([])

      yield* signer.registerKeyAs(t, keyId("k1"), k.a1.publicKey, operator("ok-1"))
      const rotation = yield* Effect.flip(signer.rotateAs(t, keyId("k2"), k.a2.publicKey, operator("not a valid id!")))
      expect(rotation._tag).toBe("SignerStorageUnavailable")
      // The retirement of k1 was in the same transaction: it rolled back with the failed audit row.
      expect((yield* signer.keys(t)).map((key) => [key.keyId, key.state])).toEqual([["k1", "active"]])
      expect((yield* auditOf(t)).map((row) => [row.key_id, row.action, row.correlation_id])).toEqual([["k1", "register", "ok-1"]])
    }))

  it.effect("direct calls (no operator) are audited too, as system:signer with a fresh correlation id each", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const t = tenant("direct")
      yield* signer.registerKey(t, keyId("k1"), k.a1.publicKey)
      yield* signer.rotate(t, keyId("k2"), k.a2.publicKey)
      const rows = yield* auditOf(t)
      expect(rows.map((row) => [row.key_id, row.action, row.actor])).toEqual([
        ["k1", "register", "system:signer"],
        ["k1", "retire", "system:signer"],
        ["k2", "rotate", "system:signer"]
      ])
      expect(rows[0]!.correlation_id).not.toBe(rows[1]!.correlation_id)
      expect(rows[1]!.correlation_id).toBe(rows[2]!.correlation_id)
    }))

  it.effect("Signer.keyAudit reads the tenant's signer_key_audit rows, newest first: key id, action, outcome, actor, time, correlation id; never another tenant's", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const t = tenant("audit-read")
      expect(yield* signer.keyAudit(t)).toEqual([])
      yield* signer.registerKeyAs(t, keyId("k1"), k.a1.publicKey, operator("reg-1"))
      yield* signer.rotateAs(t, keyId("k2"), k.a2.publicKey, operator("rot-1"))
      yield* signer.revokeAs(t, keyId("k1"), operator("rev-1"))
      yield* signer.revokeAs(t, keyId("k1"), operator("rev-2"))
      yield* signer.registerKey(tenant("audit-other"), keyId("k1"), k.a1.publicKey)
      const trail = yield* signer.keyAudit(t)
      expect(trail.map(({ at: _, ...entry }) => ({ ...entry }))).toEqual([
        { keyId: "k1", action: "revoke", outcome: "unchanged", actor: "operator:environment", correlationId: "rev-2" },
        { keyId: "k1", action: "revoke", outcome: "applied", actor: "operator:environment", correlationId: "rev-1" },
        { keyId: "k2", action: "rotate", outcome: "applied", actor: "operator:environment", correlationId: "rot-1" },
        { keyId: "k1", action: "retire", outcome: "applied", actor: "operator:environment", correlationId: "rot-1" },
        { keyId: "k1", action: "register", outcome: "applied", actor: "operator:environment", correlationId: "reg-1" }
      ])
      const times = trail.map((entry) => entry.at.getTime())
      expect(times).toEqual([...times].sort((a, b) => b - a))
    }))

  it.effect("Signer.keyAudit is bounded: the newest 100 rows", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const t = tenant("audit-bound")
      for (let i = 0; i <= KEY_AUDIT_LIMIT + 4; i++) {
        yield* signer.registerKeyAs(t, keyId("k1"), k.a1.publicKey, operator(`reg-${i}`))
      }
      const trail = yield* signer.keyAudit(t)
      expect(trail.length).toBe(KEY_AUDIT_LIMIT)
      expect([trail[0]!.correlationId, trail[KEY_AUDIT_LIMIT - 1]!.correlationId]).toEqual([`reg-${KEY_AUDIT_LIMIT + 4}`, "reg-5"])
    }))

  it.effect("signer-purge-revoked: the sweep removes a revoked key only after its replay window, with a purge audit row", () =>
    Effect.gen(function* () {
      const signer = yield* Signer
      const t = tenant("sweep")
      yield* TestClock.setTime(Date.parse("2025-06-01T00:00:00Z"))
      yield* signer.registerKey(t, keyId("k1"), k.a1.publicKey)
      yield* signer.revoke(t, keyId("k1"), operator("revoke-1"))
      const { nextSweep, signer: reporting } = yield* reportingPurges
      const loop = yield* Effect.fork(Effect.provideService(purgeRevokedLoop(Duration.days(1)), Signer, reporting))
      // Ticks inside the window leave the revoked key where it is (it keeps refusing its envelopes). The
      // clock moves a day at a time, each move waking exactly one tick, seen to finish before the next.
      expect(yield* nextSweep(t)).toEqual([])
      for (let day = 1; day < 90; day++) {
        yield* TestClock.adjust(Duration.days(1))
        expect([day, yield* nextSweep(t)]).toEqual([day, []])
      }
      expect((yield* signer.keys(t)).map((key) => key.state)).toEqual(["revoked"])
      // Day 90: the window is over, and that day's tick removes it.
      yield* TestClock.adjust(Duration.days(1))
      expect(yield* nextSweep(t)).toEqual(["k1"])
      expect(yield* signer.keys(t)).toEqual([])
      expect(yield* TestClock.currentTimeMillis).toBeGreaterThanOrEqual(Date.parse("2025-06-01T00:00:00Z") + Duration.toMillis(Duration.days(90)))
      const rows = yield* auditOf(t)
      expect(rows.map((row) => [row.action, row.actor])).toEqual([
        ["register", "system:signer"],
        ["revoke", "operator:environment"],
        ["purge", "system:signer-purge"]
      ])
      yield* Fiber.interrupt(loop)
    }).pipe(Effect.provide(TestContext.TestContext)))
})

it.effect("signer-purge-revoked: a failed tick is logged, then the loop waits its interval and tries again", () =>
  Effect.gen(function* () {
    let calls = 0
    const logged: Array<string> = []
    // A Signer whose table is away on the first sweep; only purgeRevoked is ever called.
    const Flaky = Layer.succeed(
      Signer,
      Signer.make({
        purgeRevoked: () =>
          Effect.suspend(() =>
            ++calls === 1 ? Effect.fail(new SignerStorageUnavailable({ operation: "purgeRevoked" })) : Effect.succeed([])
          )
      } as unknown as Parameters<typeof Signer.make>[0])
    )
    const loop = yield* Effect.fork(
      purgeRevokedLoop(Duration.minutes(10)).pipe(
        Effect.provide(Flaky),
        Effect.provide(Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => void logged.push(String(message)))))
      )
    )
    yield* TestClock.adjust(Duration.minutes(1))
    expect(calls).toBe(1)
    expect(logged.some((line) => line.includes("signing-key purge failed"))).toBe(true)
    yield* TestClock.adjust(Duration.minutes(9))
    expect(calls).toBe(2)
    yield* TestClock.adjust(Duration.minutes(10))
    expect(calls).toBe(3)
    yield* Fiber.interrupt(loop)
  }))
