import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { runMigrations } from "@delivery/core"
import { Data, Duration, Effect, Layer, Option, Redacted } from "effect"
import { AppConfig } from "./Config.ts"
import { startEmbeddedPostgres } from "./EmbeddedPostgres.ts"

// The log layer is built before the pool, so its finalizer runs right after the pool's.
const pool = (config: PgClient.PgClientConfig) =>
  PgClient.layer(config).pipe(
    Layer.provideMerge(Layer.scopedDiscard(Effect.addFinalizer(() => Effect.logInfo("shutdown: database pool disposed"))))
  )

/**
 * The one pool of the process: PgClient on DATABASE_URL, or, without it, on the embedded development
 * database (one connection). Its finalizers run after everything that uses the pool has been released.
 */
export const DatabaseLive = Layer.unwrapScoped(
  Effect.gen(function* () {
    const config = yield* AppConfig
    // Shows up in pg_stat_activity: operators (and tests) can tell a backend's connections from an ingress's.
    const applicationName = `delivery-${config.role}`
    if (Option.isSome(config.databaseUrl)) {
      yield* Effect.logInfo(`connecting to DATABASE_URL (pool of ${config.databasePoolMax})`)
      return pool({ url: config.databaseUrl.value, maxConnections: config.databasePoolMax, applicationName })
    }
    // Acquired here, in the outer scope: closed only after the pool below has been disposed.
    const embedded = yield* startEmbeddedPostgres(config.embeddedDataDir)
    // PGlite serializes everything through one backend: a second connection would only queue.
    return pool({ url: Redacted.make(embedded.url), maxConnections: 1, applicationName })
  })
)

const healthCheckTimeout = Duration.seconds(5)

export class DatabaseHealthCheckError extends Data.TaggedError("DatabaseHealthCheckError")<{
  readonly message: string
}> {}

/**
 * Start-up gate, in order: migrations (one transaction under an advisory lock, then every file verified),
 * then a health check. Nothing that depends on this layer (services, workers, the listener) starts before.
 */
export const StartupChecksLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const applied = yield* runMigrations()
    yield* Effect.logInfo(
      applied.length === 0
        ? "migrations applied: database already up to date"
        : `migrations applied: ${applied.map(([id, name]) => `${String(id).padStart(4, "0")}_${name}`).join(", ")}`
    )
    const sql = yield* SqlClient.SqlClient
    yield* sql`SELECT 1`.pipe(
      Effect.timeoutFail({
        duration: healthCheckTimeout,
        onTimeout: () => new DatabaseHealthCheckError({ message: "database health check (SELECT 1) timed out" })
      })
    )
    yield* Effect.logInfo("database health check passed")
  })
)
