import { PgClusterFromVitest, TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { connectorEventsQueueView, stacksQueueView } from "../src/cloud/CloudQueueViews.ts"
import { CloudStacksRepo } from "../src/cloud/CloudStacksRepo.ts"
import { ConnectorEventsRepo } from "../src/cloud/ConnectorEventsRepo.ts"
import { ConnectorEventInbox } from "../src/ConnectorEventInbox.ts"
import { tenantWorld } from "./support/Tenant.ts"

// Idle wake's durable families as the console and /metrics read them (core's QueueView), on real PostgreSQL: the
// tenant's connector event receipts, and the cloud role's stacks and connector event queue. Rows are written at known
// states and times relative to the database's now(); the cloud's views are read without starting its workers.

const ago = (sql: SqlClient.SqlClient, seconds: number | null) =>
  seconds === null ? sql`NULL` : sql`now() - ${seconds} * interval '1 second'`
const MINUTE = 60

layer(PgClusterFromVitest, { excludeTestServices: true })("connector events queue view, tenant side (real PostgreSQL)", (it) => {
  it.scoped("an event is recorded once and is final: one state, nothing ever due, recorded events in the five-minute window of their receipt, none older than an hour", () =>
    Effect.gen(function* () {
      const w = yield* tenantWorld()
      const view = Context.get(w.context, ConnectorEventInbox).queueView
      expect(yield* view.snapshot).toEqual({
        family: "connector-events",
        states: [{ state: "recorded", count: 0 }],
        oldestDueAgeSeconds: null,
        completedLastHour: Array(12).fill(0)
      })
      for (const receivedAgo of [2 * MINUTE, 32 * MINUTE, 59 * MINUTE, 61 * MINUTE, 3 * 24 * 60 * MINUTE]) {
        yield* w.sql`
          INSERT INTO idle_wake_connector_events
            (event_id, delivery_id, connector_instance, endpoint_id, event, payload, cloud_attempt, received_at)
          VALUES (${randomUUID()}, ${`d-${randomBytes(6).toString("hex")}`}, 'connector-1', 'endpoint-1', 'issues',
                  ${Buffer.from("{}")}, 1, ${ago(w.sql, receivedAgo)})`
      }
      expect(yield* view.snapshot).toEqual({
        family: "connector-events",
        states: [{ state: "recorded", count: 5 }],
        oldestDueAgeSeconds: null,
        completedLastHour: [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1]
      })
    }))
})

const CloudLayer = Layer.mergeAll(CloudStacksRepo.Default, ConnectorEventsRepo.Default).pipe(Layer.provideMerge(TestDatabaseLive))

const clearCloud = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.all([
    sql`DELETE FROM idle_wake_cloud_connector_events`,
    sql`DELETE FROM idle_wake_cloud_hosts`,
    sql`DELETE FROM idle_wake_cloud_stacks`,
    sql`DELETE FROM idle_wake_cloud_audit`
  ], { discard: true }))

/** A stack in `state`, changed to it `changedAgo` seconds ago, with its operation and wake leases ending as given (seconds from now). */
const stack = (state: string, options: { readonly changedAgo?: number; readonly opLeaseIn?: number; readonly wakeLeaseIn?: number } = {}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const id = `s-${randomBytes(5).toString("hex")}`
    yield* sql`
      INSERT INTO idle_wake_cloud_stacks
        (id, audience, report_key_id, report_public_key, profiles, state, op_lease_expires_at, wake_lease_expires_at,
         state_changed_at, created_at)
      VALUES (${id}, ${`tenant:${id}`}, 'report-1', ${randomBytes(32).toString("base64url")}, '{}', ${state},
              ${ago(sql, options.opLeaseIn === undefined ? null : -options.opLeaseIn)},
              ${ago(sql, options.wakeLeaseIn === undefined ? null : -options.wakeLeaseIn)},
              ${ago(sql, options.changedAgo ?? 3600)}, now() - interval '1 day')`
    return id
  })

const auditRow = (action: string, atAgo: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`INSERT INTO idle_wake_cloud_audit (stack_id, action, at) VALUES ('s-any', ${action}, ${ago(sql, atAgo)})`)

layer(CloudLayer, { excludeTestServices: true })("cloud stacks queue view (real PostgreSQL)", (it) => {
  it.effect("every stack state is counted in lifecycle order, zeros included", () =>
    Effect.gen(function* () {
      yield* clearCloud
      for (const state of ["awake", "awake", "asleep", "stop-uncertain", "archived"]) yield* stack(state)
      expect((yield* (yield* stacksQueueView).snapshot).states).toEqual([
        { state: "awake", count: 2 },
        { state: "draining", count: 0 },
        { state: "stopping", count: 0 },
        { state: "stop-uncertain", count: 1 },
        { state: "asleep", count: 1 },
        { state: "waking", count: 0 },
        { state: "suspended", count: 0 },
        { state: "archived", count: 1 }
      ])
    }))

  it.effect("due is a stack left mid-operation: a sleep cycle or wake whose lease ended, aged from its end, or an uncertain stop, aged from when it became one; a live lease, an asleep, suspended or archived stack is not", () =>
    Effect.gen(function* () {
      yield* clearCloud
      const view = yield* stacksQueueView
      yield* stack("awake", { changedAgo: 7200 })
      yield* stack("asleep", { changedAgo: 7200 })
      yield* stack("suspended", { changedAgo: 7200 })
      yield* stack("archived", { changedAgo: 7200 })
      yield* stack("draining", { changedAgo: 7200, opLeaseIn: 30 })
      yield* stack("stopping", { changedAgo: 7200, opLeaseIn: 30 })
      yield* stack("waking", { changedAgo: 7200, wakeLeaseIn: 30 })
      expect((yield* view.snapshot).oldestDueAgeSeconds).toBeNull()

      const oldest = Effect.map(view.snapshot, (s) => s.oldestDueAgeSeconds)
      yield* stack("stop-uncertain", { changedAgo: 120 })
      expect(yield* oldest).toBeGreaterThanOrEqual(120)
      expect(yield* oldest).toBeLessThan(122)
      yield* stack("waking", { changedAgo: 7200, wakeLeaseIn: -200 })
      expect(yield* oldest).toBeGreaterThanOrEqual(200)
      expect(yield* oldest).toBeLessThan(202)
      yield* stack("draining", { changedAgo: 7200, opLeaseIn: -300 })
      expect(yield* oldest).toBeGreaterThanOrEqual(300)
      expect(yield* oldest).toBeLessThan(302)
      yield* stack("stopping", { changedAgo: 7200, opLeaseIn: -400 })
      expect(yield* oldest).toBeGreaterThanOrEqual(400)
      expect(yield* oldest).toBeLessThan(402)
    }))

  it.effect("a completed wake (its `awake` audit row) lands in the five-minute window of its time, oldest window first; a resume, a recovery or a wake older than an hour in none", () =>
    Effect.gen(function* () {
      yield* clearCloud
      yield* auditRow("awake", 2 * MINUTE)
      yield* auditRow("awake", 32 * MINUTE)
      yield* auditRow("awake", 59 * MINUTE)
      yield* auditRow("awake", 61 * MINUTE)
      yield* auditRow("resumed", 2 * MINUTE)
      yield* auditRow("recovered-awake", 2 * MINUTE)
      yield* auditRow("wake-claimed", 2 * MINUTE)
      expect((yield* (yield* stacksQueueView).snapshot).completedLastHour).toEqual([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1])
    }))
})

/** An event of `stack` in `state`, available and leased until the given seconds from now, settled `settledAgo` seconds ago. */
const event = (stackId: string, state: "pending" | "delivered" | "dead", options: {
  readonly availableIn?: number
  readonly leaseIn?: number
  readonly settledAgo?: number
} = {}) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const id = randomUUID()
    yield* sql`
      INSERT INTO idle_wake_cloud_connector_events
        (id, stack_id, connector_instance, endpoint_id, delivery_id, event, payload, github_signature, state, attempt,
         available_at, lease_expires_at, received_at, settled_at)
      VALUES (${id}, ${stackId}, 'connector-1', 'endpoint-1', ${`d-${randomBytes(6).toString("hex")}`}, 'issues',
              ${Buffer.from("{}")}, ${`sha256=${randomBytes(32).toString("hex")}`}, ${state}, 1,
              ${ago(sql, -(options.availableIn ?? -7200))}, ${ago(sql, options.leaseIn === undefined ? null : -options.leaseIn)},
              now() - interval '1 day',
              ${ago(sql, state === "pending" ? null : options.settledAgo ?? 7200)})`
    return id
  })

const settle = (id: string, state: "delivered" | "dead", settledAgo: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE idle_wake_cloud_connector_events SET state = ${state}, lease_expires_at = NULL, settled_at = ${ago(sql, settledAgo)}
        WHERE id = ${id}::uuid`)

layer(CloudLayer, { excludeTestServices: true })("cloud connector events queue view (real PostgreSQL)", (it) => {
  it.effect("events are counted by state in lifecycle order, a leased one still pending", () =>
    Effect.gen(function* () {
      yield* clearCloud
      const s = yield* stack("awake")
      yield* event(s, "pending")
      yield* event(s, "pending", { leaseIn: 30 })
      yield* event(s, "delivered")
      expect((yield* (yield* connectorEventsQueueView).snapshot).states).toEqual([
        { state: "pending", count: 2 },
        { state: "delivered", count: 1 },
        { state: "dead", count: 0 }
      ])
    }))

  it.effect("due is a pending event the claim would take now, its retry delay over and no live lease, aged from the later of the two; one waiting, leased, delivered or dead is not", () =>
    Effect.gen(function* () {
      yield* clearCloud
      const view = yield* connectorEventsQueueView
      const s = yield* stack("asleep")
      yield* event(s, "pending", { availableIn: 60 })
      yield* event(s, "pending", { availableIn: -600, leaseIn: 30 })
      yield* event(s, "delivered", { availableIn: -7200 })
      yield* event(s, "dead", { availableIn: -7200 })
      expect((yield* view.snapshot).oldestDueAgeSeconds).toBeNull()

      const retry = yield* event(s, "pending", { availableIn: -120 })
      yield* event(s, "pending", { availableIn: -600, leaseIn: -30 })
      const oldest = Effect.map(view.snapshot, (snapshot) => snapshot.oldestDueAgeSeconds)
      expect(yield* oldest).toBeGreaterThanOrEqual(120)
      expect(yield* oldest).toBeLessThan(122)
      yield* settle(retry, "delivered", 1)
      expect(yield* oldest).toBeGreaterThanOrEqual(30)
      expect(yield* oldest).toBeLessThan(32)
    }))

  it.effect("a delivered event lands in the five-minute window of its settlement, oldest window first; a dead one, or a delivery older than an hour, in none", () =>
    Effect.gen(function* () {
      yield* clearCloud
      const s = yield* stack("awake")
      for (const settledAgo of [2 * MINUTE, 32 * MINUTE, 59 * MINUTE, 61 * MINUTE]) yield* event(s, "delivered", { settledAgo })
      yield* event(s, "dead", { settledAgo: 2 * MINUTE })
      expect((yield* (yield* connectorEventsQueueView).snapshot).completedLastHour).toEqual([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1])
    }))
})
