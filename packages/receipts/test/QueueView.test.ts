import { SqlClient, type Statement } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { executor, recordReceipt, setup, SuiteLayer } from "./support/Work.ts"

// Receipt effects as the console and /metrics read them (core's QueueView), on real PostgreSQL. Effects are planned
// through the real command path (Receipts.record), then moved to known states at known times relative to the
// database's now().

const move = (id: string, set: (sql: SqlClient.SqlClient) => Statement.Fragment) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`UPDATE receipt_effects SET ${set(sql)} WHERE id = ${id}`).pipe(Effect.orDie)
const ago = (sql: SqlClient.SqlClient, seconds: number) => sql`now() - ${seconds} * interval '1 second'`

const pending = (id: string, dueIn: number) =>
  move(id, (sql) => sql`state = 'pending', next_attempt_at = ${ago(sql, -dueIn)}, claimed_at = NULL, lease_owner = NULL`)
const running = (id: string, claimedAgo: number) =>
  move(id, (sql) => sql`state = 'running', attempt = 1, next_attempt_at = ${ago(sql, 7200)}, claimed_at = ${ago(sql, claimedAgo)}, lease_owner = 'w1'`)
const done = (id: string, completedAgo: number) =>
  move(id, (sql) => sql`state = 'done', attempt = 1, next_attempt_at = ${ago(sql, 7200)}, lease_owner = NULL, completed_at = ${ago(sql, completedAgo)}`)

layer(SuiteLayer, { excludeTestServices: true })("receipt effects queue view (real PostgreSQL)", (it) => {
  it.scoped("every state is counted in lifecycle order, zeros included; done effects have no outcome to split them by", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const empty = yield* ex.receipts.queueView.snapshot
      expect(empty).toEqual({
        family: "receipt-effects",
        states: [{ state: "pending", count: 0 }, { state: "running", count: 0 }, { state: "done", count: 0 }],
        oldestDueAgeSeconds: null,
        completedLastHour: Array(12).fill(0)
      })
      const withFile = yield* recordReceipt(ex, tenant, [randomBytes(100)])
      const [promote] = withFile.effects
      yield* done(promote!.id, 60)
      const notify = (yield* recordReceipt(ex, tenant)).effects[0]!
      yield* running(notify.id, 5)
      expect((yield* ex.receipts.queueView.snapshot).states).toEqual([
        { state: "pending", count: 3 },
        { state: "running", count: 1 },
        { state: "done", count: 1 }
      ])
    }))

  it.scoped("due is what the claim takes now: a pending effect past its attempt time whose earlier effects are all done, aged from the later of the two; one behind an unfinished effect, waiting, running or done is not", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const view = ex.receipts.queueView
      // promote-file, delete-staged, audit-check, notify: each waits for the one before it.
      const [promote, remove, audit, notifyA] = (yield* recordReceipt(ex, tenant, [randomBytes(100)])).effects
      yield* pending(promote!.id, 60)
      for (const later of [remove!, audit!, notifyA!]) yield* pending(later.id, -600)
      const notifyB = (yield* recordReceipt(ex, tenant)).effects[0]!
      yield* done(notifyB.id, 10)
      // A claim far older than any stale-claim age: the worker's own rule puts it back first.
      const notifyC = (yield* recordReceipt(ex, tenant)).effects[0]!
      yield* running(notifyC.id, 3600)
      expect((yield* view.snapshot).oldestDueAgeSeconds).toBeNull()

      // The first effect completed 120 s ago: the second has been due since then, not since its attempt time.
      yield* done(promote!.id, 120)
      const age = (yield* view.snapshot).oldestDueAgeSeconds
      expect(age).toBeGreaterThanOrEqual(120)
      expect(age).toBeLessThan(122)

      // A receipt without predecessors, due 300 s ago, is older still.
      const notifyD = (yield* recordReceipt(ex, tenant)).effects[0]!
      yield* pending(notifyD.id, -300)
      expect((yield* view.snapshot).oldestDueAgeSeconds).toBeGreaterThanOrEqual(300)
    }))

  it.scoped("an effect done lands in the five-minute window of its completion time, oldest window first; one done more than an hour ago in none", () =>
    Effect.gen(function* () {
      const { roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const effects = (yield* recordReceipt(ex, tenant, [randomBytes(100)])).effects
      yield* done(effects[0]!.id, 2 * 60)
      yield* done(effects[1]!.id, 32 * 60)
      yield* done(effects[2]!.id, 59 * 60)
      yield* done(effects[3]!.id, 90 * 60)
      const snapshot = yield* ex.receipts.queueView.snapshot
      expect(snapshot.completedLastHour).toEqual([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1])
      expect(snapshot.states[2]).toEqual({ state: "done", count: 4 })
    }))
})
