import { expect, layer } from "@effect/vitest"
import { WorkerRegistry } from "@delivery/core"
import { SqlClient } from "@effect/sql"
import { Chunk, ConfigProvider, Duration, Effect, Layer, Schedule, TestClock, TestContext, TestServices } from "effect"
import { randomBytes } from "node:crypto"
import { InboxRetention, InboxRetentionWorker, RETENTION_BATCH, retentionLoop } from "../src/index.ts"
import { auditOf, counts, post, producer, ServicesLive, streamOf, SuiteLive } from "./support/Harness.ts"
import { logProbe } from "@delivery/testing"

/** Statements run as the retention role, each in its own transaction (a refused one aborts it). */
const asRetentionRole = (statement: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(Effect.zipRight(sql`SET LOCAL ROLE inbox_retention`, sql.unsafe(statement))).pipe(
      Effect.as({ ok: true as const, code: undefined as string | undefined }),
      Effect.catchTag("SqlError", (error) => Effect.succeed({ ok: false as const, code: (error.cause as { code?: string }).code }))
    ))

/** A stream of its own holding `count` identities, the first `expired` of them with payloads that expired an hour ago. */
const seedPayloads = (tenant: string, count: number, expired: number) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [stream] = yield* sql<{ stream_id: string }>`
      INSERT INTO inbox_streams (tenant, project, producer, created_at, last_received_at)
      VALUES (${tenant}, 'website', 'seeded', now(), now()) RETURNING stream_id`.withoutTransform
    const id = stream!.stream_id
    yield* sql`
      INSERT INTO inbox_identities (stream_id, sequence, event_id, idempotency_key, event_identity, accepted_at)
      SELECT ${id}, g, 'seeded-event-' || lpad(g::text, 8, '0'), 'op-' || g, md5(g::text) || md5(g::text), now()
      FROM generate_series(1, ${count}) g`.withoutTransform
    yield* sql`
      INSERT INTO inbox_payloads (stream_id, sequence, envelope, expires_at)
      SELECT ${id}, g, '{}', CASE WHEN g <= ${expired} THEN now() - interval '1 hour' ELSE now() + interval '1 day' END
      FROM generate_series(1, ${count}) g`.withoutTransform
  })

const tenantName = () => `r-${randomBytes(5).toString("hex")}`

layer(SuiteLive(), { excludeTestServices: true })("spec 000 retention: payloads expire, identities stay", (it) => {
  it.effect("The cleanup query can delete only the payload table: as inbox_retention, deleting from or updating identities, streams (cursors, floors) or audit fails with permission denied", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      expect((yield* post(p.envelope({ sequence: 1 }), p.token)).status).toBe(201)
      const denied = [
        "DELETE FROM inbox_identities",
        "UPDATE inbox_identities SET accepted_at = now()",
        "DELETE FROM inbox_streams",
        "UPDATE inbox_streams SET contiguous_cursor = 0, replay_floor = 0",
        "DELETE FROM inbox_audit",
        "UPDATE inbox_audit SET reason = 'x'",
        "TRUNCATE inbox_payloads",
        "UPDATE inbox_payloads SET expires_at = now()",
        "INSERT INTO inbox_payloads SELECT * FROM inbox_payloads",
        "SELECT * FROM inbox_identities",
        "SELECT * FROM signer_keys",
        "SELECT * FROM identity_device_credentials"
      ]
      for (const statement of denied) {
        expect([statement, yield* asRetentionRole(statement)]).toEqual([statement, { ok: false, code: "42501" }])
      }
      // What it may do: read and delete payload rows (none expired here, so none go).
      expect(yield* asRetentionRole("DELETE FROM inbox_payloads WHERE expires_at < now() - interval '1000 years'")).toEqual({ ok: true, code: undefined })
      expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 1, payloads: 1, audit: 1 })
    }))

  it.effect("Inbox payloads are deleted in batches of at most 1,000, repeating until a batch comes back short; unexpired payloads and all identities stay", () =>
    Effect.gen(function* () {
      const tenant = tenantName()
      yield* seedPayloads(tenant, 2_600, 2_500)
      const retention = yield* InboxRetention
      const result = yield* retention.sweep()
      expect(result.batches.every((n) => n <= RETENTION_BATCH)).toBe(true)
      expect(result.batches).toEqual([1_000, 1_000, 500])
      expect(result.deleted).toBe(2_500)
      expect(yield* counts(tenant)).toEqual({ streams: 1, identities: 2_600, payloads: 100, audit: 0 })
      expect((yield* retention.sweep()).batches).toEqual([0])
    }))

  it.effect("a sweep is bounded: it stops after its maximum number of batches even when every batch came back full, and the next sweep takes the rest", () =>
    Effect.gen(function* () {
      const tenant = tenantName()
      yield* seedPayloads(tenant, 2_600, 2_500)
      const retention = yield* InboxRetention
      expect(yield* retention.sweep(undefined, 2)).toEqual({ batches: [1_000, 1_000], deleted: 2_000 })
      expect((yield* counts(tenant)).payloads).toBe(600)
      expect(yield* retention.sweep(undefined, 2)).toEqual({ batches: [500], deleted: 500 })
    }))

  it.effect("payload expiry cannot make an old event new again: re-sent after its payload expired (TestClock 90 days on), it is still a duplicate", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const retention = yield* InboxRetention
      const first = p.envelope({ sequence: 1, eventId: "old-event-00000001" })
      expect((yield* post(first, p.token)).status).toBe(201)
      expect((yield* post(p.envelope({ sequence: 2 }), p.token)).status).toBe(201)
      // 89 days on nothing has expired; 90 days and a second on, the default retention is over.
      const sweepAt = (after: Duration.Duration) =>
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.now() + Duration.toMillis(after))
          return yield* retention.sweep()
        }).pipe(Effect.provide(TestContext.TestContext))
      yield* sweepAt(Duration.days(89))
      expect(yield* counts(p.tenant)).toMatchObject({ payloads: 2 })
      yield* sweepAt(Duration.sum(Duration.days(90), Duration.seconds(1)))
      expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 2, payloads: 0, audit: 2 })
      expect(yield* streamOf(p.tenant)).toEqual({ cursor: 2, floor: 0, high: 2 })

      const again = yield* post(first, p.token)
      expect([again.status, again.body.outcome]).toEqual([200, "duplicate"])
      const reused = yield* post(p.envelope({ sequence: 3, eventId: "old-event-00000001" }), p.token)
      expect([reused.status, reused.body.reason]).toEqual([409, "event-id-conflict"])
      expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 2, payloads: 0, audit: 4 })
      expect((yield* auditOf(p.tenant)).map((row) => row.outcome)).toEqual(["accepted", "accepted", "duplicate", "refused"])
    }))

  it.effect("the retention worker (workerLayer inbox-retention) sweeps on its interval, and a failed sweep is logged and waited out, not fatal", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const tenant = tenantName()
      yield* seedPayloads(tenant, 30, 20)
      // Take the role's DELETE away: every sweep fails until it is granted back.
      yield* sql`REVOKE DELETE ON inbox_payloads FROM inbox_retention`
      const logs = yield* logProbe
      const worker = InboxRetentionWorker.pipe(
        Layer.provideMerge(WorkerRegistry.Default),
        Layer.provide(logs.layer),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["INBOX_RETENTION_INTERVAL", "50 millis"]]))))
      )
      const failedSweep = logs.next((entry) => entry.message.includes("inbox retention sweep failed"))
      yield* Effect.scoped(
        Effect.gen(function* () {
          const context = yield* Layer.build(worker)
          const registry = yield* Effect.provide(WorkerRegistry, context)
          // Two failed sweeps, observed: the loop waited out the first and tried again, and is still running.
          expect((yield* failedSweep).annotations).toMatchObject({ operation: "deleteExpired", sqlstate: "42501" })
          yield* failedSweep
          expect(yield* registry.snapshot).toEqual([{ name: "inbox-retention", status: "running" }])
          expect(yield* counts(tenant)).toMatchObject({ payloads: 30 })
          yield* sql`GRANT DELETE ON inbox_payloads TO inbox_retention`
          yield* counts(tenant).pipe(
            Effect.filterOrFail((c) => c.payloads === 10),
            Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo("30 seconds")))
          )
        })
      ).pipe(Effect.ensuring(Effect.orDie(sql`GRANT DELETE ON inbox_payloads TO inbox_retention`)))
      expect(yield* counts(tenant)).toEqual({ streams: 1, identities: 30, payloads: 10, audit: 0 })
    }))
})

// A database of its own: the log of a sweep counts every expired payload, so no other test's rows may be there.
layer(ServicesLive(), { excludeTestServices: true })("spec 000 retention: the worker's account of its sweeps", (it) => {
  it.effect("a sweep that deleted expired payloads logs how many and in how many statements; a sweep that deleted none logs nothing", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const start = Date.parse("2030-01-01T00:00:00Z")
      const tenant = tenantName()
      yield* seedPayloads(tenant, 30, 0)
      // 20 of them expire half an hour after the start, the others a day after: the first sweep finds nothing, the
      // one after the interval finds the 20. Half an hour, not the interval itself: the woken loop may read the
      // clock at the interval's end exactly, and a payload is expired only strictly before now.
      const after = (duration: Duration.DurationInput) => new Date(start + Duration.toMillis(duration))
      yield* sql`UPDATE inbox_payloads SET expires_at = CASE WHEN sequence <= 20 THEN ${after("30 minutes")}::timestamptz ELSE ${after("1 day")}::timestamptz END`
      const logs = yield* logProbe
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(start)
          yield* Effect.forkScoped(retentionLoop("1 hour").pipe(Effect.provide(logs.layer)))
          // The first sweep is over once the loop waits out its interval: a sleep that ends an hour after the
          // start. Other sleeps (the pool's own timeouts while the first sweep still runs) do not count.
          const clock = yield* TestClock.testClock()
          const intervalEnd = start + Duration.toMillis("1 hour")
          yield* TestServices.provideLive(clock.sleeps.pipe(
            Effect.filterOrFail((sleeps) => Chunk.some(sleeps, (wakeAt) => wakeAt === intervalEnd)),
            Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("30 seconds")))
          ))
          yield* TestClock.adjust("2 hours")
          const entry = yield* TestServices.provideLive(
            logs.next((entry) => entry.message.includes("inbox retention")).pipe(
              Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => "no sweep was logged" as const })
            )
          )
          expect([entry.message, entry.annotations]).toEqual(["inbox retention: expired payloads deleted", { deleted: 20, statements: 1 }])
        }).pipe(Effect.provide(TestContext.TestContext))
      )
      expect(yield* counts(tenant)).toMatchObject({ identities: 30, payloads: 10 })
    }))
})
