import { Reactivity } from "@effect/experimental"
import { BunContext } from "@effect/platform-bun"
import { PgClient } from "@effect/sql-pg"
import { runMigrations } from "@delivery/core"
import { Context, Effect, Layer, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { PgCluster } from "./PgCluster.ts"

/** A database of its own for one suite, on the shared cluster; `url` lets a suite start real processes on it. */
export class TestDatabase extends Context.Tag("@delivery/testing/TestDatabase")<
  TestDatabase,
  { readonly url: string; readonly name: string; readonly adminUrl: string }
>() {}

const withDatabase = (url: string, database: string) => {
  const parsed = new URL(url)
  parsed.pathname = `/${database}`
  return parsed.toString()
}

const adminClient = (adminUrl: string) =>
  PgClient.make({ url: Redacted.make(adminUrl), maxConnections: 1 }).pipe(
    Effect.provide(Reactivity.layer)
  )

/** Creates an empty database and drops it (with its connections) when the scope closes. */
export const createDatabase = Effect.gen(function* () {
  const cluster = yield* PgCluster
  const name = `t_${randomBytes(6).toString("hex")}`
  yield* Effect.acquireRelease(
    Effect.scoped(
      Effect.flatMap(adminClient(cluster.url), (sql) => sql`CREATE DATABASE ${sql(name)}`)
    ),
    () =>
      Effect.scoped(
        Effect.flatMap(adminClient(cluster.url), (sql) => sql`DROP DATABASE IF EXISTS ${sql(name)} WITH (FORCE)`)
      ).pipe(Effect.orDie)
  )
  return { url: withDatabase(cluster.url, name), name, adminUrl: cluster.url }
})

export const TestDatabaseEmpty = Layer.scoped(TestDatabase, createDatabase)

const clientFor = Layer.unwrapEffect(
  Effect.map(TestDatabase, (db) =>
    PgClient.layer({ url: Redacted.make(db.url), maxConnections: 10 }))
)

/** A fresh database migrated with the real migrations, and a `SqlClient` on it. */
export const MigratedDatabase = Layer.effectDiscard(runMigrations()).pipe(
  Layer.provideMerge(clientFor),
  Layer.provideMerge(TestDatabaseEmpty),
  Layer.provide(BunContext.layer)
)

/** An empty database with a `SqlClient`, for tests of the migrations themselves. */
export const EmptyDatabase = clientFor.pipe(Layer.provideMerge(TestDatabaseEmpty))

/** A scoped `SqlClient` on a fresh, empty database: for tests that need several independent databases or pools. */
export const freshDatabaseClient = (options: { readonly maxConnections?: number } = {}) =>
  Effect.gen(function* () {
    const db = yield* createDatabase
    const sql = yield* connect(db.url, options)
    return { db, sql }
  })

/** A scoped pool on an existing database (a second "process" on the same database). */
export const connect = (url: string, options: { readonly maxConnections?: number } = {}) =>
  PgClient.make({ url: Redacted.make(url), maxConnections: options.maxConnections ?? 4 }).pipe(
    Effect.provide(Reactivity.layer)
  )
