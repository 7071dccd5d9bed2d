import { Reactivity } from "@effect/experimental"
import { SqlClient, type SqlConnection, SqlError } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Stream } from "effect"

/**
 * Every statement that reaches a PostgreSQL connection through this client, in order
 * (transaction control included). Tests use it to prove that a refused request did
 * no database work at all, rather than trusting the code's order of checks. `failWhen`
 * makes the statements it matches fail as an unreachable database would, without
 * reaching it (they are still counted); `undefined` ends that. `loseAnswerWhen` runs the statements it matches and
 * then fails them the same way, as a connection lost after the database did the work (a COMMIT that committed).
 */
export class SqlCounter extends Context.Tag("@delivery/testing/SqlCounter")<
  SqlCounter,
  {
    readonly statements: Effect.Effect<ReadonlyArray<string>>
    readonly count: Effect.Effect<number>
    readonly failWhen: (matches: ((sql: string) => boolean) | undefined) => Effect.Effect<void>
    readonly loseAnswerWhen: (matches: ((sql: string) => boolean) | undefined) => Effect.Effect<void>
  }
>() {}

const unreachable = () =>
  new SqlError.SqlError({ message: "connection refused", cause: Object.assign(new Error("down"), { code: "08006" }) })

interface Observed {
  readonly seen: Array<string>
  failing: ((sql: string) => boolean) | undefined
  losing: ((sql: string) => boolean) | undefined
}

const counting = (conn: SqlConnection.Connection, observed: Observed): SqlConnection.Connection => {
  /** Counts the statement, then runs it, or fails it when it matches. */
  const through = <A>(sql: string, run: () => Effect.Effect<A, SqlError.SqlError>) =>
    Effect.suspend(() => {
      observed.seen.push(sql)
      if (observed.failing?.(sql) === true) return Effect.fail(unreachable())
      return observed.losing?.(sql) === true ? Effect.zipRight(run(), Effect.fail(unreachable())) : run()
    })
  return {
    execute: (sql, params, transformRows) => through(sql, () => conn.execute(sql, params, transformRows)),
    executeRaw: (sql, params) => through(sql, () => conn.executeRaw(sql, params)),
    executeValues: (sql, params) => through(sql, () => conn.executeValues(sql, params)),
    executeUnprepared: (sql, params, transformRows) => through(sql, () => conn.executeUnprepared(sql, params, transformRows)),
    executeStream: (sql, params, transformRows) => Stream.unwrap(through(sql, () => Effect.succeed(conn.executeStream(sql, params, transformRows))))
  }
}

/** A `SqlClient` over the suite's `PgClient` whose every statement is counted. */
export const CountingSqlLive = Layer.effectContext(
  Effect.gen(function* () {
    const pg = yield* PgClient.PgClient
    const observed: Observed = { seen: [], failing: undefined, losing: undefined }
    const client = yield* SqlClient.make({
      acquirer: Effect.map(pg.reserve, (conn) => counting(conn, observed)),
      compiler: PgClient.makeCompiler(),
      spanAttributes: []
    })
    return Context.make(SqlClient.SqlClient, client).pipe(
      Context.add(SqlCounter, {
        statements: Effect.sync(() => observed.seen.slice()),
        count: Effect.sync(() => observed.seen.length),
        failWhen: (matches) =>
          Effect.sync(() => {
            observed.failing = matches
          }),
        loseAnswerWhen: (matches) =>
          Effect.sync(() => {
            observed.losing = matches
          })
      })
    )
  }).pipe(Effect.provide(Reactivity.layer))
)

/** A `SqlClient` whose database is down: every statement fails with a `SqlError` (with a pg-like SQLSTATE). */
export const UnreachableSqlLive = Layer.effect(
  SqlClient.SqlClient,
  SqlClient.make({
    acquirer: Effect.sync(unreachable).pipe(Effect.flip),
    compiler: PgClient.makeCompiler(),
    spanAttributes: []
  })
).pipe(Layer.provide(Reactivity.layer))
