import { repositoryRootOf } from "@delivery/core"
import { Data, Effect } from "effect"
import { mkdirSync } from "node:fs"
import { join, resolve } from "node:path"

// PGlite reads its WebAssembly and data files next to its own module (`new URL("./pglite.wasm", import.meta.url)`),
// so it must never be copied into the bundle `bun run start` runs: it is imported by path, resolved from the backend
// package as installed, which the bundler leaves to run time.
const backendPackage = join(repositoryRootOf(import.meta.url), "packages/backend")
const importInstalled = (specifier: string): Promise<unknown> => import(Bun.resolveSync(specifier, backendPackage))

export class EmbeddedPostgresError extends Data.TaggedError("EmbeddedPostgresError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

/**
 * The development default behind a missing DATABASE_URL: PGlite with its data under `dataDir`, served on a free
 * 127.0.0.1 port by the PGlite socket server so the backend reaches it through the same PgClient as production.
 * The server and the instance are closed when the scope closes, after the pool (acquired later) is disposed.
 */
export const startEmbeddedPostgres = (dataDir: string) =>
  Effect.gen(function* () {
    const directory = resolve(dataDir)
    yield* Effect.logWarning(
      "DATABASE_URL is not set: starting the EMBEDDED DEVELOPMENT DATABASE (PGlite). " +
        "This is a development default for a first look, NOT for production or tests: " +
        "one connection, every statement serialized, PostgreSQL 18 in WebAssembly."
    ).pipe(Effect.annotateLogs({ dataDir: directory }))

    const db = yield* Effect.acquireRelease(
      Effect.tryPromise({
        // Imported on demand: a production process (DATABASE_URL set) never loads the WebAssembly database.
        try: async () => {
          mkdirSync(directory, { recursive: true })
          const { PGlite } = (await importInstalled("@electric-sql/pglite")) as typeof import("@electric-sql/pglite")
          return PGlite.create(directory)
        },
        catch: (cause) => new EmbeddedPostgresError({ message: `cannot open the embedded database in ${directory}`, cause })
      }),
      (db) =>
        Effect.promise(() => db.close()).pipe(
          Effect.zipRight(Effect.logInfo("shutdown: embedded database closed"))
        )
    )

    const server = yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          const { PGLiteSocketServer } = (await importInstalled("@electric-sql/pglite-socket")) as typeof import("@electric-sql/pglite-socket")
          const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
          await server.start()
          return server
        },
        catch: (cause) => new EmbeddedPostgresError({ message: "cannot start the embedded database socket server", cause })
      }),
      (server) => Effect.promise(() => server.stop())
    )

    const address = server.getServerConn()
    yield* Effect.logInfo(`embedded database listening on ${address}`)
    // PGlite accepts any user and has no password: nothing secret in this URL.
    return { url: `postgres://postgres@${address}/postgres`, dataDir: directory }
  })
