import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { ProviderHttp } from "@delivery/core"
import { LoopbackProvider } from "@delivery/testing"
import { Chunk, Effect, TestClock, TestContext, TestServices } from "effect"
import { DeliveryRepo } from "../src/DeliveryRepo.ts"
import { Outbox, OutboxSettings } from "../src/index.ts"
import { makeRecorder, RECORD_EVERY } from "../src/Recorder.ts"
import { fastSettings, request, resetOutbox, rowOf, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

const withTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, TestContext.TestContext)

/** Claims `n` fresh rows of tenant acme, as a worker's claim would. */
const claimed = (n: number) =>
  Effect.gen(function*() {
    yield* resetOutbox
    const receiver = yield* LoopbackProvider
    yield* setupTenant("acme", "web", receiver.urlFor("/hooks/acme"))
    const outbox = yield* Outbox
    for (let i = 0; i < n; i++) yield* outbox.enqueue(request("acme", "web"))
    const repo = yield* DeliveryRepo.pipe(Effect.provide(DeliveryRepo.Default))
    const now = new Date(yield* TestClock.currentTimeMillis)
    const rows = yield* repo.claim({ tenant: "acme", limit: n, now, leaseUntil: new Date(now.getTime() + 60_000), owner: "w1" })
    const settings = yield* OutboxSettings.pipe(Effect.provide(OutboxSettings.fromMap(fastSettings)))
    return { repo, rows, settings }
  })

/** The database refuses the next UPDATE of outbox_messages once (a sequence is not rolled back with it). */
const refuseNextUpdate = Effect.acquireRelease(
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all([
      sql.unsafe(`CREATE SEQUENCE recorder_refusals`),
      sql.unsafe(`CREATE FUNCTION recorder_refuse_once() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF nextval('recorder_refusals') = 1 THEN RAISE EXCEPTION 'refused once'; END IF; RETURN NULL; END $$`),
      sql.unsafe(`CREATE TRIGGER recorder_refuse_once BEFORE UPDATE ON outbox_messages
        FOR EACH STATEMENT EXECUTE FUNCTION recorder_refuse_once()`)
    ], { discard: true })),
  () =>
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.all([
        sql.unsafe(`DROP TRIGGER recorder_refuse_once ON outbox_messages`),
        sql.unsafe(`DROP FUNCTION recorder_refuse_once()`),
        sql.unsafe(`DROP SEQUENCE recorder_refusals`)
      ], { discard: true })).pipe(Effect.orDie)
)

/** Waits (real time, bounded) until the recorder's loop is back in its wait between two writes. */
const loopWaiting = Effect.gen(function*() {
  for (let i = 0; i < 2000; i++) {
    if (Chunk.isNonEmpty(yield* TestClock.sleeps())) return
    yield* TestServices.provideLive(Effect.sleep("5 millis"))
  }
  return yield* Effect.dieMessage("the recorder's loop never came back to its wait")
})

const delivered = new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 })

layer(SuiteLayer, { excludeTestServices: true })("Outbox recorder (spec 000, real PostgreSQL)", (it) => {
  it.effect("the recorder writes the outcomes that arrived every interval while the batch runs, and the rest at the end", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const { repo, rows, settings } = yield* claimed(2)
      const [first, second] = [rows[0]!, rows[1]!]
      const recorder = yield* makeRecorder(repo, settings)
      recorder.add(first, delivered)
      yield* TestClock.adjust(RECORD_EVERY)
      yield* loopWaiting
      expect(yield* rowOf(first.id)).toMatchObject({ state: "delivered", attempt: 1 })
      recorder.add(second, new ProviderHttp.Temporary({ code: "provider-5xx", status: 503 }))
      expect(yield* rowOf(second.id)).toMatchObject({ state: "delivering" })
      expect(yield* recorder.finish).toEqual({ delivered: 1, retried: 1, dead: 0, lost: 0 })
      expect(yield* rowOf(second.id)).toMatchObject({ state: "pending", last_error: "provider-5xx", attempt: 1 })
    })))

  it.effect("a recording write that fails keeps its outcomes: they are written by the next interval's write, not lost, and the writes go on", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const { repo, rows, settings } = yield* claimed(2)
      const [first, second] = [rows[0]!, rows[1]!]
      yield* refuseNextUpdate
      const recorder = yield* makeRecorder(repo, settings)
      recorder.add(first, delivered)
      yield* TestClock.adjust(RECORD_EVERY)
      yield* loopWaiting
      expect(yield* rowOf(first.id)).toMatchObject({ state: "delivering" })
      recorder.add(second, new ProviderHttp.Rejected({ code: "provider-4xx", status: 404 }))
      yield* TestClock.adjust(RECORD_EVERY)
      yield* loopWaiting
      expect(yield* rowOf(first.id)).toMatchObject({ state: "delivered", attempt: 1 })
      expect(yield* rowOf(second.id)).toMatchObject({ state: "dead", dead_reason: "rejected", last_error: "provider-4xx" })
      expect(yield* recorder.finish).toEqual({ delivered: 1, retried: 0, dead: 1, lost: 0 })
    }).pipe(Effect.scoped)))
})
