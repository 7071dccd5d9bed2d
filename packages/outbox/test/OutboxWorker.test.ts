import { expect, layer } from "@effect/vitest"
import { RateLimiter } from "@effect/experimental"
import { BunContext } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { ProviderHttp, WorkerRegistry } from "@delivery/core"
import { Signer } from "@delivery/signer"
import { LoopbackProvider } from "@delivery/testing"
import { ConfigProvider, Effect, HashMap, Layer, Logger, Option, TestClock, TestContext, TestServices } from "effect"
import { vi } from "vitest"
import { noopSender, Outbox, OutboxSender, OutboxSettings, outboxWorkerLayer, outboxWorkerLive, type Send, senderOf } from "../src/index.ts"
import { deliveryWith, fastSettings, request, resetOutbox, seedOf, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

// A host name longer than the 40 characters a lease owner keeps of it (Kubernetes pod names reach 63).
const { LONG_HOST } = vi.hoisted(() => ({ LONG_HOST: `worker-${"x".repeat(40)}.pods.example` }))
vi.mock("node:os", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:os")>()
  const hostname = () => LONG_HOST
  return { ...actual, default: { ...actual, hostname }, hostname }
})

const T0 = Date.parse("2030-01-01T00:00:00Z")
const withTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, TestContext.TestContext)

const setup = Effect.gen(function*() {
  yield* resetOutbox
  const receiver = yield* LoopbackProvider
  yield* receiver.reset
  for (const tenant of ["acme", "beta"]) yield* setupTenant(tenant, "web", receiver.urlFor(`/hooks/${tenant}`))
  return receiver
})

const enqueue = (tenant: string, n: number) =>
  Effect.gen(function*() {
    const outbox = yield* Outbox
    for (let i = 0; i < n; i++) yield* outbox.enqueue(request(tenant, "web"))
  })

/** How many rows of each tenant are in each state. */
const states = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ tenant: string; state: string; n: number }>`
    SELECT tenant, state, count(*)::int AS n FROM outbox_messages GROUP BY 1, 2 ORDER BY 1, 2`)

const countIn = (state: string) =>
  Effect.map(states, (rows) => rows.filter((r) => r.state === state).reduce((n, r) => n + r.n, 0))

/** Waits, in real time and bounded, until `check` holds (the worker runs on its own fibers). */
const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, what: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 250; i++) {
      if (yield* check) return
      yield* TestServices.provideLive(Effect.sleep("20 millis"))
    }
    return yield* Effect.dieMessage(`never happened: ${what}`)
  })

/** The claim loops asleep on the TestClock until `at`: the poll interval, not a tick, is what they wait on. */
const asleepUntil = (at: number) => Effect.map(TestClock.sleeps(), (sleeps) => [...sleeps].includes(at))

/** The outbox worker layer as a process runs it, over the suite's database, with a test sender. */
const workerWith = (sender: Layer.Layer<OutboxSender>, variables: Readonly<Record<string, string>>) =>
  Effect.gen(function*() {
    const settings = yield* OutboxSettings.pipe(Effect.provide(OutboxSettings.fromMap({ ...fastSettings, ...variables })))
    return outboxWorkerLayer.pipe(
      Layer.provide(sender),
      Layer.provide(RateLimiter.layerStoreMemory),
      Layer.provide(Layer.succeed(OutboxSettings, settings)),
      Layer.provide(WorkerRegistry.Default),
      Layer.provide(Layer.succeed(SqlClient.SqlClient, yield* SqlClient.SqlClient))
    )
  })

layer(SuiteLayer, { excludeTestServices: true })("outbox worker: claim plans, looking past spent tenants, claim loops (spec 000)", (it) => {
  it.effect("a full batch plans its tenants for 200 ms: until then the next tick claims them again without peeking, and from then on the peek sees earlier rows of other tenants", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      yield* setup
      yield* enqueue("acme", 15)
      const delivery = yield* deliveryWith(noopSender, { OUTBOX_BATCH_SIZE: "5" })
      expect((yield* delivery.tick("w1")).claimed).toBe(5)
      yield* enqueue("beta", 2)
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE outbox_messages SET due_at = due_at - interval '1 hour' WHERE tenant = 'beta'`
      expect((yield* delivery.tick("w1")).claimed).toBe(5)
      expect(yield* states).toEqual([
        { tenant: "acme", state: "delivered", n: 10 },
        { tenant: "acme", state: "pending", n: 5 },
        { tenant: "beta", state: "pending", n: 2 }
      ])
      yield* TestClock.adjust(200)
      expect((yield* delivery.tick("w1")).claimed).toBe(5)
      expect(yield* states).toEqual([
        { tenant: "acme", state: "delivered", n: 13 },
        { tenant: "acme", state: "pending", n: 2 },
        { tenant: "beta", state: "delivered", n: 2 }
      ])
    })))

  it.effect("a short claim ends the plan at once: the next tick peeks and finds the tenants that became due meanwhile", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      yield* setup
      yield* enqueue("acme", 7)
      const delivery = yield* deliveryWith(noopSender, { OUTBOX_BATCH_SIZE: "5" })
      expect((yield* delivery.tick("w1")).claimed).toBe(5)
      expect((yield* delivery.tick("w1")).claimed).toBe(2)
      yield* enqueue("beta", 2)
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 2, delivered: 2 })
      expect(yield* states).toEqual([{ tenant: "acme", state: "delivered", n: 7 }, { tenant: "beta", state: "delivered", n: 2 }])
    })))

  it.effect("rate under a plan: a planned tenant's tokens are taken once per claim, and once its window is spent the next tick skips it and peeks for the others at once", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      yield* setup
      yield* enqueue("acme", 12)
      yield* TestClock.adjust("1 minute")
      yield* enqueue("beta", 2)
      const delivery = yield* deliveryWith(noopSender, { OUTBOX_BATCH_SIZE: "5", SYNC_INGEST_LIMIT: "10", SYNC_INGEST_WINDOW: "1 hour" })
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 5, rateLimited: 0 })
      // Planned: 5 more tokens, the last of acme's window.
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 5, rateLimited: 1 })
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 2, delivered: 2, rateLimited: 1 })
      expect(yield* states).toEqual([
        { tenant: "acme", state: "delivered", n: 10 },
        { tenant: "acme", state: "pending", n: 2 },
        { tenant: "beta", state: "delivered", n: 2 }
      ])
    })))

  it.effect("rate: a spent tenant is looked past until its window resets, so a backlog larger than a batch cannot starve another tenant in another claim loop", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      yield* setup
      yield* enqueue("acme", 20)
      yield* TestClock.adjust("1 minute")
      yield* enqueue("beta", 2)
      const delivery = yield* deliveryWith(noopSender, { OUTBOX_BATCH_SIZE: "5", SYNC_INGEST_LIMIT: "5", SYNC_INGEST_WINDOW: "1 hour" })
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 5, rateLimited: 1 })
      expect(yield* delivery.tick("w2")).toMatchObject({ claimed: 2, delivered: 2, rateLimited: 1 })
      yield* TestClock.adjust("1 hour")
      expect(yield* delivery.tick("w2")).toMatchObject({ claimed: 5, delivered: 5, rateLimited: 1 })
      expect(yield* states).toEqual([
        { tenant: "acme", state: "delivered", n: 10 },
        { tenant: "acme", state: "pending", n: 10 },
        { tenant: "beta", state: "delivered", n: 2 }
      ])
    })))

  it.effect("the sender prepares a batch (reads its tenants' keys) only for rows claimed: a tick with nothing to claim does not ask it", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      yield* setup
      const batches: Array<ReadonlyArray<string>> = []
      const send: Send = () => Effect.succeed(new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 }))
      const counting = Layer.succeed(OutboxSender, {
        forBatch: (tenants) => Effect.sync(() => batches.push([...tenants])).pipe(Effect.as(send))
      })
      const delivery = yield* deliveryWith(counting, {})
      expect(yield* delivery.tick("w1")).toEqual({ claimed: 0, delivered: 0, retried: 0, dead: 0, lost: 0, rateLimited: 0 })
      expect(batches).toEqual([])
      yield* enqueue("acme", 1)
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 1, delivered: 1 })
      expect(batches).toEqual([["acme"]])
    })))

  it.effect("a claim loop goes again at once after a full batch; after a short one it waits OUTBOX_POLL_INTERVAL before it looks again", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      yield* setup
      yield* enqueue("acme", 12)
      const worker = yield* workerWith(noopSender, { OUTBOX_BATCH_SIZE: "5", OUTBOX_CLAIMERS: "1", OUTBOX_POLL_INTERVAL: "1 minute" })
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(worker)
        yield* eventually(
          Effect.zipWith(countIn("delivered"), asleepUntil(T0 + 60_000), (n, asleep) => n === 12 && asleep),
          "12 rows delivered in three ticks without waiting, then asleep for the poll interval"
        )
        yield* enqueue("acme", 1)
        yield* TestServices.provideLive(Effect.sleep("300 millis"))
        expect(yield* countIn("pending")).toBe(1)
        yield* TestClock.adjust("1 minute")
        yield* eventually(Effect.map(countIn("delivered"), (n) => n === 13), "the row enqueued meanwhile delivered after the poll interval")
      }))
    })))

  it.effect("a failed tick is logged and waited out (OUTBOX_POLL_INTERVAL), then the claim loop goes on", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      yield* setup
      yield* enqueue("acme", 2)
      const logs: Array<{ readonly message: string; readonly level: string; readonly error: unknown }> = []
      const capture = Logger.replace(
        Logger.defaultLogger,
        Logger.make(({ annotations, logLevel, message }) => {
          logs.push({
            message: (Array.isArray(message) ? message : [message]).join(" "),
            level: logLevel.label,
            error: Option.getOrUndefined(HashMap.get(annotations, "error"))
          })
        })
      )
      const worker = yield* workerWith(noopSender, { OUTBOX_CLAIMERS: "1", OUTBOX_POLL_INTERVAL: "1 minute" })
      const sql = yield* SqlClient.SqlClient
      // The table away for a while: every statement of a tick fails as in a database outage.
      yield* Effect.scoped(Effect.gen(function*() {
        yield* sql`ALTER TABLE outbox_messages RENAME TO outbox_messages_away`
        yield* Layer.build(worker)
        yield* eventually(
          Effect.zipWith(
            Effect.sync(() => logs.some((l) => l.message === "outbox delivery tick failed; waiting for the next one")),
            asleepUntil(T0 + 60_000),
            (logged, asleep) => logged && asleep
          ),
          "the failed tick logged, the loop asleep for the poll interval"
        )
        yield* sql`ALTER TABLE outbox_messages_away RENAME TO outbox_messages`
        expect(logs.filter((l) => l.message.startsWith("outbox delivery tick failed"))).toEqual([
          { message: "outbox delivery tick failed; waiting for the next one", level: "WARN", error: "OutboxStorageUnavailable" }
        ])
        yield* TestServices.provideLive(Effect.sleep("200 millis"))
        expect(yield* countIn("pending")).toBe(2)
        yield* TestClock.adjust("1 minute")
        yield* eventually(Effect.map(countIn("delivered"), (n) => n === 2), "both rows delivered by the next tick")
      }).pipe(
        Effect.provide(capture),
        Effect.ensuring(Effect.orDie(sql`ALTER TABLE IF EXISTS outbox_messages_away RENAME TO outbox_messages`))
      ))
    })))

  it.effect("OUTBOX_CLAIMERS claim loops run side by side, each holding its rows under a lease owner of its own: <host, at most 40 characters>:<pid>:<loop>:<random>", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(T0)
      yield* setup
      yield* enqueue("acme", 2)
      const hung = senderOf(() => Effect.never)
      const worker = yield* workerWith(hung, { OUTBOX_BATCH_SIZE: "1", OUTBOX_CONCURRENCY: "1", OUTBOX_CLAIMERS: "2" })
      const sql = yield* SqlClient.SqlClient
      const owners = yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(worker)
        yield* eventually(Effect.map(countIn("delivering"), (n) => n === 2), "one row held by each claim loop")
        return (yield* sql<{ lease_owner: string }>`SELECT lease_owner FROM outbox_messages ORDER BY lease_owner`)
          .map((r) => r.lease_owner)
      }))
      const shape = new RegExp(`^${LONG_HOST.slice(0, 40)}:${process.pid}:([01]):[0-9a-f]{8}$`)
      expect(owners.map((owner) => shape.exec(owner)?.[1])).toEqual(["0", "1"])
      // Stopped with the scope: both in-flight attempts recorded as interrupted, never acknowledged.
      expect(yield* states).toEqual([{ tenant: "acme", state: "pending", n: 2 }])
    })))

  it.effect("outboxWorkerLive (the backend role's worker) delivers over HTTP, signed with the tenant's key from SIGNER_KEYS", () =>
    Effect.gen(function*() {
      const receiver = yield* setup
      yield* enqueue("acme", 1)
      const settings = yield* OutboxSettings.pipe(Effect.provide(OutboxSettings.fromMap({ ...fastSettings, OUTBOX_CLAIMERS: "1" })))
      const worker = outboxWorkerLive(settings).pipe(
        Layer.provide(Layer.succeed(Signer, yield* Signer)),
        Layer.provide(WorkerRegistry.Default),
        Layer.provide(Layer.succeed(SqlClient.SqlClient, yield* SqlClient.SqlClient)),
        Layer.provide(BunContext.layer)
      )
      const keys = ConfigProvider.fromMap(new Map([["SIGNER_KEYS", `acme:k1:${Buffer.from(seedOf(1)).toString("base64url")}`]]))
      yield* Effect.scoped(Effect.gen(function*() {
        yield* Layer.build(worker).pipe(Effect.withConfigProvider(keys))
        const [sent] = yield* receiver.awaitRequests(1).pipe(Effect.timeout("10 seconds"))
        expect(sent!.headers["webhook-signature"]).toMatch(/^v1a,/)
        yield* eventually(Effect.map(countIn("delivered"), (n) => n === 1), "the row recorded as delivered")
      }))
    }))
})
