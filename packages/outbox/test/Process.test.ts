import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { LoopbackProvider, LoopbackReply, TestDatabase } from "@delivery/testing"
import { Effect, Schedule } from "effect"
import { join } from "node:path"
import { spawnBun } from "@delivery/testing"
import { Outbox, type OutboxDelivery } from "../src/index.ts"
import { deliveryWith, request, resetOutbox, rowOf, seedOf, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

const fixture = join(import.meta.dirname, "fixtures/outbox-worker.ts")

// One row at a time, a request timeout of 2 s and a lease of 3.5 s; retries are an hour away, so the
// process never touches a row again by itself once it has recorded an outcome.
const workerEnv = (databaseUrl: string) => ({
  DATABASE_URL: databaseUrl,
  SIGNER_KEYS: ["crash", "stale"].map((t) => `${t}:k1:${Buffer.from(seedOf(1)).toString("base64url")}`).join(","),
  OUTBOX_BATCH_SIZE: "1",
  OUTBOX_CONCURRENCY: "1",
  OUTBOX_CLAIMERS: "1",
  OUTBOX_REQUEST_TIMEOUT: "2 seconds",
  OUTBOX_CYCLE_TIMEOUT: "3 seconds",
  OUTBOX_LEASE: "3500 millis",
  OUTBOX_POLL_INTERVAL: "100 millis",
  OUTBOX_BACKOFF_BASE: "1 hour",
  OUTBOX_BACKOFF_CAP: "1 hour"
})
// What a recording write and a busy scheduler may add to the recording interval on a shared 2-core machine
// (460 ms measured at a load average of 16); a batch here takes 3 s, so a whole-batch re-send stays far above it.
const RECORDING_WRITE_ALLOWANCE_MS = 900

const takeoverSettings = { OUTBOX_BACKOFF_BASE: "1 hour", OUTBOX_BACKOFF_CAP: "1 hour" }

const setup = (tenant: string) =>
  Effect.gen(function*() {
    yield* resetOutbox
    const receiver = yield* LoopbackProvider
    yield* receiver.reset
    yield* setupTenant(tenant, "web", receiver.urlFor(`/hooks/${tenant}`))
    const { message } = yield* (yield* Outbox).enqueue(request(tenant, "web"))
    return { receiver, message, db: yield* TestDatabase }
  })

/** Ticks a takeover worker until it claims something (the killed or suspended owner's lease expired), bounded. */
const takeOver = (takeover: OutboxDelivery, owner: string) =>
  takeover.tick(owner).pipe(
    Effect.filterOrFail((result) => result.claimed > 0, () => "nothing claimable yet"),
    Effect.retry({ schedule: Schedule.spaced("50 millis"), while: (error) => error === "nothing claimable yet" }),
    Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => "the lease never expired" })
  )

layer(SuiteLayer, { excludeTestServices: true })("real worker processes (spec 000: an expired lease makes a crash recoverable)", (it) => {
  it.effect("a worker killed mid-delivery (SIGKILL) loses nothing: after lease expiry another worker delivers the row with the same idempotency key", () =>
    Effect.gen(function*() {
      const { db, message, receiver } = yield* setup("crash")
      yield* receiver.script({ key: message.id, times: 1, reply: LoopbackReply.hang() })
      const worker = yield* spawnBun(fixture, workerEnv(db.url))
      yield* receiver.awaitRequests(1).pipe(Effect.timeout("30 seconds"))
      yield* worker.signal("SIGKILL")
      expect(yield* worker.exitCode()).toBe(137)
      // Killed in flight: not acknowledged, not lost, still leased.
      expect(yield* rowOf(message.id)).toMatchObject({ state: "delivering", attempt: 1 })
      const takeover = yield* deliveryWith("http", takeoverSettings)
      expect((yield* takeover.tick("takeover")).claimed).toBe(0)
      expect(yield* takeOver(takeover, "takeover")).toMatchObject({ claimed: 1, delivered: 1 })
      expect(yield* rowOf(message.id)).toMatchObject({ state: "delivered", attempt: 2 })
      const sent = yield* receiver.requests
      expect(sent.map((r) => [r.idempotencyKey, r.headers["webhook-id"]])).toEqual([[message.id, message.id], [message.id, message.id]])
      expect(sent[1]!.bodyText).toBe(sent[0]!.bodyText)
      expect((yield* receiver.deliveries).length).toBe(1)
    }).pipe(Effect.scoped))

  it.effect("at-least-once with bounded duplicates: a worker killed (SIGKILL) mid-batch re-sends after recovery only what was in flight and what completed within the last recording interval", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const receiver = yield* LoopbackProvider
      yield* receiver.reset
      yield* setupTenant("crash", "web", receiver.urlFor("/hooks/crash"))
      const outbox = yield* Outbox
      const total = 150
      for (let i = 0; i < total; i++) yield* outbox.enqueue(request("crash", "web"))
      // 10 in flight, each answered after 500 ms: about 20 deliveries a second, 3 s per batch of 60. The request
      // timeout leaves four times the answer's delay: a delivery timed out under load would wait for its hour of
      // backoff, and the takeover below could never finish.
      yield* receiver.script({ path: "/hooks/crash", reply: LoopbackReply.status(200, { delayMs: 500 }) })
      const { url } = yield* TestDatabase
      const worker = yield* spawnBun(fixture, {
        ...workerEnv(url),
        OUTBOX_BATCH_SIZE: "60",
        OUTBOX_CONCURRENCY: "10",
        OUTBOX_REQUEST_TIMEOUT: "2 seconds",
        OUTBOX_CYCLE_TIMEOUT: "13 seconds",
        OUTBOX_LEASE: "14 seconds"
      })
      // Late in the first batch: about 40 answered (the first ones 2 s before), 10 in flight.
      yield* receiver.awaitRequests(50).pipe(
        Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => "the worker never sent 50 requests" })
      )
      const killedAt = Date.now()
      yield* worker.signal("SIGKILL")
      expect(yield* worker.exitCode()).toBe(137)
      const byWorker = yield* receiver.requests

      const takeover = yield* deliveryWith("http", {
        ...takeoverSettings, OUTBOX_CONCURRENCY: "100", OUTBOX_REQUEST_TIMEOUT: "5 seconds", OUTBOX_CYCLE_TIMEOUT: "6 seconds", OUTBOX_LEASE: "7 seconds"
      })
      // The rows the worker never claimed go at once; its claimed rows when their lease expires.
      const sql = yield* SqlClient.SqlClient
      const states = sql`SELECT state, last_error, count(*)::int AS n FROM outbox_messages GROUP BY 1, 2 ORDER BY 1, 2`
      yield* takeover.tick("takeover").pipe(
        Effect.zipRight(sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox_messages WHERE state <> 'delivered'`),
        Effect.filterOrFail((rows) => rows[0]?.n === 0, () => "not all delivered yet"),
        Effect.retry({ schedule: Schedule.spaced("50 millis"), while: (error) => error === "not all delivered yet" }),
        Effect.timeout("60 seconds"),
        Effect.catchTag("TimeoutException", () =>
          Effect.flatMap(states, (rows) => Effect.fail(`the takeover did not deliver every row: ${JSON.stringify(rows)}`)))
      )
      // At least once: every message delivered, each key accepted once by the receiver.
      expect(yield* states).toEqual([{ state: "delivered", last_error: null, n: total }])
      expect((yield* receiver.deliveries).length).toBe(total)

      const requests = new Map<string, number>()
      for (const r of yield* receiver.requests) requests.set(r.idempotencyKey!, (requests.get(r.idempotencyKey!) ?? 0) + 1)
      expect(Math.max(...requests.values())).toBeLessThanOrEqual(2)
      const resent = byWorker.filter((r) => requests.get(r.idempotencyKey!) === 2)
      const inFlight = resent.filter((r) => r.answeredAt === undefined || r.answeredAt.getTime() > killedAt)
      const ages = resent.filter((r) => !inFlight.includes(r)).map((r) => killedAt - r.answeredAt!.getTime())
      const answered = byWorker.filter((r) => r.answeredAt !== undefined && r.answeredAt.getTime() <= killedAt).length
      console.log(
        `SIGKILL mid-batch: ${resent.length} deliveries sent again after recovery, of ${byWorker.length} the killed worker sent ` +
          `(${answered} answered before the kill): ${inFlight.length} in flight, ${ages.length} completed ` +
          `${ages.length === 0 ? "" : `${Math.min(...ages)}-${Math.max(...ages)} ms `}before the kill`
      )
      // The bound: in flight (at most OUTBOX_CONCURRENCY), plus what completed within the last recording
      // interval (100 ms) and the write then under way, on a machine shared with other work.
      expect(inFlight.length).toBeLessThanOrEqual(10)
      expect(ages.filter((age) => age > 100 + RECORDING_WRITE_ALLOWANCE_MS)).toEqual([])
    }).pipe(Effect.scoped),
    // Its own waits take about 17 s (a batch at 20 deliveries a second, a 14 s lease), each bounded by 60 s.
    { timeout: 150_000 })

  it.effect("a stale worker resumed (SIGSTOP, SIGCONT) after its lease was taken over cannot move the row: its late outcome is refused as LeaseLost", () =>
    Effect.gen(function*() {
      const { db, message, receiver } = yield* setup("stale")
      yield* receiver.script(
        { key: message.id, times: 1, reply: LoopbackReply.hang() },
        { key: message.id, times: 1, reply: LoopbackReply.status(500) }
      )
      const worker = yield* spawnBun(fixture, workerEnv(db.url))
      yield* receiver.awaitRequests(1).pipe(Effect.timeout("30 seconds"))
      yield* worker.signal("SIGSTOP")
      const takeover = yield* deliveryWith("http", takeoverSettings)
      expect(yield* takeOver(takeover, "takeover")).toMatchObject({ claimed: 1, retried: 1 })
      const taken = yield* rowOf(message.id)
      expect(taken).toMatchObject({ state: "pending", attempt: 2, last_error: "provider-5xx" })
      // The receiver now answers the stale request too; whatever the stale owner makes of it, it is fenced out.
      yield* receiver.release(LoopbackReply.status(200))
      yield* worker.signal("SIGCONT")
      yield* worker.waitForOutput(/fenced transitions refused: lease lost/)
      expect(yield* rowOf(message.id)).toEqual(taken)
      yield* worker.signal("SIGKILL")
    }).pipe(Effect.scoped))

  it.effect("the worker stops cleanly on SIGTERM: the in-flight delivery is aborted and recorded (fenced) as ambiguous, never acknowledged, and the process exits 0", () =>
    Effect.gen(function*() {
      const { db, message, receiver } = yield* setup("crash")
      yield* receiver.script({ key: message.id, reply: LoopbackReply.hang({ accept: true }) })
      const worker = yield* spawnBun(fixture, workerEnv(db.url))
      yield* receiver.awaitRequests(1).pipe(Effect.timeout("30 seconds"))
      yield* worker.signal("SIGTERM")
      expect(yield* worker.exitCode()).toBe(0)
      expect(yield* worker.output).toContain("shutdown: worker outbox-delivery interrupted and joined")
      expect((yield* receiver.requests)[0]!.clientAborted).toBe(true)
      expect(yield* rowOf(message.id)).toMatchObject({ state: "pending", attempt: 1, last_error: "provider-interrupted", lease_owner: null })
    }).pipe(Effect.scoped))

  it.effect("'OUTBOX_LEASE must exceed the cycle timeout' is checked at start-up: a worker configured with a lease equal to its cycle timeout exits non-zero naming OUTBOX_LEASE and claims nothing", () =>
    Effect.gen(function*() {
      const { db, message, receiver } = yield* setup("crash")
      const worker = yield* spawnBun(fixture, { ...workerEnv(db.url), OUTBOX_CYCLE_TIMEOUT: "3 seconds", OUTBOX_LEASE: "3 seconds" })
      expect(yield* worker.exitCode()).not.toBe(0)
      expect(yield* worker.output).toContain("OUTBOX_LEASE")
      expect(yield* rowOf(message.id)).toMatchObject({ state: "pending", attempt: 0 })
      expect(yield* receiver.requests).toEqual([])
    }).pipe(Effect.scoped))
})
