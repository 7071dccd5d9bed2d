import { expect, layer } from "@effect/vitest"
import { RateLimiter } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { SqlCounter } from "@delivery/testing"
import { ConfigProvider, Context, Duration, Effect, Layer, Schedule, TestClock, TestContext, TestServices } from "effect"
import { randomBytes } from "node:crypto"
import { EnvelopeInbox, FLUSH_FAILED, RefusalAudit, SyncLimiter } from "../src/index.ts"
import { InboxRepo } from "../src/InboxRepo.ts"
import { generousEnv, newCorrelationId, producer, type Producer, receive, ServicesLive } from "./support/Harness.ts"
import { logProbe } from "./support/Logs.ts"

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
      const sql = yield* SqlClient.SqlClient
      const trigger = `refuse_${randomBytes(4).toString("hex")}`
      yield* sql.unsafe(`CREATE FUNCTION ${trigger}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.tenant = '${p.tenant}' AND NEW.reason = 'sync-rate-limited' THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$;
        CREATE TRIGGER ${trigger} BEFORE INSERT ON inbox_audit FOR EACH ROW EXECUTE FUNCTION ${trigger}()`)
      const dropTrigger = Effect.orDie(sql.unsafe(`DROP TRIGGER IF EXISTS ${trigger} ON inbox_audit; DROP FUNCTION IF EXISTS ${trigger}()`))
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
          expect(failed.annotations).toMatchObject({ code: FLUSH_FAILED, operation: "insertCountedRefusals", sqlstate: "P0001" })
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
})
