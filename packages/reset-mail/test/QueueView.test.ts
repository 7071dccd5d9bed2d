import { SqlClient, type Statement } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { ResetRequests } from "../src/ResetRequests.ts"
import { requestReset, setup, SuiteLayer } from "./support.ts"

// Reset mail as the console and /metrics read it (core's QueueView), on real PostgreSQL. Rows are committed through
// the real request path (ResetRequests.request), then moved to known states at known times relative to the database's
// now(). Every row keeps a next_attempt_at in the past once it has ended, so an ended row counted as due would show.

const move = (id: string, set: (sql: SqlClient.SqlClient) => Statement.Fragment) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE reset_mail_outbox SET ${set(sql)} WHERE id = ${id}`)
const ago = (sql: SqlClient.SqlClient, seconds: number) => sql`now() - ${seconds} * interval '1 second'`

const pending = (id: string, dueIn: number) =>
  move(id, (sql) => sql`state = 'pending', next_attempt_at = ${ago(sql, -dueIn)}, claimed_at = NULL, lease_owner = NULL`)
const sending = (id: string, claimedAgo: number) =>
  move(id, (sql) => sql`state = 'sending', attempt = 1, next_attempt_at = ${ago(sql, 3600)}, claimed_at = ${ago(sql, claimedAgo)}, lease_owner = 'w1'`)
const delivered = (id: string, deliveredAgo: number) =>
  move(id, (sql) => sql`state = 'delivered', attempt = 1, fingerprint = repeat('a', 64), next_attempt_at = ${ago(sql, 7200)},
    lease_owner = NULL, updated_at = ${ago(sql, deliveredAgo)}`)
const ended = (id: string, state: "rejected" | "quarantined" | "stopped", endedAgo: number) =>
  move(id, (sql) => sql`state = ${state}, reason = 'test-ended', next_attempt_at = ${ago(sql, 7200)}, lease_owner = NULL,
    updated_at = ${ago(sql, endedAgo)}`)

const requests = (count: number) =>
  Effect.gen(function* () {
    const { fx } = yield* setup
    const ids: Array<string> = []
    for (let i = 0; i < count; i++) ids.push((yield* requestReset(fx)).id)
    return ids
  })

layer(SuiteLayer, { excludeTestServices: true })("reset mail queue view (real PostgreSQL)", (it) => {
  it.effect("every state of the outbox is counted in lifecycle order, zeros included", () =>
    Effect.gen(function* () {
      const [, b, c, d, e] = yield* requests(5)
      yield* sending(b!, 5)
      yield* delivered(c!, 60)
      yield* ended(d!, "quarantined", 60)
      yield* ended(e!, "quarantined", 60)
      const snapshot = yield* (yield* ResetRequests).queueView.snapshot
      expect(snapshot.family).toBe("reset-mail")
      expect(snapshot.states).toEqual([
        { state: "pending", count: 1 },
        { state: "sending", count: 1 },
        { state: "delivered", count: 1 },
        { state: "rejected", count: 0 },
        { state: "quarantined", count: 2 },
        { state: "stopped", count: 0 }
      ])
    }))

  it.effect("due is a pending row whose attempt time has come, aged from that time; a row waiting for its retry, a sending one and an ended one are not due", () =>
    Effect.gen(function* () {
      const [waiting, claimed, done, refused, stopped, due] = yield* requests(6)
      const view = (yield* ResetRequests).queueView
      yield* pending(waiting!, 60)
      // A claim older than any lease: still not due here (the stale-claim rule quarantines it, never resends it).
      yield* sending(claimed!, 3600)
      yield* delivered(done!, 60)
      yield* ended(refused!, "rejected", 60)
      yield* ended(stopped!, "stopped", 60)
      yield* pending(due!, 600)
      expect((yield* view.snapshot).oldestDueAgeSeconds).toBeNull()

      yield* pending(due!, -120)
      const age = (yield* view.snapshot).oldestDueAgeSeconds
      expect(age).toBeGreaterThanOrEqual(120)
      expect(age).toBeLessThan(122)
    }))

  it.effect("a delivery lands in the five-minute window of its delivery time, oldest window first; other ends and deliveries older than an hour in none", () =>
    Effect.gen(function* () {
      const ids = yield* requests(7)
      yield* delivered(ids[0]!, 2 * 60)
      yield* delivered(ids[1]!, 32 * 60)
      yield* delivered(ids[2]!, 32 * 60 + 10)
      yield* delivered(ids[3]!, 59 * 60)
      yield* delivered(ids[4]!, 61 * 60)
      yield* ended(ids[5]!, "rejected", 60)
      yield* ended(ids[6]!, "stopped", 60)
      expect((yield* (yield* ResetRequests).queueView.snapshot).completedLastHour).toEqual([1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1])
    }))
})
