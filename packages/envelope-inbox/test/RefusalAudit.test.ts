import { expect, layer } from "@effect/vitest"
import { RateLimiter } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { DeviceId, type VerifiedIdentity } from "@delivery/identity"
import { logProbe, SqlCounter } from "@delivery/testing"
import { ConfigProvider, Context, Duration, Effect, Layer, Schedule, TestClock, TestContext, TestServices } from "effect"
import { randomBytes } from "node:crypto"
import { EnvelopeInbox, FLUSH_FAILED, MAX_PENDING_WINDOWS, RefusalAudit, SyncLimiter } from "../src/index.ts"
import { InboxRepo } from "../src/InboxRepo.ts"
import { generousEnv, newCorrelationId, producer, type Producer, receive, ServicesLive } from "./support/Harness.ts"

const WINDOW = Duration.minutes(1)
const limitedEnv = { ...generousEnv, SYNC_INGEST_LIMIT: "1", SYNC_INGEST_WINDOW: "1 minute" }

/**
 * An inbox of its own, built inside the test (under its TestClock, so the flusher's ticks follow the clock),
 * with its RefusalAudit in the output so that a test can flush on demand as a tick would.
 */
const inboxUnderTest = (extra: Layer.Layer<never> = Layer.empty) =>
  EnvelopeInbox.DefaultWithoutDependencies.pipe(
    Layer.provideMerge(RefusalAudit.Default),
    Layer.provide(SyncLimiter.Default),
    Layer.provide(InboxRepo.Default),
    Layer.provide(RateLimiter.layerStoreMemory),
    Layer.provide(extra),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(limitedEnv)))))
  )

interface CountedRow {
  readonly device: string | null
  readonly refusal_count: number
  readonly correlation_id: string
  readonly recorded_at: Date
}

const countedRows = (tenant: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<CountedRow>`
      SELECT device, refusal_count, correlation_id, recorded_at FROM inbox_audit
      WHERE tenant = ${tenant} AND reason = 'sync-rate-limited' ORDER BY device`.withoutTransform)

/** Polls on real time (the TestClock is frozen between adjustments) until `done`, for at most 30 seconds. */
const eventually = <A, E, R>(effect: Effect.Effect<A, E, R>, done: (a: A) => boolean) =>
  TestServices.provideLive(
    effect.pipe(
      Effect.filterOrFail(done, () => "not yet" as const),
      Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("30 seconds")))
    )
  )

// The last sequence each producer's stream was sent, so that a later flood continues it.
const sent = new WeakMap<Producer, number>()

/** Spends each device's budget of one with an accepted envelope, then sends `flood[device]` more, all refused. */
const spendAndFlood = (p: Producer, context: Context.Context<EnvelopeInbox>, flood: Readonly<Record<string, number>>) =>
  Effect.gen(function* () {
    const send = (device: string, correlationId = newCorrelationId()) => {
      const sequence = (sent.get(p) ?? 0) + 1
      sent.set(p, sequence)
      return receive(p, p.envelope({ sequence }), { device, correlationId }).pipe(Effect.provide(context))
    }
    for (const device of Object.keys(flood)) expect((yield* send(device)).outcome).toBe("accepted")
    const counter = yield* SqlCounter
    const statementsBefore = yield* counter.count
    const first: Record<string, string> = {}
    for (const [device, count] of Object.entries(flood)) {
      for (let i = 0; i < count; i++) {
        const correlationId = newCorrelationId()
        first[device] ??= correlationId
        const refused = yield* Effect.flip(send(device, correlationId))
        expect([refused._tag, refused.reason]).toEqual(["SyncRateLimited", "sync-rate-limited"])
      }
    }
    // The request path of a rate-limited request: a counter in memory, no statement at all.
    expect((yield* counter.count) - statementsBefore).toBe(0)
    return first
  })

const deviceOf = (p: Producer, device: string): VerifiedIdentity => ({ _tag: "Device", tenant: p.tenant, account: p.account, device: DeviceId.make(device) })

/**
 * A trigger that fails the insert of this tenant's counted rows (only those of `device` when given), as a
 * database that cannot take them would; the returned effect drops it.
 */
const failCountedInserts = (p: Producer, device?: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const trigger = `refuse_${randomBytes(4).toString("hex")}`
    const onlyDevice = device === undefined ? "" : ` AND NEW.device = '${device}'`
    yield* sql.unsafe(`CREATE FUNCTION ${trigger}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.tenant = '${p.tenant}' AND NEW.reason = 'sync-rate-limited'${onlyDevice} THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$;
      CREATE TRIGGER ${trigger} BEFORE INSERT ON inbox_audit FOR EACH ROW EXECUTE FUNCTION ${trigger}()`)
    return Effect.orDie(sql.unsafe(`DROP TRIGGER IF EXISTS ${trigger} ON inbox_audit; DROP FUNCTION IF EXISTS ${trigger}()`))
  })

layer(ServicesLive(), { excludeTestServices: true })("spec 000: every authenticated refusal is audited, and the sync limiter runs before any database work", (it) => {
  it.effect("a flood of N rate-limited requests in one window costs no statement, and becomes exactly one audit row per identity carrying N, written once the window is over", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      yield* Effect.scoped(
        Effect.gen(function* () {
          const start = Date.parse("2030-01-01T00:00:00Z")
          yield* TestClock.setTime(start)
          const context = yield* Layer.build(inboxUnderTest())
          const audit = Context.get(context, RefusalAudit)
          const first = yield* spendAndFlood(p, context, { "d-1": 40, "d-2": 15 })

          // Within the window nothing is written, however often the flusher looks.
          yield* TestClock.adjust(Duration.subtract(WINDOW, Duration.millis(1)))
          expect(yield* audit.flushDue).toBe(0)
          expect(yield* countedRows(p.tenant)).toEqual([])

          // The window closes: the flusher's next tick writes one row per identity.
          yield* TestClock.adjust(Duration.seconds(1))
          const rows = yield* eventually(countedRows(p.tenant), (rows) => rows.length === 2)
          expect(rows).toEqual([
            { device: "d-1", refusal_count: 40, correlation_id: first["d-1"], recorded_at: new Date(start) },
            { device: "d-2", refusal_count: 15, correlation_id: first["d-2"], recorded_at: new Date(start) }
          ])

          // Written once: later ticks and flushes add nothing.
          yield* TestClock.adjust(WINDOW)
          expect(yield* audit.flushDue).toBe(0)
          expect(yield* countedRows(p.tenant)).toHaveLength(2)
        }).pipe(Effect.provide(TestContext.TestContext))
      )
    }))

  it.effect("the next window gets a row of its own: refusals after the limiter admitted the identity again are not added to the written row", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
          const context = yield* Layer.build(inboxUnderTest())
          yield* spendAndFlood(p, context, { "d-1": 3 })
          yield* TestClock.adjust(Duration.sum(WINDOW, Duration.seconds(1)))
          yield* eventually(countedRows(p.tenant), (rows) => rows.length === 1)
          yield* spendAndFlood(p, context, { "d-1": 5 })
          yield* TestClock.adjust(Duration.sum(WINDOW, Duration.seconds(1)))
          const rows = yield* eventually(countedRows(p.tenant), (rows) => rows.length === 2)
          expect(rows.map((row) => row.refusal_count).sort()).toEqual([3, 5])
        }).pipe(Effect.provide(TestContext.TestContext))
      )
    }))

  it.effect("at shutdown the service's scope finalizer writes the windows still open, before they are over", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const first = yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
          const context = yield* Layer.build(inboxUnderTest())
          const first = yield* spendAndFlood(p, context, { "d-1": 7 })
          yield* TestClock.adjust(Duration.seconds(10))
          expect(yield* countedRows(p.tenant)).toEqual([])
          return first
        }).pipe(Effect.provide(TestContext.TestContext))
      )
      // The scope is closed, and with it the finalizer has run: no waiting here.
      expect((yield* countedRows(p.tenant)).map((row) => [row.device, row.refusal_count, row.correlation_id])).toEqual([
        ["d-1", 7, first["d-1"]]
      ])
    }))

  it.effect("a failed flush is logged with a stable code and retried on the next tick; nothing is lost or written twice", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const dropTrigger = yield* failCountedInserts(p)
      const logs = yield* logProbe
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
          const context = yield* Layer.build(inboxUnderTest(logs.layer))
          yield* spendAndFlood(p, context, { "d-1": 12 })
          yield* TestClock.adjust(Duration.sum(WINDOW, Duration.seconds(1)))
          const failed = yield* TestServices.provideLive(
            logs.next((entry) => entry.annotations.code === FLUSH_FAILED).pipe(
              Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => "no failed flush was logged" as const })
            )
          )
          // The literal, not FLUSH_FAILED: operators match this documented text, so renaming it breaks their alerts.
          expect(failed.annotations).toMatchObject({ code: "inbox-audit-flush-failed", operation: "insertCountedRefusals", sqlstate: "P0001" })
          expect(failed.message).toContain("retrying on the next tick")
          expect(yield* countedRows(p.tenant)).toEqual([])
          yield* dropTrigger
          yield* TestClock.adjust(Duration.seconds(1))
          const rows = yield* eventually(countedRows(p.tenant), (rows) => rows.length > 0)
          expect(rows.map((row) => [row.device, row.refusal_count])).toEqual([["d-1", 12]])
        }).pipe(Effect.provide(TestContext.TestContext), Effect.ensuring(dropTrigger))
      )
      expect(yield* countedRows(p.tenant)).toHaveLength(1)
    }))

  it.effect("a refusal at the instant the limiter admits the identity again starts the next window, even before the flusher has written the previous one", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const start = Date.parse("2030-01-01T00:00:00Z")
      const [first, second] = yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(start)
          const context = yield* Layer.build(inboxUnderTest())
          // Half a second off the flusher's ticks, so that no tick writes the first window before the second starts.
          yield* TestClock.adjust(Duration.millis(500))
          const first = yield* spendAndFlood(p, context, { "d-1": 3 })
          yield* TestClock.adjust(WINDOW)
          return [first, yield* spendAndFlood(p, context, { "d-1": 5 })] as const
        }).pipe(Effect.provide(TestContext.TestContext))
      )
      // The scope's finalizer wrote whatever no tick had: both windows are in, however the ticks were timed.
      const rows = [...yield* countedRows(p.tenant)].sort((a, b) => a.recorded_at.getTime() - b.recorded_at.getTime())
      expect(rows.map((row) => [row.refusal_count, row.correlation_id, row.recorded_at])).toEqual([
        [3, first["d-1"], new Date(start + 500)],
        [5, second["d-1"], new Date(start + 500 + Duration.toMillis(WINDOW))]
      ])
    }))

  it.effect("a refusal whose retryAfter reaches past the window's end extends the window: the identity is not admitted before then, so those refusals share its row", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const first = newCorrelationId()
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
          const context = yield* Layer.build(inboxUnderTest())
          const audit = Context.get(context, RefusalAudit)
          const identity = deviceOf(p, "d-1")
          yield* TestClock.adjust(Duration.millis(500))
          yield* audit.record(identity, first, 60_000)
          // Ten seconds later the limiter answers 60 seconds again: it admits the identity 70 seconds after the first refusal.
          yield* TestClock.adjust(Duration.seconds(10))
          yield* audit.record(identity, newCorrelationId(), 60_000)
          yield* TestClock.adjust(Duration.seconds(55))
          expect(yield* audit.flushDue).toBe(0)
          yield* audit.record(identity, newCorrelationId(), 5_000)
        }).pipe(Effect.provide(TestContext.TestContext))
      )
      expect((yield* countedRows(p.tenant)).map((row) => [row.device, row.refusal_count, row.correlation_id])).toEqual([["d-1", 3, first]])
    }))

  it.effect("more windows than one statement's 1,000 rows are written in several statements, each window's row once", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
          const context = yield* Layer.build(inboxUnderTest())
          const audit = Context.get(context, RefusalAudit)
          // Half a second off the ticks: the windows end between two of them, and only the flush below takes them.
          yield* TestClock.adjust(Duration.millis(500))
          for (let i = 0; i <= 1_000; i++) yield* audit.record(deviceOf(p, `d-${i}`), newCorrelationId(), 60_000)
          yield* TestClock.adjust(WINDOW)
          const counter = yield* SqlCounter
          const statementsBefore = yield* counter.count
          expect(yield* audit.flushDue).toBe(1_001)
          expect((yield* counter.count) - statementsBefore).toBe(2)
          const rows = yield* countedRows(p.tenant)
          expect(rows).toHaveLength(1_001)
          expect(new Set(rows.map((row) => row.device)).size).toBe(1_001)
        }).pipe(Effect.provide(TestContext.TestContext))
      )
    }))

  it.effect("when a later statement of a flush fails, only its rows and those after it are retried: rows already written are not written twice", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      // Only the 1,001st window's row fails: the first statement (1,000 rows) commits, the second does not.
      const dropTrigger = yield* failCountedInserts(p, "d-1000")
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
          const context = yield* Layer.build(inboxUnderTest())
          const audit = Context.get(context, RefusalAudit)
          yield* TestClock.adjust(Duration.millis(500))
          for (let i = 0; i <= 1_000; i++) yield* audit.record(deviceOf(p, `d-${i}`), newCorrelationId(), 60_000)
          yield* TestClock.adjust(WINDOW)
          const failure = yield* Effect.flip(audit.flushDue)
          expect([failure._tag, failure.operation]).toEqual(["StorageFailure", "insertCountedRefusals"])
          expect(yield* countedRows(p.tenant)).toHaveLength(1_000)
          yield* dropTrigger
          expect(yield* audit.flushDue).toBe(1)
          const rows = yield* countedRows(p.tenant)
          expect(rows).toHaveLength(1_001)
          expect(new Set(rows.map((row) => row.device)).size).toBe(1_001)
        }).pipe(Effect.provide(TestContext.TestContext), Effect.ensuring(dropTrigger))
      )
    }))

  it.effect("while the database stays away at most 100,000 windows wait: past that the oldest are dropped, and an error with the same code counts their refusals", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const dropTrigger = yield* failCountedInserts(p)
      const logs = yield* logProbe
      // The next entry with the code, or else the test's own line `label`: whatever a flush logged was queued before that line.
      const nextUpTo = (label: string) => logs.next((entry) => entry.annotations.code === FLUSH_FAILED || entry.message === label)
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
          const context = yield* Layer.build(inboxUnderTest(logs.layer))
          const audit = Context.get(context, RefusalAudit)
          yield* TestClock.adjust(Duration.millis(500))
          const oldest = deviceOf(p, "oldest")
          for (let i = 0; i < 3; i++) yield* audit.record(oldest, newCorrelationId(), 60_000)
          for (let i = 0; i < MAX_PENDING_WINDOWS; i++) yield* audit.record(deviceOf(p, `d-${i}`), newCorrelationId(), 60_000)
          yield* TestClock.adjust(WINDOW)

          yield* Effect.flip(audit.flushDue)
          yield* Effect.logInfo("first flush over")
          const dropped = yield* nextUpTo("first flush over")
          expect(dropped.message).toContain("dropped")
          expect(dropped.annotations).toMatchObject({ code: FLUSH_FAILED, windows: 1, refusals: 3 })
          expect((yield* nextUpTo("first flush over")).message).toBe("first flush over")

          // Exactly the maximum waits now: the next failed flush drops nothing.
          yield* Effect.flip(audit.flushDue)
          yield* Effect.logInfo("second flush over")
          expect((yield* nextUpTo("second flush over")).message).toBe("second flush over")
        }).pipe(Effect.provide(TestContext.TestContext))
      ).pipe(Effect.ensuring(dropTrigger))
    }))

  it.effect("a failed write at shutdown is logged with the same code, and its counts are lost", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const dropTrigger = yield* failCountedInserts(p)
      const logs = yield* logProbe
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
          const context = yield* Layer.build(inboxUnderTest(logs.layer))
          yield* spendAndFlood(p, context, { "d-1": 4 })
        }).pipe(Effect.provide(TestContext.TestContext))
      ).pipe(Effect.ensuring(dropTrigger))
      // The scope closed without a failure, its finalizer having logged the one it met.
      const failed = yield* logs.next((entry) => entry.annotations.code === FLUSH_FAILED).pipe(
        Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => "no failed flush was logged" as const })
      )
      expect(failed.message).toContain("not written at shutdown")
      expect(failed.annotations).toMatchObject({ operation: "insertCountedRefusals", sqlstate: "P0001" })
      expect(yield* countedRows(p.tenant)).toEqual([])
    }))
})
