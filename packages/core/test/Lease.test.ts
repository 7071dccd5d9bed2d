import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { fenced, fencedBatch, leaseDeadline, LeaseLost } from "@delivery/core"
import { connect, freshDatabaseClient } from "@delivery/testing"
import { PgClusterFromVitest } from "@delivery/testing/vitest"
import { Effect, TestClock } from "effect"

// The shape every durable table follows: claim = lease, later transitions fenced by the claimed attempt.
const setup = (sql: SqlClient.SqlClient) =>
  sql`CREATE TABLE work (
    id text primary key,
    state text not null default 'pending',
    attempt int not null default 0,
    owner text,
    lease_expires_at timestamptz
  )`.pipe(Effect.zipRight(sql`INSERT INTO work (id) SELECT 'w' || g FROM generate_series(1, 10) g`))

const claim = (sql: SqlClient.SqlClient, owner: string, limit: number, leaseMs: number) =>
  sql<{ id: string; attempt: number }>`
    WITH due AS (
      SELECT id FROM work
      WHERE state = 'pending' OR (state = 'claimed' AND lease_expires_at < now())
      ORDER BY id FOR UPDATE SKIP LOCKED LIMIT ${limit}
    )
    UPDATE work SET state = 'claimed', owner = ${owner}, attempt = work.attempt + 1,
      lease_expires_at = now() + ${leaseMs} * interval '1 millisecond'
    FROM due WHERE work.id = due.id
    RETURNING work.id, work.attempt`

const complete = (sql: SqlClient.SqlClient, id: string, attempt: number) =>
  fenced(
    sql<{ id: string }>`UPDATE work SET state = 'done' WHERE id = ${id} AND attempt = ${attempt} AND state = 'claimed' RETURNING id`,
    { resource: "work", id, attempt }
  )

describe("Lease fencing (DESIGN: claim = lease; later transitions WHERE id = $1 AND attempt = $claimed)", () => {
  it.scoped("the claim increments the attempt in the same statement, and two claimers get disjoint rows", () =>
    Effect.gen(function* () {
      const { db, sql } = yield* freshDatabaseClient()
      yield* setup(sql)
      const other = yield* connect(db.url)
      const [a, b] = yield* Effect.all([claim(sql, "a", 6, 30_000), claim(other, "b", 6, 30_000)], { concurrency: 2 })
      const ids = [...a, ...b].map((row) => row.id)
      expect(new Set(ids).size).toBe(ids.length)
      expect(ids.length).toBe(10)
      expect([...a, ...b].every((row) => row.attempt === 1)).toBe(true)
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("an expired lease is claimable again with a higher attempt, and the late owner's transition is LeaseLost and changes nothing", () =>
    Effect.gen(function* () {
      const { sql } = yield* freshDatabaseClient()
      yield* setup(sql)
      const [first] = yield* claim(sql, "stale", 1, 1)
      yield* sql`SELECT pg_sleep(0.02)`
      const [second] = yield* claim(sql, "fresh", 1, 30_000)
      expect(second).toEqual({ id: first!.id, attempt: 2 })
      const error = yield* Effect.flip(complete(sql, first!.id, first!.attempt))
      expect(error).toBeInstanceOf(LeaseLost)
      expect(error).toMatchObject({ _tag: "LeaseLost", id: first!.id, attempt: 1 })
      expect(yield* sql`SELECT state, owner, attempt FROM work WHERE id = ${first!.id}`).toEqual([
        { state: "claimed", owner: "fresh", attempt: 2 }
      ])
      expect(yield* complete(sql, second!.id, second!.attempt)).toEqual({ id: first!.id })
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.scoped("a batched fenced transition moves only rows whose claimed attempt still matches", () =>
    Effect.gen(function* () {
      const { sql } = yield* freshDatabaseClient()
      yield* setup(sql)
      const claimed = yield* claim(sql, "a", 3, 30_000)
      // Another claim took one row over after its lease was forced to expire.
      yield* sql`UPDATE work SET lease_expires_at = now() - interval '1 second' WHERE id = ${claimed[0]!.id}`
      yield* claim(sql, "b", 1, 30_000)
      const result = yield* fencedBatch(
        sql<{ id: string }>`
          UPDATE work SET state = 'done' FROM (SELECT * FROM UNNEST(${claimed.map((c) => c.id)}::text[], ${claimed.map((c) => c.attempt)}::int[]) AS t(id, attempt)) AS c
          WHERE work.id = c.id AND work.attempt = c.attempt RETURNING work.id`.pipe(Effect.map((rows) => rows.map((row) => row.id))),
        "work",
        claimed
      )
      expect([...result.moved].sort()).toEqual([claimed[1]!.id, claimed[2]!.id].sort())
      expect(result.lost.map((lost) => lost.id)).toEqual([claimed[0]!.id])
    }).pipe(Effect.provide(PgClusterFromVitest)))

  it.effect("the lease deadline comes from Effect's Clock", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(1_000_000)
      expect((yield* leaseDeadline("30 seconds")).getTime()).toBe(1_030_000)
    }))
})
