import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect } from "effect"
import { backendMain, freePort, get, spawnBun, waitForPort } from "@delivery/testing"
import { fixturePath } from "./support/Fixtures.ts"

layer(TestDatabaseLive, { excludeTestServices: true })("backend process", (it) => {
  it.scoped("Startup runs the existing database migration path and health check, then serves /health, /ready (with its role), /openapi.json and /docs", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const port = yield* freePort
      // The test cluster trusts local connections, so the password is never checked: it only has to stay unlogged.
      const url = new URL(db.url)
      url.password = "never-logged-5ecret"
      const backend = yield* spawnBun(backendMain, { DATABASE_URL: url.toString(), PORT: String(port), PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" })
      yield* backend.waitForOutput(/listening on http:\/\/127\.0\.0\.1:\d+ \(role backend\)/)
      yield* waitForPort(port)

      const health = yield* get(port, "/health")
      expect(health.status).toBe(200)
      expect(JSON.parse(health.body)).toEqual({ status: "alive" })

      const ready = yield* get(port, "/ready")
      expect(ready.status).toBe(200)
      expect(JSON.parse(ready.body)).toMatchObject({
        status: "ready",
        role: "backend",
        checks: { database: { ok: true }, migrations: { ok: true }, workers: { ok: true, enabled: true } }
      })

      const openapi = yield* get(port, "/openapi.json")
      expect(openapi.status).toBe(200)
      const document = JSON.parse(openapi.body)
      expect(Object.keys(document.paths)).toEqual(expect.arrayContaining(["/health", "/ready", "/api/whoami"]))
      expect(document.paths["/ready"].get.responses).toHaveProperty("503")

      // The composed API authenticates the tenant routes: no credential, no identity.
      const anonymous = yield* get(port, "/api/whoami")
      expect(anonymous.status).toBe(401)

      const docs = yield* get(port, "/docs")
      expect(docs.status).toBe(200)
      expect(docs.contentType).toContain("text/html")

      // The start-up order is observable in the log; the URL (a secret) never is.
      const output = yield* backend.output
      const order = ["starting delivery backend", "migrations applied", "database health check passed", "listening on"]
      const positions = order.map((line) => output.indexOf(line))
      expect(positions.every((position) => position >= 0)).toBe(true)
      expect([...positions].sort((a, b) => a - b)).toEqual(positions)
      expect(output).not.toContain("never-logged-5ecret")

      // /ready answers 503 naming the failed check once a migration file is no longer recorded as applied.
      const sql = yield* SqlClient.SqlClient
      const renamed = yield* sql`UPDATE effect_sql_migrations SET name = name || '_renamed' RETURNING migration_id`
      expect(renamed.length).toBeGreaterThan(0)
      const notReady = yield* get(port, "/ready")
      expect(notReady.status).toBe(503)
      expect(JSON.parse(notReady.body)).toMatchObject({
        _tag: "NotReady",
        status: "not-ready",
        role: "backend",
        failed: ["migrations"],
        checks: { database: { ok: true }, migrations: { ok: false, reason: expect.stringMatching(/^migrations not applied: /) } }
      })

      // SIGINT is the other stop signal.
      yield* backend.signal("SIGINT")
      expect(yield* backend.exitCode()).toBe(0)
    }))
})

layer(TestDatabaseLive, { excludeTestServices: true })("ingress role", (it) => {
  it.scoped("The internal ingress never starts these workers: ROLE=ingress builds no worker, and /ready says so", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const sql = yield* SqlClient.SqlClient
      const port = yield* freePort
      // The fixture's worker list holds a worker: the role alone must keep it from starting.
      const ingress = yield* spawnBun(fixturePath("backend-with-worker.ts"), {
        DATABASE_URL: db.url,
        PORT: String(port),
        ROLE: "ingress",
        PASSWORD_RESET_DELIVERY: "disabled",
        RECEIPT_DELIVERY: "disabled"
      })
      yield* ingress.waitForOutput(/listening on .* \(role ingress\)/)

      const ready = yield* get(port, "/ready")
      expect(ready.status).toBe(200)
      expect(JSON.parse(ready.body)).toMatchObject({
        status: "ready",
        role: "ingress",
        checks: { workers: { ok: true, enabled: false, running: [], notRunning: [] } }
      })

      yield* ingress.signal("SIGTERM")
      expect(yield* ingress.exitCode()).toBe(0)
      const output = yield* ingress.output
      expect(output).toContain("role ingress: delivery workers are not started")
      expect(output).not.toMatch(/worker stand-in|stand-in worker/)
      // The worker creates its table when it starts: it never did.
      const [row] = yield* sql<{ readonly table: string | null }>`SELECT to_regclass('backend_stand_in_stops')::text AS table`
      expect(row!.table).toBeNull()
    }))
})
