import { expect, layer } from "@effect/vitest"
import { Reactivity } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Deferred, Effect, Fiber, Redacted, Schedule } from "effect"
import { connect } from "node:net"
import { freePort, get, parseRaw, probePort, rawExchange, spawnBun } from "@delivery/testing"
import { fixturePath } from "./support/Fixtures.ts"
import { annotation, logEntries, startBackend } from "./support/Backend.ts"
import { keepAliveClient, type LoadOutcome } from "./support/Http.ts"

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

/**
 * A connection that has sent only the start of a request: Bun does not count it as idle, so it stays open
 * through `server.stop(false)`. `finish` sends the rest and resolves with what the server answers.
 */
const partialRequest = (port: number, first: string, rest: string) =>
  Effect.async<{ readonly finish: Effect.Effect<ReturnType<typeof parseRaw>> }>((resume) => {
    const socket = connect({ host: "127.0.0.1", port })
    let data = ""
    const closed = new Promise<void>((resolve) => {
      socket.on("close", () => resolve())
      socket.on("error", () => resolve())
    })
    socket.on("data", (chunk) => (data += chunk.toString("latin1")))
    socket.once("connect", () => {
      socket.write(first)
      resume(Effect.succeed({
        finish: Effect.promise(async () => {
          socket.write(rest)
          await closed
          return parseRaw(data)
        })
      }))
    })
  })

const shuttingDown = (answer: ReturnType<typeof parseRaw>) => {
  expect([answer.status, answer.headers.connection, answer.headers["retry-after"]]).toEqual([503, "close", "1"])
  expect(answer.headers["x-correlation-id"]).toMatch(/^[0-9a-f]{32}$/)
  expect(JSON.parse(answer.body)).toEqual({ _tag: "ShuttingDown", reason: "shutting-down", correlationId: answer.headers["x-correlation-id"] })
}

const readyRequest = "GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

/** The fixture backend (the real runtime with a stand-in worker) on the suite's database, listening. */
const startFixture = (env: Readonly<Record<string, string>>) =>
  startBackend({ READY_CHECK_TIMEOUT_MS: "30000", SHUTDOWN_DRAIN_MS: "30000", ...env }, backendWithWorker)

/** One `GET /ready` in flight on a connection of its own, held by the migrations lock until `lock.release`. */
const holdReadyInFlight = (port: number) =>
  Effect.gen(function* () {
    const lock = yield* holdMigrationsLock
    const inFlight = yield* Effect.fork(rawExchange(port, readyRequest, 60_000))
    yield* awaitBackendBlockedOnLock
    return { lock, inFlight }
  })

const inOrder = (output: string, lines: ReadonlyArray<string>) => {
  const positions = lines.map((line) => output.indexOf(line))
  expect(positions.filter((position) => position < 0).map((_, i) => lines[i])).toEqual([])
  expect([...positions].sort((a, b) => a - b)).toEqual(positions)
}

layer(TestDatabaseLive, { excludeTestServices: true })("graceful shutdown", (it) => {
  it.scoped("Startup runs migrations and health check before the workers start; Shutdown stops HTTP acceptance, lets the in-flight request finish (its answer says Connection: close), answers a request arriving on an open connection with 503 + Connection: close + Retry-After, interrupts workers, joins their completion, and disposes the database pool (exit 0)", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const { backend, port } = yield* startFixture({})
      yield* backend.waitForOutput(/stand-in worker waiting/)
      const before = yield* get(port, "/ready")
      expect(JSON.parse(before.body)).toMatchObject({ status: "ready", checks: { workers: { running: ["stand-in"] } } })

      const { inFlight, lock } = yield* holdReadyInFlight(port)
      const late = yield* partialRequest(port, "GET /health HTTP/1.1\r\nHo", "st: 127.0.0.1\r\n\r\n")

      yield* backend.signal("SIGTERM")
      yield* backend.waitForOutput(/shutdown: HTTP stopped accepting; draining 1 in-flight/)
      // New connections are refused while the in-flight request is still running.
      expect(yield* probePort(port)).toBe("refused")
      expect(yield* backend.hasExited).toBe(false)
      expect(yield* backend.output).not.toContain("interrupting worker")
      // A request that arrives on a connection that is still open is answered, not reset.
      shuttingDown(yield* late.finish)

      yield* lock.release
      const answered = yield* Fiber.join(inFlight)
      expect([answered.status, answered.headers.connection]).toEqual([200, "close"])
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
      const { backend, port } = yield* startFixture({ SHUTDOWN_DRAIN_MS: "300" })
      const { inFlight, lock } = yield* holdReadyInFlight(port)

      yield* backend.signal("SIGTERM")
      yield* backend.waitForOutput(/shutdown: drain bound reached, interrupting 1 request/)
      expect(yield* backend.exitCode()).toBe(0)
      yield* lock.release
      // The interrupted request is answered, and not with a success.
      shuttingDown(yield* Fiber.join(inFlight))
      inOrder(yield* backend.output, [
        "shutdown: drain bound reached",
        "shutdown: worker stand-in interrupted and joined",
        "shutdown: database pool disposed"
      ])
    }))
})

layer(TestDatabaseLive, { excludeTestServices: true })("shutdown under load", (it) => {
  it.scoped("SIGTERM under load: no request the server read is answered by a reset, every answer is a normal response, and every answer written after SIGTERM carries Connection: close", () =>
    Effect.gen(function* () {
      const { backend, port } = yield* startFixture({ LOG_LEVEL: "debug" })
      // One request stays in flight, so the drain lasts while the clients keep sending.
      const { inFlight, lock } = yield* holdReadyInFlight(port)

      const until = Date.now() + 30_000
      const clients = yield* Effect.fork(
        Effect.all(Array.from({ length: 6 }, () => keepAliveClient(port, "/health", until)), { concurrency: "unbounded" })
      )
      // Under way: a few hundred answers before the signal.
      yield* backend.output.pipe(
        Effect.filterOrFail((output) => (output.match(/request answered/g)?.length ?? 0) >= 300),
        Effect.retry(Schedule.spaced("50 millis")),
        Effect.timeout("30 seconds")
      )
      yield* backend.signal("SIGTERM")
      const outcomes: ReadonlyArray<LoadOutcome> = (yield* Fiber.join(clients)).flat()
      yield* lock.release
      expect((yield* Fiber.join(inFlight)).headers.connection).toBe("close")
      expect(yield* backend.exitCode()).toBe(0)

      const output = yield* backend.output
      expect(output).toContain("shutdown: HTTP stopped accepting")
      const served = logEntries(output)
        .filter((entry) => entry.includes("request answered") && annotation(entry, "path") === "/health")
        .map((entry) => ({ id: annotation(entry, "correlationId")!, draining: annotation(entry, "draining") === "true" }))
      const answers = outcomes.filter((outcome) => outcome._tag === "Answer")
      // Every request the server read reached its client as a whole answer: none was lost to a reset.
      expect(new Set(answers.map((answer) => answer.correlationId))).toEqual(new Set(served.map((s) => s.id)))
      expect(answers.length).toBe(served.length)
      for (const answer of answers) {
        if (answer.status === 503) {
          expect([answer.connection, answer.retryAfter, JSON.parse(answer.body).reason]).toEqual(["close", "1", "shutting-down"])
        } else expect(answer.status).toBe(200)
      }
      const drained = new Set(served.filter((s) => s.draining).map((s) => s.id))
      for (const answer of answers.filter((a) => drained.has(a.correlationId!))) expect(answer.connection).toBe("close")
      // What broke was a connection the server closed before reading anything on it.
      const broken = outcomes.filter((outcome) => outcome._tag === "Broken")
      expect(broken.every((b) => ["closed", "ECONNRESET", "EPIPE"].includes(b.code))).toBe(true)
    }))
})

layer(TestDatabaseLive, { excludeTestServices: true })("shutdown with a database failure", (it) => {
  it.scoped("A database failure during this cleanup produces a nonzero exit", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const sql = yield* SqlClient.SqlClient
      const port = yield* freePort
      const backend = yield* spawnBun(backendWithWorker, { DATABASE_URL: db.url, PORT: String(port), PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" })
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
