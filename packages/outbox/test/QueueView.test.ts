import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { Outbox } from "../src/index.ts"
import { request, resetOutbox, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

// The outbox as the console and /metrics read it (core's QueueView), on real PostgreSQL. Messages are enqueued through
// Outbox.enqueue, then moved to known states at known times relative to the database's now().

const enqueue = (count: number) =>
  Effect.gen(function*() {
    const outbox = yield* Outbox
    yield* setupTenant("acme", "web", "http://127.0.0.1:9/hooks")
    const ids: Array<string> = []
    for (let i = 0; i < count; i++) ids.push((yield* outbox.enqueue(request("acme", "web"))).message.id)
    return ids
  })

/** Seconds relative to the database's now(): negative is in the past. */
const at = (sql: SqlClient.SqlClient, seconds: number) => sql`now() + ${seconds} * interval '1 second'`

const pending = (id: string, dueIn: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE outbox_messages SET state = 'pending', due_at = ${at(sql, dueIn)}, lease_owner = NULL WHERE id = ${id}`)
const delivering = (id: string, leaseEndsIn: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE outbox_messages SET state = 'delivering', attempt = attempt + 1, due_at = ${at(sql, leaseEndsIn)}, lease_owner = 'w1'
        WHERE id = ${id}`)
const delivered = (id: string, ago: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE outbox_messages SET state = 'delivered', due_at = NULL, lease_owner = NULL, delivered_at = ${at(sql, -ago)}
        WHERE id = ${id}`)
const dead = (id: string, ago: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE outbox_messages SET state = 'dead', due_at = NULL, lease_owner = NULL, dead_at = ${at(sql, -ago)},
        dead_reason = 'attempts-exhausted' WHERE id = ${id}`)

layer(SuiteLayer, { excludeTestServices: true })("Outbox queue view (real PostgreSQL)", (it) => {
  it.effect("an empty outbox: every state at zero, in lifecycle order, nothing due, twelve empty windows", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      expect(yield* (yield* Outbox).queueView.snapshot).toEqual({
        family: "outbox",
        states: [{ state: "pending", count: 0 }, { state: "delivering", count: 0 }, { state: "delivered", count: 0 }, { state: "dead", count: 0 }],
        oldestDueAgeSeconds: null,
        completedLastHour: Array(12).fill(0)
      })
    }))

  it.effect("counts by state; due is a pending message past its attempt time or a delivering one past its lease, never one waiting or leased or ended", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const outbox = yield* Outbox
      const [waiting, leased, done, gone, due, expired] = yield* enqueue(6)
      yield* pending(waiting!, 60)
      yield* delivering(leased!, 30)
      yield* delivered(done!, 600)
      yield* dead(gone!, 600)
      yield* pending(due!, 3600)
      yield* pending(expired!, 3600)

      const nothingDue = yield* outbox.queueView.snapshot
      expect(nothingDue.states).toEqual([
        { state: "pending", count: 3 },
        { state: "delivering", count: 1 },
        { state: "delivered", count: 1 },
        { state: "dead", count: 1 }
      ])
      expect(nothingDue.oldestDueAgeSeconds).toBeNull()

      // Due 120 s ago, and a lease that ended 45 s ago: the oldest is the first.
      yield* pending(due!, -120)
      yield* delivering(expired!, -45)
      const snapshot = yield* outbox.queueView.snapshot
      expect(snapshot.states.map((s) => s.count)).toEqual([2, 2, 1, 1])
      expect(snapshot.oldestDueAgeSeconds).toBeGreaterThanOrEqual(120)
      expect(snapshot.oldestDueAgeSeconds).toBeLessThan(122)

      // Delivered, the oldest due message is gone from the reading; the expired lease is next.
      yield* delivered(due!, 1)
      const after = yield* outbox.queueView.snapshot
      expect(after.oldestDueAgeSeconds).toBeGreaterThanOrEqual(45)
      expect(after.oldestDueAgeSeconds).toBeLessThan(47)
    }))

  it.effect("a delivery lands in the five-minute window of its delivery time, oldest window first; one older than an hour, or a dead letter, in none", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const outbox = yield* Outbox
      const ids = yield* enqueue(7)
      yield* delivered(ids[0]!, 2 * 60) // 58 minutes into the hour: the last window
      yield* delivered(ids[1]!, 2 * 60 + 30)
      yield* delivered(ids[2]!, 32 * 60) // 28 minutes into the hour: window 5
      yield* delivered(ids[3]!, 59 * 60) // 1 minute into the hour: window 0
      yield* delivered(ids[4]!, 65 * 60)
      yield* dead(ids[5]!, 60)
      // Written by a process whose clock runs a second ahead of the database's: counted now, not lost.
      yield* delivered(ids[6]!, -1)
      const snapshot = yield* outbox.queueView.snapshot
      expect(snapshot.completedLastHour).toEqual([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 3])
      expect(snapshot.states.find((s) => s.state === "delivered")?.count).toBe(6)
    }))
})
