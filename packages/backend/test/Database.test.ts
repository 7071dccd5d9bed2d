import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Duration, Effect, Either, Layer, Option, Redacted } from "effect"
import { createServer, type Server, type Socket, connect } from "node:net"
import { AppConfig, type AppConfigShape } from "../src/Config.ts"
import { DatabaseLive } from "../src/Database.ts"

/**
 * A loopback TCP relay in front of the test database. `silent` makes it accept new connections and then say
 * nothing, the way a server caught between stopping and starting can leave a connect attempt; `cut` closes every
 * relayed connection, as a server stop does.
 */
const relayTo = (target: { readonly host: string; readonly port: number }) =>
  Effect.acquireRelease(
    Effect.async<{ readonly server: Server; readonly port: number; readonly sockets: Set<Socket>; mode: { silent: boolean } }>((resume) => {
      const sockets = new Set<Socket>()
      const mode = { silent: false }
      const server = createServer((client) => {
        sockets.add(client)
        client.on("close", () => sockets.delete(client))
        client.on("error", () => {})
        if (mode.silent) return
        const upstream = connect(target.port, target.host)
        sockets.add(upstream)
        upstream.on("close", () => {
          sockets.delete(upstream)
          client.destroy()
        })
        upstream.on("error", () => {})
        client.on("close", () => upstream.destroy())
        client.pipe(upstream).pipe(client)
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        resume(Effect.succeed({ server, port: typeof address === "object" && address !== null ? address.port : 0, sockets, mode }))
      })
    }),
    (relay) =>
      Effect.async<void>((resume) => {
        for (const socket of relay.sockets) socket.destroy()
        relay.server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map((relay) => ({
    port: relay.port,
    silent: (silent: boolean) => Effect.sync(() => void (relay.mode.silent = silent)),
    cut: Effect.sync(() => {
      for (const socket of relay.sockets) socket.destroy()
    })
  })))

const poolThrough = (url: string) =>
  DatabaseLive.pipe(
    Layer.provide(Layer.succeed(AppConfig, {
      role: "backend",
      databaseUrl: Option.some(Redacted.make(url)),
      databasePoolMax: 2
    } as unknown as AppConfigShape))
  )

layer(TestDatabaseLive, { excludeTestServices: true })("the database pool", (it) => {
  it.scoped(
    "a new connection that gets no answer fails within the connect bound (a query does not wait forever), and the pool connects again once the server answers",
    () =>
      Effect.gen(function* () {
        const db = yield* TestDatabase
        const target = new URL(db.url)
        const relay = yield* relayTo({ host: target.hostname, port: Number(target.port) })
        const through = new URL(db.url)
        through.host = `127.0.0.1:${relay.port}`
        const context = yield* Layer.build(poolThrough(through.toString()))
        const sql = yield* Effect.provide(SqlClient.SqlClient, context)
        expect(yield* sql<{ readonly one: number }>`SELECT 1 AS one`).toEqual([{ one: 1 }])

        // The server goes away and the next connect attempt is met with silence.
        yield* relay.silent(true)
        yield* relay.cut
        yield* Effect.sleep("200 millis")
        const started = Date.now()
        const silent = yield* sql`SELECT 1 AS one`.pipe(Effect.either, Effect.timeoutOption(Duration.seconds(15)))
        expect(Option.isSome(silent), "the query is still waiting for a connection after 15 s").toBe(true)
        const failed = Option.getOrThrow(silent)
        expect(Either.isLeft(failed) && failed.left._tag).toBe("SqlError")
        expect(Date.now() - started).toBeLessThan(10_000)

        yield* relay.silent(false)
        expect(yield* sql<{ readonly one: number }>`SELECT 1 AS one`).toEqual([{ one: 1 }])
      }),
    30_000
  )

  it.scoped(
    "a statement whose text ends with /* prepared */ is sent as a named prepared statement, parsed once per connection under one name per text; any other statement stays unnamed",
    () =>
      Effect.gen(function* () {
        const db = yield* TestDatabase
        const context = yield* Layer.build(poolThrough(db.url))
        const sql = yield* Effect.provide(SqlClient.SqlClient, context)
        // One transaction holds one connection: prepared statements belong to a session.
        const names = yield* sql.withTransaction(Effect.gen(function* () {
          for (const value of [1, 2, 3]) {
            expect(yield* sql<{ readonly x: number }>`SELECT ${value}::int AS x /* prepared */`).toEqual([{ x: value }])
          }
          yield* sql`SELECT ${4}::int AS y`
          return yield* sql<{ readonly name: string; readonly statement: string }>`
            SELECT name, statement FROM pg_prepared_statements ORDER BY name`
        }))
        expect(names.length).toBe(1)
        expect(names[0]!.name).toMatch(/^delivery_[0-9a-f]{24}$/)
        expect(names[0]!.statement).toBe("SELECT $1::int AS x /* prepared */")
      })
  )
})
