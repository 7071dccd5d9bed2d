import { Reactivity } from "@effect/experimental"
import { SqlClient, type SqlConnection, SqlError } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Stream } from "effect"

/**
 * Every statement that reaches a PostgreSQL connection through this client, in order
 * (transaction control included). Tests use it to prove that a refused request did
 * no database work at all, rather than trusting the code's order of checks.
 */
export class SqlCounter extends Context.Tag("@delivery/testing/SqlCounter")<
  SqlCounter,
  { readonly statements: Effect.Effect<ReadonlyArray<string>>; readonly count: Effect.Effect<number> }
>() {}

const counting = (conn: SqlConnection.Connection, seen: Array<string>): SqlConnection.Connection => ({
  execute: (sql, params, transformRows) =>
    Effect.suspend(() => {
      seen.push(sql)
      return conn.execute(sql, params, transformRows)
    }),
  executeRaw: (sql, params) =>
    Effect.suspend(() => {
      seen.push(sql)
      return conn.executeRaw(sql, params)
    }),
  executeValues: (sql, params) =>
    Effect.suspend(() => {
      seen.push(sql)
      return conn.executeValues(sql, params)
    }),
  executeUnprepared: (sql, params, transformRows) =>
    Effect.suspend(() => {
      seen.push(sql)
      return conn.executeUnprepared(sql, params, transformRows)
    }),
  executeStream: (sql, params, transformRows) =>
    Stream.suspend(() => {
      seen.push(sql)
      return conn.executeStream(sql, params, transformRows)
    })
})

/** A `SqlClient` over the suite's `PgClient` whose every statement is counted. */
export const CountingSqlLive = Layer.effectContext(
  Effect.gen(function* () {
    const pg = yield* PgClient.PgClient
    const seen: Array<string> = []
    const client = yield* SqlClient.make({
      acquirer: Effect.map(pg.reserve, (conn) => counting(conn, seen)),
      compiler: PgClient.makeCompiler(),
      spanAttributes: []
    })
    return Context.make(SqlClient.SqlClient, client).pipe(
      Context.add(SqlCounter, {
        statements: Effect.sync(() => seen.slice()),
        count: Effect.sync(() => seen.length)
      })
    )
  }).pipe(Effect.provide(Reactivity.layer))
)

/** A `SqlClient` whose database is down: every statement fails with a `SqlError` (with a pg-like SQLSTATE). */
export const UnreachableSqlLive = Layer.effect(
  SqlClient.SqlClient,
  SqlClient.make({
    acquirer: Effect.fail(
      new SqlError.SqlError({ message: "connection refused", cause: Object.assign(new Error("down"), { code: "08006" }) })
    ),
    compiler: PgClient.makeCompiler(),
    spanAttributes: []
  })
).pipe(Layer.provide(Reactivity.layer))
