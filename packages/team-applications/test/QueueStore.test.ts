import { PersistedQueue } from "@effect/experimental"
import { Backoff } from "@delivery/core"
import { CountingSqlLive, logProbe, SqlCounter } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Cause, Context, Data, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, ParseResult, Schema, Scope } from "effect"
import { randomUUID } from "node:crypto"
import * as EffectQueueStore from "../src/EffectQueueStore.ts"

// The project's PersistedQueueStore (spec 002: "The queue owns the lease, the attempt count, and the retry delay")
// on real PostgreSQL, through Effect's `PersistedQueue` interface. Live clock, short leases (300-600 ms).

const Item = Schema.Struct({ n: Schema.Number })

interface StoreOptions extends Partial<EffectQueueStore.EffectQueueOptions> {}

/**
 * A store of its own (its own worker id and leases, its own client whose statements are counted and can be made to
 * fail) and a PersistedQueue over it, built in the test's scope.
 */
const storeFor = (name: string, options: StoreOptions = {}) =>
  Effect.gen(function* () {
    const context = yield* Layer.build(
      PersistedQueue.layer.pipe(
        Layer.provideMerge(EffectQueueStore.layer({
          leaseDuration: "600 millis",
          pollInterval: "20 millis",
          backoff: Backoff.make({ base: "200 millis", cap: "200 millis", jitter: 0 }),
          ...options
        })),
        Layer.provideMerge(CountingSqlLive)
      )
    )
    const queueOf = (queueName: string) => PersistedQueue.make({ name: queueName, schema: Item }).pipe(Effect.provide(context))
    const queue = yield* queueOf(name)
    return { queue, queueOf, store: Context.get(context, EffectQueueStore.EffectQueue), sql: Context.get(context, SqlCounter), context }
  })

const claims = (statements: ReadonlyArray<string>) => statements.filter((text) => text.includes("WITH due AS")).length

interface Row {
  readonly id: string
  readonly attempts: number
  readonly completed: boolean
  readonly exhausted: boolean
  readonly last_failure: string | null
  readonly leased: boolean
  readonly acquired_by: string | null
  readonly due_in_ms: number
  readonly ended: boolean
}

const rowsOf = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<Row>`
      SELECT id, attempts, completed, exhausted, last_failure, COALESCE(lease_expires_at > now(), false) AS leased, acquired_by::text AS acquired_by,
             (extract(epoch FROM available_at - now()) * 1000)::float8 AS due_in_ms, ended_at IS NOT NULL AS ended
      FROM effect_queue WHERE queue_name = ${name} ORDER BY sequence`.withoutTransform)

const rowOf = (name: string, id: string) => Effect.map(rowsOf(name), (rows) => rows.find((row) => row.id === id)!)

const queueName = () => `q-${randomUUID().slice(0, 8)}`

const within = <A, E, R>(effect: Effect.Effect<A, E, R>, limit: Duration.DurationInput = "10 seconds") =>
  Effect.timeoutFail(effect, { duration: limit, onTimeout: () => new Error("test wait timed out") })

const until = <R>(check: Effect.Effect<boolean, unknown, R>, limit: Duration.DurationInput = "10 seconds") =>
  within(Effect.gen(function* () {
    while (!(yield* check)) yield* Effect.sleep("20 millis")
  }), limit)

/** A `failed` hook for `name` that notes each call as `id#attempt:reason:exhausted`. */
const failuresOf = (name: string) => {
  const failures: Array<string> = []
  const hooks = {
    [name]: {
      failed: (ref: EffectQueueStore.AttemptRef, failure: EffectQueueStore.FailureRecord) =>
        Effect.sync(() => void failures.push(`${ref.id}#${ref.attempt}:${failure.reason}:${failure.exhausted}`))
    }
  }
  return { failures, hooks }
}

class Flaky extends Data.TaggedError("Flaky")<{ readonly reason: string; readonly retryAfter?: Duration.Duration }> {}

layer(TestDatabaseLive, { excludeTestServices: true })("effect queue store (spec 002: the queue owns lease, attempts and retry delay)", (it) => {
  it.scoped("offer and take through PersistedQueue: the handler gets the element and 0 earlier attempts; the item ends completed, counted as one attempt", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name)
      const id = yield* queue.offer({ n: 7 })
      const seen = yield* within(queue.take((value, meta) => Effect.succeed({ value, meta })))
      expect(seen).toEqual({ value: { n: 7 }, meta: { id, attempts: 0 } })
      expect(yield* rowOf(name, id)).toMatchObject({ attempts: 1, completed: true, exhausted: false, leased: false, acquired_by: null, ended: true })
    }))

  it.scoped("offer with the same id twice keeps one item; an offer in a rolled-back transaction leaves none", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name)
      const sql = yield* SqlClient.SqlClient
      yield* queue.offer({ n: 1 }, { id: `${name}-a` })
      yield* queue.offer({ n: 2 }, { id: `${name}-a` })
      yield* sql.withTransaction(Effect.zipRight(queue.offer({ n: 3 }, { id: `${name}-b` }), Effect.fail("rollback"))).pipe(Effect.ignore)
      const rows = yield* rowsOf(name)
      expect(rows.map((row) => row.id)).toEqual([`${name}-a`])
      const element = yield* sql<{ readonly element: string }>`SELECT element FROM effect_queue WHERE id = ${`${name}-a`}`.withoutTransform
      expect(JSON.parse(element[0]!.element)).toEqual({ n: 1 })
    }))

  it.scoped("'attempt counted at claim': while the handler runs the item already shows attempt 1 and a live lease held by this store", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue, store } = yield* storeFor(name)
      const id = yield* queue.offer({ n: 1 })
      const during = yield* within(queue.take(() => rowOf(name, id)))
      expect(during).toMatchObject({ attempts: 1, completed: false, leased: true, acquired_by: store.workerId })
    }))

  it.scoped("'Failed while a retry waits': a failed attempt records its reason and waits the backoff delay before the next attempt, which sees 1 earlier attempt", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name, { backoff: Backoff.make({ base: "700 millis", cap: "700 millis", jitter: 0 }) })
      const id = yield* queue.offer({ n: 1 })
      const failed = yield* Effect.exit(within(queue.take(() => new Flaky({ reason: "provider-5xx" }))))
      expect(Exit.isFailure(failed)).toBe(true)
      const row = yield* rowOf(name, id)
      expect(row).toMatchObject({ attempts: 1, completed: false, exhausted: false, last_failure: "provider-5xx", leased: false, ended: false })
      expect(row.due_in_ms).toBeGreaterThan(400)
      expect(row.due_in_ms).toBeLessThanOrEqual(700)
      const started = Date.now()
      const meta = yield* within(queue.take((_, meta) => Effect.succeed(meta)))
      expect(Date.now() - started).toBeGreaterThanOrEqual(400)
      expect(meta.attempts).toBe(1)
      expect(yield* rowOf(name, id)).toMatchObject({ attempts: 2, completed: true })
    }))

  it.scoped("a handler's retryAfter (a provider's Retry-After) replaces the backoff delay", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name)
      const id = yield* queue.offer({ n: 1 })
      yield* Effect.exit(within(queue.take(() => new Flaky({ reason: "provider-5xx", retryAfter: Duration.seconds(30) }))))
      const row = yield* rowOf(name, id)
      expect(row.due_in_ms).toBeGreaterThan(29_000)
      expect(row.due_in_ms).toBeLessThanOrEqual(30_000)
    }))

  it.scoped("a failure without a stable code is kept as handler-failed, a defect as handler-died (never a message)", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name, { backoff: Backoff.make({ base: "20 millis", cap: "20 millis", jitter: 0 }) })
      const id = yield* queue.offer({ n: 1 })
      yield* Effect.exit(within(queue.take(() => Effect.fail(new Error("secret body 123")))))
      expect((yield* rowOf(name, id)).last_failure).toBe("handler-failed")
      yield* Effect.exit(within(queue.take(() => Effect.die(new Error("boom")))))
      expect((yield* rowOf(name, id)).last_failure).toBe("handler-died")
      yield* Effect.exit(within(queue.take(() => new Flaky({ reason: "Not A Code" }))))
      expect((yield* rowOf(name, id)).last_failure).toBe("handler-failed")
      // A bare null failure, on an item of its own.
      const bareName = queueName()
      const bareStore = yield* storeFor(bareName)
      const bare = yield* bareStore.queue.offer({ n: 2 })
      yield* Effect.exit(within(bareStore.queue.take(() => Effect.fail(null))))
      expect(yield* rowOf(bareName, bare)).toMatchObject({ attempts: 1, last_failure: "handler-failed", leased: false })
    }))

  it.scoped("after maxAttempts failed attempts the item ends exhausted and is never taken again", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name, { backoff: Backoff.make({ base: "10 millis", cap: "10 millis", jitter: 0 }) })
      const id = yield* queue.offer({ n: 1 })
      for (let i = 0; i < 2; i++) yield* Effect.exit(within(queue.take(() => new Flaky({ reason: "provider-timeout" }), { maxAttempts: 2 })))
      expect(yield* rowOf(name, id)).toMatchObject({ attempts: 2, exhausted: true, completed: false, last_failure: "provider-timeout", ended: true })
      const again = yield* queue.take(() => Effect.succeed("taken"), { maxAttempts: 2 }).pipe(Effect.timeoutOption("300 millis"))
      expect(again._tag).toBe("None")
    }))

  it.scoped("'A worker that stops refreshing its lease loses it': another store takes the item after the lease, and 'the late owner records nothing'", () =>
    Effect.gen(function* () {
      const name = queueName()
      const completedHooks: Array<string> = []
      const hooks = { [name]: { completed: (ref: EffectQueueStore.AttemptRef) => Effect.sync(() => void completedHooks.push(`${ref.id}#${ref.attempt}`)) } }
      // A: never refreshes within the test (a stopped process); B: a healthy store.
      const a = yield* storeFor(name, { leaseDuration: "400 millis", refreshInterval: "1 hour", hooks })
      const b = yield* storeFor(name, { leaseDuration: "400 millis", hooks })
      const id = yield* a.queue.offer({ n: 1 })
      const release = yield* Deferred.make<void>()
      const late = yield* Effect.fork(a.queue.take(() => Effect.as(Deferred.await(release), "late")))
      yield* until(Effect.map(rowOf(name, id), (row) => row.attempts === 1))
      const takeover = yield* within(b.queue.take((_, meta) => Effect.succeed(meta.attempts)))
      expect(takeover).toBe(1)
      expect(yield* rowOf(name, id)).toMatchObject({ attempts: 2, completed: true, acquired_by: null })
      yield* Deferred.succeed(release, undefined)
      expect(yield* within(Fiber.join(late))).toBe("late")
      // The late owner's completion was refused: still attempt 2's outcome, and only attempt 2's hook ran.
      expect(yield* rowOf(name, id)).toMatchObject({ attempts: 2, completed: true })
      expect(completedHooks).toEqual([`${id}#2`])
    }))

  it.scoped("a live owner keeps its lease by refreshing it (by default every third of the lease): no other store takes the item while the attempt runs past the lease", () =>
    Effect.gen(function* () {
      const name = queueName()
      const a = yield* storeFor(name, { leaseDuration: "300 millis" })
      const b = yield* storeFor(name, { leaseDuration: "300 millis" })
      const id = yield* a.queue.offer({ n: 1 })
      const owner = yield* Effect.fork(a.queue.take(() => Effect.as(Effect.sleep("1200 millis"), "owner")))
      yield* until(Effect.map(rowOf(name, id), (row) => row.attempts === 1))
      const rival = yield* Effect.fork(b.queue.take(() => Effect.succeed("rival")))
      expect(yield* within(Fiber.join(owner))).toBe("owner")
      expect(yield* rowOf(name, id)).toMatchObject({ attempts: 1, completed: true })
      yield* Fiber.interrupt(rival)
    }))

  it.scoped("an interrupted attempt keeps its attempt counted and puts the item back, due at once, with no hook run (it neither completed nor failed)", () =>
    Effect.gen(function* () {
      const name = queueName()
      const ran: Array<string> = []
      const hooks = { [name]: { completed: () => Effect.sync(() => void ran.push("completed")), failed: () => Effect.sync(() => void ran.push("failed")) } }
      const { queue } = yield* storeFor(name, { hooks })
      const id = yield* queue.offer({ n: 1 })
      const running = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(queue.take(() => Effect.zipRight(Deferred.succeed(running, undefined), Effect.never)))
      yield* within(Deferred.await(running))
      yield* Fiber.interrupt(fiber)
      const row = yield* rowOf(name, id)
      expect(row).toMatchObject({ attempts: 1, completed: false, leased: false, acquired_by: null, last_failure: null })
      expect(row.due_in_ms).toBeLessThanOrEqual(0)
      expect(ran).toEqual([])
      expect(yield* within(queue.take((_, meta) => Effect.succeed(meta.attempts)))).toBe(1)
      expect(ran).toEqual(["completed"])
    }))

  it.scoped("a take interrupted while it waits on an empty queue locks nothing: the next taker gets a new item at once", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name, { pollInterval: "50 millis" })
      const waited = yield* queue.take(() => Effect.succeed("none")).pipe(Effect.timeoutOption("150 millis"))
      expect(waited._tag).toBe("None")
      const id = yield* queue.offer({ n: 1 })
      const started = Date.now()
      expect(yield* within(queue.take((_, meta) => Effect.succeed(meta.id)), "2 seconds")).toBe(id)
      expect(Date.now() - started).toBeLessThan(1000)
    }))

  it.scoped("closing the store returns what it claimed but handed to no taker, attempt given back (no handler ran); a handed item that was interrupted keeps its attempt", () =>
    Effect.gen(function* () {
      const name = queueName()
      const handed = new Set<string>()
      const offered = yield* Effect.scoped(Effect.gen(function* () {
        const { queue } = yield* storeFor(name, { leaseDuration: "60 seconds" })
        const ids = yield* Effect.forEach([1, 2, 3], (n) => queue.offer({ n }))
        // Two takers wait, so the poller claims for a round of four: all three items, one of them for no taker.
        const takers = yield* Effect.forkAll([1, 2].map(() =>
          queue.take((_, meta) => Effect.zipRight(Effect.sync(() => handed.add(meta.id)), Effect.never))
        ))
        yield* until(Effect.map(rowsOf(name), (rows) => handed.size === 2 && rows.every((row) => row.attempts === 1)))
        yield* Fiber.interrupt(takers)
        return ids
      }))
      const rows = yield* rowsOf(name)
      const [buffered] = offered.filter((id) => !handed.has(id))
      expect(buffered).toBeDefined()
      for (const row of rows) {
        expect(row).toMatchObject({ attempts: handed.has(row.id) ? 1 : 0, leased: false, acquired_by: null, completed: false })
        expect(row.due_in_ms).toBeLessThanOrEqual(0)
      }
      expect(rows.map((row) => row.id).sort()).toEqual([...offered].sort())
    }))

  it.scoped("hooks run in the outcome's transaction: a failing hook leaves its item unrecorded (lease left to expire) and the rest of the batch recorded", () =>
    Effect.gen(function* () {
      const name = queueName()
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE IF NOT EXISTS queue_hook_log (id text PRIMARY KEY)`.withoutTransform
      const hooks = {
        [name]: {
          completed: (ref: EffectQueueStore.AttemptRef, value: unknown) =>
            value === "bad"
              ? Effect.asVoid(sql`INSERT INTO queue_hook_log (id) VALUES (NULL)`.withoutTransform)
              : Effect.asVoid(sql`INSERT INTO queue_hook_log (id) VALUES (${ref.id})`.withoutTransform)
        }
      }
      const { queue } = yield* storeFor(name, { hooks, leaseDuration: "60 seconds" })
      const ids = yield* Effect.forEach([1, 2, 3], (n) => queue.offer({ n }))
      yield* within(Effect.all(
        [1, 2, 3].map(() => queue.take((value) => Effect.succeed(value.n === 2 ? "bad" : "good"))),
        { concurrency: 3 }
      ))
      const rows = yield* rowsOf(name)
      const byId = new Map(rows.map((row) => [row.id, row]))
      expect(byId.get(ids[0]!)).toMatchObject({ completed: true })
      expect(byId.get(ids[2]!)).toMatchObject({ completed: true })
      expect(byId.get(ids[1]!)).toMatchObject({ completed: false, leased: true, attempts: 1 })
      const logged = yield* sql<{ readonly id: string }>`SELECT id FROM queue_hook_log WHERE id = ANY(${ids}) ORDER BY id`.withoutTransform
      expect(logged.map((row) => row.id).sort()).toEqual([ids[0]!, ids[2]!].sort())
    }))

  it.scoped("an item whose last attempt lost its lease ends exhausted (lease-expired) without running the handler again", () =>
    Effect.gen(function* () {
      const name = queueName()
      const failures: Array<EffectQueueStore.FailureRecord> = []
      const hooks = { [name]: { failed: (_: EffectQueueStore.AttemptRef, failure: EffectQueueStore.FailureRecord) => Effect.sync(() => void failures.push(failure)) } }
      const a = yield* storeFor(name, { leaseDuration: "300 millis", refreshInterval: "1 hour", hooks })
      const b = yield* storeFor(name, { leaseDuration: "300 millis", hooks })
      const id = yield* a.queue.offer({ n: 1 })
      const stuck = yield* Effect.fork(a.queue.take(() => Effect.never, { maxAttempts: 1 }))
      yield* until(Effect.map(rowOf(name, id), (row) => row.attempts === 1))
      let ran = false
      const rival = yield* Effect.fork(b.queue.take(() => Effect.sync(() => { ran = true }), { maxAttempts: 1 }))
      yield* until(Effect.map(rowOf(name, id), (row) => row.exhausted))
      expect(yield* rowOf(name, id)).toMatchObject({ exhausted: true, last_failure: "lease-expired", attempts: 2, ended: true })
      expect(ran).toBe(false)
      expect(failures).toEqual([{ reason: "lease-expired", exhausted: true }])
      yield* Fiber.interrupt(rival)
      yield* Fiber.interrupt(stuck)
    }))

  it.scoped("clean-up removes only this queue's items that ended longer ago than asked, and never pending ones", () =>
    Effect.gen(function* () {
      const name = queueName()
      const other = queueName()
      const sql = yield* SqlClient.SqlClient
      const { queue, store } = yield* storeFor(name)
      const old = yield* queue.offer({ n: 1 })
      const recent = yield* queue.offer({ n: 2 })
      const waiting = yield* queue.offer({ n: 3 }, { id: `${name}-waiting` })
      yield* sql`UPDATE effect_queue SET available_at = now() + interval '1 hour' WHERE id = ${waiting}`.withoutTransform
      for (let i = 0; i < 2; i++) yield* within(queue.take(() => Effect.void))
      const otherQueue = yield* storeFor(other)
      const foreign = yield* otherQueue.queue.offer({ n: 4 })
      yield* within(otherQueue.queue.take(() => Effect.void))
      yield* sql`UPDATE effect_queue SET ended_at = now() - interval '31 days' WHERE id IN (${old}, ${foreign})`.withoutTransform
      yield* sql`UPDATE effect_queue SET ended_at = now() - interval '29 days' WHERE id = ${recent}`.withoutTransform
      expect(yield* store.removeEnded(name, Duration.days(30))).toBe(1)
      expect((yield* rowsOf(name)).map((row) => row.id).sort()).toEqual([recent, waiting].sort())
      expect((yield* rowsOf(other)).map((row) => row.id)).toEqual([foreign])
    }))

  it.scoped("a lone taker claims one item at a time: while its handler runs, the other items are neither leased nor counted", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name)
      yield* Effect.forEach([1, 2, 3], (n) => queue.offer({ n }))
      const during = yield* within(queue.take(() => Effect.zipRight(Effect.sleep("150 millis"), rowsOf(name))))
      expect(during.map((row) => [row.attempts, row.leased])).toEqual([[1, true], [0, false], [0, false]])
    }))

  it.scoped("an offer wakes an idle poller at once, long before its poll interval", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name, { pollInterval: "1 hour" })
      const taker = yield* Effect.fork(queue.take((value) => Effect.succeed(value.n)))
      // The lane's first claim found nothing: the poller now sleeps its hour unless an offer wakes it.
      yield* Effect.sleep("200 millis")
      yield* queue.offer({ n: 5 })
      expect(yield* within(Fiber.join(taker), "3 seconds")).toBe(5)
    }))

  it.scoped("the failure code kept is the error's reason, else its code, when either is a stable code of at most 64 characters", () =>
    Effect.sync(() => {
      const reasonOf = (error: unknown) => EffectQueueStore.failureReason(Cause.fail(error))
      expect(reasonOf({ reason: "provider-5xx", code: "other-code" })).toBe("provider-5xx")
      expect(reasonOf({ reason: "Not A Code", code: "provider-timeout" })).toBe("provider-timeout")
      expect(reasonOf({ code: "mailbox-invalid" })).toBe("mailbox-invalid")
      expect(reasonOf({ reason: 42 })).toBe("handler-failed")
      expect(reasonOf({ reason: "a".repeat(64) })).toBe("a".repeat(64))
      expect(reasonOf({ reason: "a".repeat(65) })).toBe("handler-failed")
      expect(reasonOf({ reason: "" })).toBe("handler-failed")
      expect(reasonOf({ reason: "ok-code\n" })).toBe("handler-failed")
      expect(reasonOf("provider-5xx")).toBe("handler-failed")
      expect(EffectQueueStore.failureReason(Cause.die(new Error("boom")))).toBe("handler-died")
    }))

  it.scoped("a retryAfter that is not a Duration is ignored: the backoff delay applies", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name, { backoff: Backoff.make({ base: "2 seconds", cap: "2 seconds", jitter: 0 }) })
      const id = yield* queue.offer({ n: 1 })
      yield* Effect.exit(within(queue.take(() => Effect.fail({ reason: "provider-5xx", retryAfter: 30_000 }))))
      const row = yield* rowOf(name, id)
      expect(row.due_in_ms).toBeGreaterThan(1_500)
      expect(row.due_in_ms).toBeLessThanOrEqual(2_000)
    }))

  it.scoped("an item's last failed attempt ends it at once: exhausted, no retry delay, whatever the backoff", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name, { backoff: Backoff.make({ base: "1 hour", cap: "1 hour", jitter: 0 }) })
      const id = yield* queue.offer({ n: 1 })
      yield* Effect.exit(within(queue.take(() => new Flaky({ reason: "provider-5xx" }), { maxAttempts: 1 })))
      const row = yield* rowOf(name, id)
      expect(row).toMatchObject({ attempts: 1, exhausted: true, ended: true, last_failure: "provider-5xx" })
      expect(row.due_in_ms).toBeLessThanOrEqual(0)
    }))

  it.scoped("an item whose stored element is not JSON ends exhausted as element-invalid without a handler, its failed hook runs, its take's failure says so, and the queue goes on", () =>
    Effect.gen(function* () {
      const name = queueName()
      const sql = yield* SqlClient.SqlClient
      const { failures, hooks } = failuresOf(name)
      const { queue } = yield* storeFor(name, { hooks })
      const damaged = `${name}-damaged`
      yield* sql`INSERT INTO effect_queue (id, queue_name, element, available_at, created_at, updated_at)
                 VALUES (${damaged}, ${name}, '{"n": 1', now(), now(), now())`.withoutTransform
      let ran = false
      const exit = yield* Effect.exit(within(queue.take(() => Effect.sync(() => { ran = true }))))
      expect(ran).toBe(false)
      expect(Exit.isFailure(exit) && Cause.failureOption(exit.cause).pipe((f) => f._tag === "Some" && f.value instanceof PersistedQueue.PersistedQueueError)).toBe(true)
      expect(yield* rowOf(name, damaged)).toMatchObject({ attempts: 1, exhausted: true, completed: false, ended: true, leased: false, acquired_by: null, last_failure: "element-invalid" })
      expect(failures).toEqual([`${damaged}#1:element-invalid:true`])
      expect(Exit.isFailure(exit) && Cause.failureOption(exit.cause).pipe(Option.getOrThrow)).toMatchObject({ message: `effect queue item ${damaged} holds no JSON` })
      expect(Exit.isFailure(exit) && EffectQueueStore.endedElementInvalid(Cause.failureOption(exit.cause).pipe(Option.getOrThrow))).toBe(true)
      const next = yield* queue.offer({ n: 2 })
      expect(yield* within(queue.take((value, meta) => Effect.succeed([meta.id, value.n])))).toEqual([next, 2])
    }))

  it.scoped("an item whose stored element is JSON the queue's schema refuses ends exhausted as element-invalid on its first attempt, whatever maxAttempts: no handler runs, its failed hook runs once, the family can tell, and the queue goes on", () =>
    Effect.gen(function* () {
      const name = queueName()
      const sql = yield* SqlClient.SqlClient
      const { failures, hooks } = failuresOf(name)
      const { queue } = yield* storeFor(name, { hooks })
      const refused = `${name}-refused`
      yield* sql`INSERT INTO effect_queue (id, queue_name, element, available_at, created_at, updated_at)
                 VALUES (${refused}, ${name}, '{"n":"one"}', now(), now(), now())`.withoutTransform
      let ran = false
      const exit = yield* Effect.exit(within(queue.take(() => Effect.sync(() => { ran = true }), { maxAttempts: 5 })))
      expect(ran).toBe(false)
      const failure = Exit.isFailure(exit) ? Cause.failureOption(exit.cause).pipe(Option.getOrThrow) : undefined
      expect(ParseResult.isParseError(failure)).toBe(true)
      expect(EffectQueueStore.endedElementInvalid(failure)).toBe(true)
      expect(yield* rowOf(name, refused)).toMatchObject({ attempts: 1, exhausted: true, completed: false, ended: true, leased: false, acquired_by: null, last_failure: "element-invalid" })
      expect(failures).toEqual([`${refused}#1:element-invalid:true`])
      const next = yield* queue.offer({ n: 2 })
      expect(yield* within(queue.take((value, meta) => Effect.succeed([meta.id, value.n])))).toEqual([next, 2])
      expect(yield* rowOf(name, refused)).toMatchObject({ attempts: 1, exhausted: true })
    }))

  it.scoped("endedElementInvalid tells a damaged element from any other failure: a handler's own error or a failed offer is not one", () =>
    Effect.sync(() => {
      expect(EffectQueueStore.endedElementInvalid(new Flaky({ reason: "provider-5xx" }))).toBe(false)
      expect(EffectQueueStore.endedElementInvalid(new PersistedQueue.PersistedQueueError({ message: "effect queue offer failed", cause: new Error("down") }))).toBe(false)
    }))

  it.scoped("clean-up removes every ended item in statements of a thousand and counts them all", () =>
    Effect.gen(function* () {
      const name = queueName()
      const sql = yield* SqlClient.SqlClient
      const { store } = yield* storeFor(name)
      yield* sql`INSERT INTO effect_queue (id, queue_name, element, completed, attempts, ended_at, available_at, created_at, updated_at)
                 SELECT ${name} || '-' || n, ${name}, '{"n":0}', true, 1, now() - interval '31 days', now(), now(), now()
                 FROM generate_series(1, 2500) AS n`.withoutTransform
      expect(yield* store.removeEnded(name, Duration.days(30))).toBe(2500)
      expect(yield* rowsOf(name)).toEqual([])
    }))

  it.scoped("a late owner's lost lease is logged once and no longer refreshed, and its refused outcome is logged with the item and attempt", () =>
    Effect.gen(function* () {
      const name = queueName()
      const logs = yield* logProbe
      // A refreshes every 500 ms a lease of 300 ms: B takes the item over between two of A's refreshes.
      const a = yield* storeFor(name, { leaseDuration: "300 millis", refreshInterval: "500 millis" }).pipe(Effect.provide(logs.layer))
      const b = yield* storeFor(name, { leaseDuration: "300 millis" })
      const id = yield* a.queue.offer({ n: 1 })
      const release = yield* Deferred.make<void>()
      const late = yield* Effect.fork(a.queue.take(() => Deferred.await(release)))
      yield* until(Effect.map(rowOf(name, id), (row) => row.attempts === 1))
      yield* within(b.queue.take(() => Effect.void))
      const lost = yield* within(logs.next((entry) => entry.message.includes("leases lost")), "3 seconds")
      expect(lost.annotations).toEqual({ lost: `${id}#1` })
      const refreshesAfter = (yield* a.sql.statements).length
      expect(yield* logs.next((entry) => entry.message.includes("leases lost")).pipe(Effect.timeoutOption("1200 millis"))).toEqual(Option.none())
      // A's refresher ran twice more and found nothing of its own to refresh.
      expect((yield* a.sql.statements).slice(refreshesAfter).filter((text) => text.includes("SET lease_expires_at"))).toEqual([])
      yield* Deferred.succeed(release, undefined)
      yield* within(Fiber.join(late))
      const refused = yield* within(logs.next((entry) => entry.message.includes("outcomes refused")))
      expect(refused.annotations).toEqual({ items: `${id}#1` })
    }))

  it.scoped("a live lease is refreshed every third of its length, and only this owner's claimed items are refreshed", () =>
    Effect.gen(function* () {
      const name = queueName()
      const logs = yield* logProbe
      const { queue } = yield* storeFor(name, { leaseDuration: "3 seconds" }).pipe(Effect.provide(logs.layer))
      const id = yield* queue.offer({ n: 1 })
      const other = yield* queue.offer({ n: 2 })
      const sql = yield* SqlClient.SqlClient
      const remaining = (itemId: string) =>
        Effect.map(
          sql<{ readonly ms: number | null }>`SELECT (extract(epoch FROM lease_expires_at - now()) * 1000)::float8 AS ms FROM effect_queue WHERE id = ${itemId}`.withoutTransform,
          (rows) => rows[0]!.ms
        )
      const samples = yield* within(queue.take(() =>
        Effect.forEach(Array.from({ length: 24 }), () => Effect.zipLeft(Effect.all([remaining(id), remaining(other)]), Effect.sleep("100 millis")))
      ))
      const own = samples.map(([ms]) => ms!)
      // Refreshed about every second: the lease never ages past about a third, and does age between refreshes.
      expect(Math.min(...own)).toBeGreaterThan(1_500)
      expect(Math.min(...own)).toBeLessThan(2_600)
      expect(Math.max(...own)).toBeLessThanOrEqual(3_000)
      expect(samples.map(([, ms]) => ms)).toEqual(samples.map(() => null))
      // Nothing was lost or refused, so nothing says so.
      const warned = logs.next((entry) => entry.message.includes("leases lost") || entry.message.includes("outcomes refused"))
      expect(yield* warned.pipe(Effect.timeoutOption("300 millis"))).toEqual(Option.none())
    }))

  it.scoped("a failed lease refresh is tried again at the next interval: the attempt keeps its lease and no other store takes the item", () =>
    Effect.gen(function* () {
      const name = queueName()
      // Refreshed every 300 ms: one failed refresh leaves 600 ms between two that succeed, within the lease.
      const a = yield* storeFor(name, { leaseDuration: "900 millis" })
      const b = yield* storeFor(name, { leaseDuration: "900 millis" })
      const id = yield* a.queue.offer({ n: 1 })
      const refreshes = Effect.map(a.sql.statements, (statements) => statements.filter((text) => text.includes("SET lease_expires_at")).length)
      const owner = yield* Effect.fork(a.queue.take(() =>
        Effect.gen(function* () {
          const before = yield* refreshes
          yield* a.sql.failWhen((text) => text.includes("SET lease_expires_at"))
          yield* until(Effect.map(refreshes, (count) => count > before))
          yield* a.sql.failWhen(undefined)
          yield* Effect.sleep("1500 millis")
          return "owner"
        })
      ))
      yield* until(Effect.map(rowOf(name, id), (row) => row.attempts === 1))
      const rival = yield* Effect.fork(b.queue.take(() => Effect.succeed("rival")))
      expect(yield* within(Fiber.join(owner))).toBe("owner")
      expect(yield* rowOf(name, id)).toMatchObject({ attempts: 1, completed: true })
      expect(rival.unsafePoll()).toBeNull()
      yield* Fiber.interrupt(rival)
    }))

  it.scoped("a failed claim is tried again after the poll interval: the waiting taker gets the item once the database answers", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue, sql } = yield* storeFor(name, { pollInterval: "100 millis" })
      yield* sql.failWhen((text) => text.includes("WITH due AS"))
      const id = yield* queue.offer({ n: 1 })
      const taker = yield* Effect.fork(queue.take((_, meta) => Effect.succeed(meta.id)))
      yield* Effect.sleep("350 millis")
      expect(claims(yield* sql.statements)).toBeGreaterThanOrEqual(2)
      expect(yield* rowOf(name, id)).toMatchObject({ attempts: 0, leased: false })
      yield* sql.failWhen(undefined)
      expect(yield* within(Fiber.join(taker), "2 seconds")).toBe(id)
    }))

  it.scoped("an idle poller claims once per poll interval while a taker waits, and not at all once no taker waits", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue, sql } = yield* storeFor(name, { pollInterval: "200 millis" })
      // An offer woke the waiting taker's poller once before; it must not stay awake.
      const first = yield* Effect.fork(queue.take(() => Effect.void))
      yield* Effect.sleep("100 millis")
      yield* queue.offer({ n: 0 })
      yield* within(Fiber.join(first))
      const before = claims(yield* sql.statements)
      const waited = yield* queue.take(() => Effect.succeed("none")).pipe(Effect.timeoutOption("1 second"))
      expect(waited).toEqual(Option.none())
      const whileWaiting = claims(yield* sql.statements) - before
      expect(whileWaiting).toBeGreaterThanOrEqual(3)
      expect(whileWaiting).toBeLessThanOrEqual(7)
      // No taker: an offer wakes the poller, which claims nothing for nobody.
      const id = yield* queue.offer({ n: 1 })
      const after = claims(yield* sql.statements)
      yield* Effect.sleep("600 millis")
      expect(claims(yield* sql.statements)).toBe(after)
      expect(yield* rowOf(name, id)).toMatchObject({ attempts: 0, leased: false })
    }))

  it.scoped("several takers keep a round of claimed items waiting for them, topped up as they take from it, never more than two rounds", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue } = yield* storeFor(name, { leaseDuration: "60 seconds" })
      yield* Effect.forEach(Array.from({ length: 16 }, (_, n) => n), (n) => queue.offer({ n }))
      const gates = new Map<string, Deferred.Deferred<void>>()
      const finished = new Set<string>()
      const handler = (_: unknown, meta: { readonly id: string }) =>
        Effect.flatMap(Deferred.make<void>(), (gate) => {
          gates.set(meta.id, gate)
          return Deferred.await(gate)
        })
      const takers = yield* Effect.forkAll([1, 2].map(() => Effect.forever(queue.take(handler))))
      const buffered = Effect.map(rowsOf(name), (rows) => rows.filter((row) => row.leased && !gates.has(row.id)).length)
      const settled = Effect.zipRight(Effect.sleep("300 millis"), buffered)
      yield* until(Effect.sync(() => gates.size === 2))
      const counts = [yield* settled]
      for (let i = 0; i < 3; i++) {
        const [first] = [...gates.entries()].filter(([id]) => !finished.has(id))
        finished.add(first![0])
        yield* Deferred.succeed(first![1], undefined)
        yield* until(Effect.sync(() => gates.size === 3 + i))
        counts.push(yield* settled)
      }
      // At least a round (one item per taker) waits; a claim tops it up to at most two rounds.
      for (const count of counts) {
        expect(count).toBeGreaterThanOrEqual(2)
        expect(count).toBeLessThanOrEqual(4)
      }
      yield* Fiber.interrupt(takers)
    }))

  it.scoped("closing the store waits for an outcome still being written (a lease-expired exhaustion, which no taker waits for)", () =>
    Effect.gen(function* () {
      const name = queueName()
      const sql = yield* SqlClient.SqlClient
      const gate = yield* Deferred.make<void>()
      const failed: Array<string> = []
      const hooks = {
        [name]: {
          failed: (ref: EffectQueueStore.AttemptRef, failure: EffectQueueStore.FailureRecord) =>
            Effect.zipRight(Deferred.await(gate), Effect.sync(() => void failed.push(`${ref.id}#${ref.attempt}:${failure.reason}`)))
        }
      }
      // An item whose only attempt was claimed by a process that is gone, its lease run out.
      const id = `${name}-orphan`
      yield* sql`INSERT INTO effect_queue (id, queue_name, element, attempts, acquired_at, acquired_by, lease_expires_at, available_at, created_at, updated_at)
                 VALUES (${id}, ${name}, '{"n":1}', 1, now() - interval '2 seconds', ${randomUUID()}, now() - interval '1 second', now(), now(), now())`.withoutTransform
      const scope = yield* Scope.make()
      const { queue } = yield* storeFor(name, { hooks }).pipe(Scope.extend(scope))
      const taker = yield* Effect.fork(queue.take(() => Effect.void, { maxAttempts: 1 }))
      yield* until(Effect.map(rowOf(name, id), (row) => row.attempts === 2))
      yield* Fiber.interrupt(taker)
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      yield* Effect.sleep("300 millis")
      expect(closing.unsafePoll()).toBeNull()
      yield* Deferred.succeed(gate, undefined)
      yield* within(Fiber.join(closing))
      expect(failed).toEqual([`${id}#2:lease-expired`])
      expect(yield* rowOf(name, id)).toMatchObject({ exhausted: true, last_failure: "lease-expired", leased: false, ended: true })
    }))

  it.scoped("one store serves several queues and attempt limits: each take gets only its own queue's items", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { queue, queueOf } = yield* storeFor(name)
      const other = yield* queueOf(`${name}-other`)
      const mine = yield* queue.offer({ n: 1 })
      const theirs = yield* other.offer({ n: 2 })
      expect(yield* within(other.take((_, meta) => Effect.succeed(meta.id)))).toBe(theirs)
      expect(yield* within(queue.take((_, meta) => Effect.succeed(meta.id), { maxAttempts: 3 }))).toBe(mine)
      const next = yield* queue.offer({ n: 3 })
      expect(yield* within(queue.take((_, meta) => Effect.succeed(meta.id), { maxAttempts: 5 }))).toBe(next)
    }))

  it.scoped("an offer that cannot be stored fails as a PersistedQueueError that ended no item: an element JSON cannot hold, or the database unreachable", () =>
    Effect.gen(function* () {
      const name = queueName()
      const { context, queue, sql } = yield* storeFor(name)
      const wide = yield* PersistedQueue.make({ name, schema: Schema.Struct({ n: Schema.BigIntFromSelf }) }).pipe(Effect.provide(context))
      const notJson = yield* Effect.flip(wide.offer({ n: 1n }))
      expect(notJson).toBeInstanceOf(PersistedQueue.PersistedQueueError)
      expect(notJson).toMatchObject({ message: "element is not JSON" })
      yield* sql.failWhen((text) => text.includes("INSERT INTO effect_queue"))
      const down = yield* Effect.flip(queue.offer({ n: 2 }).pipe(Effect.catchTag("ParseError", Effect.die)))
      expect(down).toMatchObject({ message: "effect queue offer failed" })
      expect((down as PersistedQueue.PersistedQueueError).cause).toMatchObject({ _tag: "SqlError" })
      // Neither ended an item: only a take that found a damaged element reports one.
      expect([notJson, down].map(EffectQueueStore.endedElementInvalid)).toEqual([false, false])
      yield* sql.failWhen(undefined)
      expect(yield* rowsOf(name)).toEqual([])
    }))

  it.scoped("a batch that mixes outcomes with and without a hook runs every hook", () =>
    Effect.gen(function* () {
      const name = queueName()
      const failed: Array<string> = []
      const hooks = { [name]: { failed: (ref: EffectQueueStore.AttemptRef) => Effect.sync(() => void failed.push(ref.id)) } }
      const { queue } = yield* storeFor(name, { hooks, leaseDuration: "60 seconds" })
      const ids = yield* Effect.forEach(Array.from({ length: 10 }, (_, n) => n), (n) => queue.offer({ n }))
      // All ten finish at once, so their outcomes are written in few batches, each mixing both kinds.
      const go = yield* Deferred.make<void>()
      let running = 0
      const takers = yield* Effect.fork(Effect.all(
        ids.map(() =>
          Effect.exit(queue.take((value) =>
            Effect.zipRight(
              Effect.zipRight(Effect.sync(() => running++), Deferred.await(go)),
              value.n % 2 === 0 ? Effect.void : new Flaky({ reason: "provider-5xx" })
            )
          ))
        ),
        { concurrency: "unbounded" }
      ))
      yield* until(Effect.sync(() => running === 10))
      yield* Deferred.succeed(go, undefined)
      yield* within(Fiber.join(takers))
      const byN = new Map((yield* rowsOf(name)).map((row) => [row.id, row]))
      expect(ids.map((id) => byN.get(id)!.completed)).toEqual(ids.map((_, n) => n % 2 === 0))
      expect(failed.sort()).toEqual(ids.filter((_, n) => n % 2 === 1).sort())
    }))

  it.scoped("two stores with four takers each process 200 items exactly once, each in one attempt", () =>
    Effect.gen(function* () {
      const name = queueName()
      const a = yield* storeFor(name)
      const b = yield* storeFor(name)
      yield* Effect.forEach(Array.from({ length: 200 }, (_, n) => n), (n) => a.queue.offer({ n }), { concurrency: 10 })
      const seen: Array<number> = []
      const taker = (queue: typeof a.queue) => Effect.forever(queue.take((value) => Effect.sync(() => void seen.push(value.n))))
      const fibers = yield* Effect.forkAll([...Array(4)].flatMap(() => [taker(a.queue), taker(b.queue)]))
      yield* until(Effect.sync(() => seen.length >= 200))
      yield* until(Effect.map(rowsOf(name), (rows) => rows.every((row) => row.completed)))
      yield* Fiber.interrupt(fibers)
      expect([...seen].sort((x, y) => x - y)).toEqual(Array.from({ length: 200 }, (_, n) => n))
      expect((yield* rowsOf(name)).every((row) => row.attempts === 1 && row.completed)).toBe(true)
    }))
})
