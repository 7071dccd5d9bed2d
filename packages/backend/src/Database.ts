import { Reactivity } from "@effect/experimental"
import { SqlClient, SqlError } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { PREPARED_MARKER, runMigrations } from "@delivery/core"
import { Context, Data, Duration, Effect, Layer, Option, Redacted } from "effect"
import { createHash } from "node:crypto"
import * as Pg from "pg"
import { AppConfig } from "./Config.ts"
import { startEmbeddedPostgres } from "./EmbeddedPostgres.ts"

/** The pool's connections now, for GET /metrics: open (in use or idle), idle, and queries waiting for one. */
export interface PoolUsage {
  readonly total: number
  readonly idle: number
  readonly waiting: number
  readonly max: number
}

export class DatabasePool extends Context.Tag("@delivery/backend/DatabasePool")<DatabasePool, {
  readonly usage: () => PoolUsage
}>() {}

export interface PoolOptions {
  readonly url: Redacted.Redacted
  readonly maxConnections: number
  readonly applicationName: string
}

const connectTimeout = Duration.seconds(5)

/**
 * A new connection that is neither established nor refused within 5 s fails. Without a bound, a connect attempt
 * made while the server stops or starts can wait forever (seen under CPU load: no answer, no error, no close), and
 * the fiber that needs the connection waits with it: a worker waiting that way never ticks again, so a claim cut
 * off by the outage is never taken back by the stale-claim rule. The bound is on the connect only: a query waiting
 * for a free pool connection still waits its turn (pg's pool-level `connectionTimeoutMillis` would bound both).
 */
class BoundedConnectClient extends Pg.Client {
  constructor(config: Pg.ClientConfig = {}) {
    super({ ...config, connectionTimeoutMillis: Duration.toMillis(connectTimeout) })
    const query = this.query.bind(this) as (...args: ReadonlyArray<unknown>) => unknown
    // @effect/sql-pg sends every statement unnamed: parsed and planned again on every execution.
    this.query = ((text: unknown, values?: unknown, callback?: unknown) =>
      typeof text === "string" && text.endsWith(PREPARED_MARKER)
        ? query({ text, values, name: preparedName(text) }, callback)
        : query(text, values, callback)) as typeof this.query
  }
}


const preparedNames = new Map<string, string>()
/** The same text always gets the same name, so no connection ever sees one name for two statements. */
const preparedName = (text: string): string => {
  let name = preparedNames.get(text)
  if (name === undefined) {
    name = `delivery_${createHash("sha256").update(text).digest("hex").slice(0, 24)}`
    preparedNames.set(text, name)
  }
  return name
}

/**
 * The pg pool, made here rather than inside PgClient (`PgClient.fromPool`) so that its counters can be read: PgClient
 * keeps its own pool to itself. The same lifecycle as `PgClient.layer`: a first `SELECT 1` within 5 s, `end()`
 * bounded by 1 s at release, connection errors left to the queries that meet them.
 */
const acquirePool = (options: PoolOptions) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const pool = new Pg.Pool({
        connectionString: Redacted.value(options.url),
        max: options.maxConnections,
        application_name: options.applicationName,
        Client: BoundedConnectClient
      })
      pool.on("error", () => {})
      return pool
    }),
    (pool) => Effect.promise(() => pool.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
  ).pipe(
    Effect.tap((pool) =>
      Effect.tryPromise({
        try: () => pool.query("SELECT 1"),
        catch: (cause) => new SqlError.SqlError({ cause, message: "PgClient: Failed to connect" })
      }).pipe(
        Effect.timeoutFail({
          duration: connectTimeout,
          onTimeout: () => new SqlError.SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
        })
      )
    )
  )

/** A pool and its PgClient, as the backend makes them (DatabaseLive); the outbox bench runs its worker on one. */
// The log layer is built before the pool, so its finalizer runs right after the pool's.
export const databasePool = (options: PoolOptions) =>
  Layer.scopedContext(
    Effect.gen(function* () {
      const pg = yield* acquirePool(options)
      const client = yield* PgClient.fromPool({ acquire: Effect.succeed(pg), applicationName: options.applicationName })
      const usage = (): PoolUsage => ({ total: pg.totalCount, idle: pg.idleCount, waiting: pg.waitingCount, max: options.maxConnections })
      return Context.make(PgClient.PgClient, client).pipe(
        Context.add(SqlClient.SqlClient, client),
        Context.add(DatabasePool, { usage })
      )
    })
  ).pipe(
    Layer.provide(Reactivity.layer),
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
      return databasePool({ url: config.databaseUrl.value, maxConnections: config.databasePoolMax, applicationName })
    }
    // Acquired here, in the outer scope: closed only after the pool below has been disposed.
    const embedded = yield* startEmbeddedPostgres(config.embeddedDataDir)
    // PGlite serializes everything through one backend: a second connection would only queue.
    return databasePool({ url: Redacted.make(embedded.url), maxConnections: 1, applicationName })
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
