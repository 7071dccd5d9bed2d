import { describe, expect, it } from "@effect/vitest"
import type { SqlClient } from "@effect/sql"
import { attemptFence, claimDue, fenced, fencedBatch, leaseDeadline, LeaseLost } from "@delivery/core"
import { connect, freshDatabaseClient } from "@delivery/testing"
import { PgClusterFromVitest } from "@delivery/testing/vitest"
import { Clock, Deferred, Effect, Fiber, TestClock } from "effect"

// The shape every durable table follows, on a table of the test's own, through the product's own
// statements: claim = lease (`claimDue`), later transitions fenced by the claimed attempt (`attemptFence`).
const setup = (sql: SqlClient.SqlClient) =>
  sql`CREATE TABLE work (
    id text primary key,
    state text not null default 'pending',
    attempt int not null default 0,
    owner text,
    due_at timestamptz not null default '2000-01-01'
  )`.pipe(Effect.zipRight(sql`INSERT INTO work (id) SELECT 'w' || lpad(g::text, 2, '0') FROM generate_series(1, 10) g`))

const START = Date.parse("2030-01-01T00:00:00Z")

const claim = (sql: SqlClient.SqlClient, owner: string, limit: number, leaseMs: number) =>
  Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    return yield* sql<{ id: string; attempt: number }>`${claimDue(sql, {
      table: "work",
      due: sql`state IN ('pending', 'claimed') AND due_at <= ${new Date(now)}`,
      orderBy: sql`due_at, id`,
      limit,
      lease: sql`state = 'claimed', owner = ${owner}, due_at = ${new Date(now + leaseMs)}`,
      returning: sql`m.id, m.attempt`
    })}
    SELECT id, attempt FROM claimed ORDER BY id`
  })

const completeAll = (sql: SqlClient.SqlClient, claims: ReadonlyArray<{ readonly id: string; readonly attempt: number }>) =>
  fencedBatch(
    Effect.map(
      sql<{ id: string }>`UPDATE work m SET state = 'done' WHERE m.state = 'claimed' AND ${attemptFence(sql, claims, "text")} RETURNING m.id`,
      (rows) => rows.map((row) => row.id)
    ),
    "work",
    claims
  )

const complete = (sql: SqlClient.SqlClient, id: string, attempt: number) =>
  fenced(
    sql<{ id: string }>`UPDATE work m SET state = 'done' WHERE m.state = 'claimed' AND ${attemptFence(sql, [{ id, attempt }], "text")} RETURNING m.id`,
    { resource: "work", id, attempt }
  )

/** A node of PostgreSQL's JSON plan, with the fields the tests read. */
interface PlanNode {
  readonly "Node Type": string
  readonly "Index Name"?: string
  readonly Plans?: ReadonlyArray<PlanNode>
}

const findNode = (node: PlanNode, matches: (node: PlanNode) => boolean): PlanNode | undefined =>
  matches(node) ? node : (node.Plans ?? []).map((child) => findNode(child, matches)).find((found) => found !== undefined)

const rows = (sql: SqlClient.SqlClient) => sql<{ id: string; state: string; attempt: number; owner: string | null }>`
  SELECT id, state, attempt, owner FROM work ORDER BY id`

describe("Lease fencing (DESIGN: claim = lease; later transitions WHERE id = $1 AND attempt = $claimed)", () => {
  it.scoped("core's claimDue takes the lease and increments the attempt in the same statement, at most LIMIT rows", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(START)
      const { sql } = yield* freshDatabaseClient()
      yield* setup(sql)
      const claimed = yield* claim(sql, "a", 3, 30_000)
      expect(claimed).toEqual([{ id: "w01", attempt: 1 }, { id: "w02", attempt: 1 }, { id: "w03", attempt: 1 }])
      const leased = yield* sql<{ n: number; due: Date }>`
        SELECT count(*)::int AS n, max(due_at) AS due FROM work WHERE state = 'claimed' AND owner = 'a' GROUP BY owner`
      expect(leased).toEqual([{ n: 3, due: new Date(START + 30_000) }])
      expect(yield* sql`SELECT count(*)::int AS n FROM work WHERE state = 'pending' AND attempt = 0`).toEqual([{ n: 7 }])
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scopedLive("FOR UPDATE SKIP LOCKED: while one claimer's transaction holds its rows, a claimer on another connection gets the other rows at once, never waiting", () =>
    Effect.gen(function* () {
      const { db, sql } = yield* freshDatabaseClient()
      yield* setup(sql)
      const other = yield* connect(db.url)
      const held = yield* Deferred.make<ReadonlyArray<{ id: string; attempt: number }>>()
      const release = yield* Deferred.make<void>()
      const first = yield* Effect.fork(sql.withTransaction(
        Effect.gen(function* () {
          const mine = yield* claim(sql, "a", 6, 30_000)
          yield* Deferred.succeed(held, mine)
          yield* Deferred.await(release)
          return mine
        })
      ))
      const a = yield* Deferred.await(held)
      // Without SKIP LOCKED this claim would queue behind the open transaction's row locks.
      const b = yield* claim(other, "b", 6, 30_000).pipe(
        Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "the second claim waited on the first one's locks" })
      )
      expect(yield* Fiber.poll(first)).toSatisfy((exit) => exit._tag === "None")
      expect(a.map((row) => row.id)).toEqual(["w01", "w02", "w03", "w04", "w05", "w06"])
      expect(b.map((row) => row.id)).toEqual(["w07", "w08", "w09", "w10"])
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(first)
      expect((yield* rows(sql)).map((row) => [row.owner, row.attempt])).toEqual([
        ...Array.from({ length: 6 }, () => ["a", 1]),
        ...Array.from({ length: 4 }, () => ["b", 1])
      ])
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("an expired lease is claimable again with a higher attempt (not before); the late owner's transition is LeaseLost and changes nothing", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(START)
      const { sql } = yield* freshDatabaseClient()
      yield* setup(sql)
      yield* sql`UPDATE work SET state = 'done' WHERE id <> 'w01'`
      const [first] = yield* claim(sql, "stale", 1, 1_000)
      yield* TestClock.adjust(999)
      expect(yield* claim(sql, "fresh", 1, 30_000)).toEqual([])
      yield* TestClock.adjust(1)
      const [second] = yield* claim(sql, "fresh", 1, 30_000)
      expect(second).toEqual({ id: first!.id, attempt: 2 })
      const error = yield* Effect.flip(complete(sql, first!.id, first!.attempt))
      expect(error).toBeInstanceOf(LeaseLost)
      expect(error).toMatchObject({ _tag: "LeaseLost", id: first!.id, attempt: 1 })
      expect((yield* rows(sql))[0]).toEqual({ id: "w01", state: "claimed", owner: "fresh", attempt: 2 })
      expect(yield* complete(sql, second!.id, second!.attempt)).toEqual({ id: first!.id })
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("core's claimDue updates the rows it locked by the row versions it locked (a TID scan, no second lookup through the primary key); with nothing due it claims and changes nothing", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(START)
      const { sql } = yield* freshDatabaseClient()
      yield* setup(sql)
      // A table of some size, analyzed: a table of a few pages is read whole whatever the statement says.
      yield* sql`INSERT INTO work (id, state) SELECT 'x' || g, 'done' FROM generate_series(1, 20000) g`
      yield* sql`ANALYZE work`
      const now = new Date(START)
      const statement = claimDue(sql, {
        table: "work",
        due: sql`state IN ('pending', 'claimed') AND due_at <= ${now}`,
        orderBy: sql`due_at, id`,
        limit: 3,
        lease: sql`state = 'claimed', owner = 'a', due_at = ${now}`,
        returning: sql`m.id`
      })
      const [explained] = yield* sql<{ "QUERY PLAN": ReadonlyArray<{ Plan: PlanNode }> }>`EXPLAIN (FORMAT JSON) ${statement} SELECT id FROM claimed`
      const update = findNode(explained!["QUERY PLAN"][0]!.Plan, (node) => node["Node Type"] === "ModifyTable")
      expect(update?.Plans?.map((node) => node["Node Type"])).toContain("Tid Scan")
      expect(findNode(update!, (node) => node["Index Name"] === "work_pkey")).toBeUndefined()
      yield* sql`UPDATE work SET state = 'done'`
      const before = yield* rows(sql)
      expect(yield* claim(sql, "a", 3, 30_000)).toEqual([])
      expect(yield* rows(sql)).toEqual(before)
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("core's attemptFence: a batched transition moves only rows whose claimed attempt still matches; an empty batch moves nothing", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(START)
      const { sql } = yield* freshDatabaseClient()
      yield* setup(sql)
      yield* sql`UPDATE work SET state = 'done' WHERE id > 'w03'`
      const claimed = yield* claim(sql, "a", 3, 1_000)
      // The first row's lease expires and another claim takes it over.
      yield* sql`UPDATE work SET due_at = ${new Date(START)} WHERE id = ${claimed[0]!.id}`
      expect(yield* claim(sql, "b", 1, 30_000)).toEqual([{ id: claimed[0]!.id, attempt: 2 }])
      expect(yield* completeAll(sql, [])).toEqual({ moved: [], lost: [] })
      expect((yield* rows(sql)).filter((row) => row.id <= "w03" && row.state === "done")).toEqual([])
      const result = yield* completeAll(sql, claimed)
      expect([...result.moved].sort()).toEqual([claimed[1]!.id, claimed[2]!.id])
      expect(result.lost.map((lost) => [lost.id, lost.attempt])).toEqual([[claimed[0]!.id, 1]])
      expect((yield* rows(sql))[0]).toEqual({ id: claimed[0]!.id, state: "claimed", owner: "b", attempt: 2 })
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.effect("the lease deadline comes from Effect's Clock", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(1_000_000)
      expect((yield* leaseDeadline("30 seconds")).getTime()).toBe(1_030_000)
    }))
})

describe("Lease helpers", () => {
  it.effect("DESIGN 'reports LeaseLost when it touches no row': fenced fails with the target's resource, id and attempt; a transition that moved its row returns that row", () =>
    Effect.gen(function*() {
      const target = { resource: "work", id: "w01", attempt: 3 }
      const error = yield* Effect.flip(fenced(Effect.succeed([]), target))
      expect(error).toBeInstanceOf(LeaseLost)
      expect({ tag: error._tag, code: error.code, resource: error.resource, id: error.id, attempt: error.attempt })
        .toEqual({ tag: "LeaseLost", code: "lease-lost", ...target })
      expect(yield* fenced(Effect.succeed([{ id: "w01" }, { id: "other" }]), target)).toEqual({ id: "w01" })
    }))
})
