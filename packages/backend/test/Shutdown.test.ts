import { expect, layer } from "@effect/vitest"
import { Reactivity } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Deferred, Effect, Fiber, Redacted, Schedule } from "effect"
import { freePort, get, probePort, spawnBun } from "@delivery/testing"
import { fixturePath } from "./support/Fixtures.ts"

const backendWithWorker = fixturePath("backend-with-worker.ts")

/**
 * Holds an in-flight request open with a real mechanism instead of a test-only route: the test locks the
 * migrations table, so `GET /ready`'s migration check waits inside PostgreSQL until the lock is released.
 */
const holdMigrationsLock = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const locked = yield* Deferred.make<void>()
  const release = yield* Deferred.make<void>()
  const holder = yield* sql.withTransaction(
    Effect.gen(function* () {
      yield* sql`LOCK TABLE effect_sql_migrations IN ACCESS EXCLUSIVE MODE`
      yield* Deferred.succeed(locked, undefined)
      yield* Deferred.await(release)
    })
  ).pipe(Effect.forkScoped)
  yield* Deferred.await(locked)
  return { release: Deferred.succeed(release, undefined).pipe(Effect.zipRight(Fiber.join(holder))) }
})

/** Deterministic "the request is in flight": the backend's own connection is waiting on that lock. */
const awaitBackendBlockedOnLock = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql<{ readonly n: number }>`
    SELECT count(*)::int AS n FROM pg_stat_activity
    WHERE application_name = 'delivery-backend' AND wait_event_type = 'Lock'`.pipe(
    Effect.filterOrFail((rows) => rows[0]!.n > 0),
    Effect.retry(Schedule.spaced("20 millis")),
    Effect.timeout("20 seconds")
  )
})

const inOrder = (output: string, lines: ReadonlyArray<string>) => {
  const positions = lines.map((line) => output.indexOf(line))
  expect(positions.filter((position) => position < 0).map((_, i) => lines[i])).toEqual([])
  expect([...positions].sort((a, b) => a - b)).toEqual(positions)
}

layer(TestDatabaseLive, { excludeTestServices: true })("graceful shutdown", (it) => {
  it.scoped("Startup runs migrations and health check before the workers start; Shutdown stops HTTP acceptance, lets the in-flight request finish, interrupts workers, joins their completion, and disposes the database pool (exit 0)", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const sql = yield* SqlClient.SqlClient
      const port = yield* freePort
      const backend = yield* spawnBun(backendWithWorker, {
        DATABASE_URL: db.url,
        PORT: String(port),
        READY_CHECK_TIMEOUT_MS: "30000",
        SHUTDOWN_DRAIN_MS: "30000"
      })
      yield* backend.waitForOutput(/stand-in worker waiting/)
      yield* backend.waitForOutput(/listening on http:/)
      const before = yield* get(port, "/ready")
      expect(JSON.parse(before.body)).toMatchObject({ status: "ready", checks: { workers: { running: ["stand-in"] } } })

      const lock = yield* holdMigrationsLock
      const inFlight = yield* Effect.fork(get(port, "/ready"))
      yield* awaitBackendBlockedOnLock

      yield* backend.signal("SIGTERM")
      yield* backend.waitForOutput(/shutdown: HTTP stopped accepting; draining 1 in-flight/)
      // New connections are refused while the in-flight request is still running.
      expect(yield* probePort(port)).toBe("refused")
      expect(yield* backend.hasExited).toBe(false)
      expect(yield* backend.output).not.toContain("interrupting worker")

      yield* lock.release
      const answered = yield* Fiber.join(inFlight)
      expect(answered.status).toBe(200)
      expect(JSON.parse(answered.body)).toMatchObject({ status: "ready" })

      expect(yield* backend.exitCode()).toBe(0)
      inOrder(yield* backend.output, [
        "migrations applied",
        "database health check passed",
        "worker stand-in started",
        "listening on http",
        "shutdown: HTTP stopped accepting",
        "shutdown: in-flight requests drained",
        "shutdown: HTTP server closed",
        "shutdown: interrupting worker stand-in",
        "stand-in worker recorded its stop",
        "shutdown: worker stand-in interrupted and joined",
        "shutdown: database pool disposed"
      ])
      // The worker's cleanup statement ran before pool disposal and was committed.
      const [row] = yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM backend_stand_in_stops`
      expect(row!.n).toBe(1)
    }))

  it.scoped("in-flight requests get SHUTDOWN_DRAIN_MS to finish; past that bound they are interrupted and shutdown still completes in order with exit 0", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const port = yield* freePort
      const backend = yield* spawnBun(backendWithWorker, {
        DATABASE_URL: db.url,
        PORT: String(port),
        READY_CHECK_TIMEOUT_MS: "30000",
        SHUTDOWN_DRAIN_MS: "300"
      })
      yield* backend.waitForOutput(/listening on http:/)
      const lock = yield* holdMigrationsLock
      const inFlight = yield* Effect.fork(Effect.either(get(port, "/ready").pipe(Effect.sandbox)))
      yield* awaitBackendBlockedOnLock

      yield* backend.signal("SIGTERM")
      yield* backend.waitForOutput(/shutdown: drain bound reached, interrupting 1 request/)
      expect(yield* backend.exitCode()).toBe(0)
      yield* lock.release
      // The interrupted request is not answered with a success.
      const outcome = yield* Fiber.join(inFlight)
      if (outcome._tag === "Right") expect(outcome.right.status).toBe(503)
      inOrder(yield* backend.output, [
        "shutdown: drain bound reached",
        "shutdown: worker stand-in interrupted and joined",
        "shutdown: database pool disposed"
      ])
    }))
})

layer(TestDatabaseLive, { excludeTestServices: true })("shutdown with a database failure", (it) => {
  it.scoped("A database failure during this cleanup produces a nonzero exit", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const sql = yield* SqlClient.SqlClient
      const port = yield* freePort
      const backend = yield* spawnBun(backendWithWorker, { DATABASE_URL: db.url, PORT: String(port) })
      yield* backend.waitForOutput(/stand-in worker waiting/)
      yield* backend.waitForOutput(/listening on http:/)

      // The database goes away for this backend: no new connection is accepted and its connections are
      // terminated. Only the cluster's admin connection may disallow connections to the suite's database.
      const admin = yield* PgClient.make({ url: Redacted.make(db.adminUrl), maxConnections: 1 }).pipe(
        Effect.provide(Reactivity.layer)
      )
      yield* admin`ALTER DATABASE ${admin(db.name)} ALLOW_CONNECTIONS false`
      yield* sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = ${db.name} AND application_name = 'delivery-backend'`
      // Alive, but not ready, and /ready says which checks failed without any driver text.
      expect((yield* get(port, "/health")).status).toBe(200)
      const notReady = yield* get(port, "/ready")
      expect(notReady.status).toBe(503)
      expect(JSON.parse(notReady.body)).toMatchObject({
        failed: ["database", "migrations"],
        checks: { database: { ok: false, reason: "database-unreachable" }, workers: { ok: true } }
      })
      expect(notReady.body).not.toContain(db.name)
      expect(yield* backend.hasExited).toBe(false)

      yield* backend.signal("SIGTERM")
      const code = yield* backend.exitCode()
      const output = yield* backend.output
      expect(code).not.toBe(0)
      expect(output).toContain("shutdown: worker stand-in did not stop cleanly")
      expect(output).not.toContain("stand-in worker recorded its stop")
      // The rest of the cleanup still ran.
      expect(output).toContain("shutdown: database pool disposed")
    }))
})
