import { Reactivity } from "@effect/experimental"
import { SqlClient, type SqlConnection } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Stream } from "effect"

/**
 * Every statement that reaches a PostgreSQL connection through this client, in order (transaction
 * control included), so a test proves "no database work" by observation (same idea as identity's).
 */
export class SqlCounter extends Context.Tag("@delivery/envelope-inbox/test/SqlCounter")<
  SqlCounter,
  { readonly statements: Effect.Effect<ReadonlyArray<string>> }
>() {}

const counting = (conn: SqlConnection.Connection, seen: Array<string>): SqlConnection.Connection => ({
  execute: (sql, params, transformRows) => Effect.suspend(() => (seen.push(sql), conn.execute(sql, params, transformRows))),
  executeRaw: (sql, params) => Effect.suspend(() => (seen.push(sql), conn.executeRaw(sql, params))),
  executeValues: (sql, params) => Effect.suspend(() => (seen.push(sql), conn.executeValues(sql, params))),
  executeUnprepared: (sql, params, transformRows) =>
    Effect.suspend(() => (seen.push(sql), conn.executeUnprepared(sql, params, transformRows))),
  executeStream: (sql, params, transformRows) => Stream.suspend(() => (seen.push(sql), conn.executeStream(sql, params, transformRows)))
})

/** A `SqlClient` over the suite's `PgClient` whose every statement is recorded. */
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
      Context.add(SqlCounter, { statements: Effect.sync(() => seen.slice()) })
    )
  }).pipe(Effect.provide(Reactivity.layer))
)
