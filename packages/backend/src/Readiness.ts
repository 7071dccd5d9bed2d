import { FileSystem, Path } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { verifyMigrations } from "@delivery/core"
import { Duration, Effect } from "effect"
import { AppConfig } from "./Config.ts"
import { NotReady, Ready, type ReadyChecks } from "./HealthApi.ts"
import { WorkerRegistry } from "@delivery/core"

type Check = ReadyChecks["database"]

const ok: Check = { ok: true }
const failed = (reason: string): Check => ({ ok: false, reason })

/** What `GET /ready` answers: database reachable, migrations applied, the role's workers running. */
export class Readiness extends Effect.Service<Readiness>()("@delivery/backend/Readiness", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const registry = yield* WorkerRegistry
    const fs = yield* FileSystem.FileSystem
    const path = yield* Path.Path
    const bound = Duration.millis(config.readyCheckTimeoutMs)

    // Driver messages can carry host names or worse; readiness reports stable codes only.
    const database = sql`SELECT 1`.pipe(
      Effect.timeout(bound),
      Effect.as(ok),
      Effect.catchTags({
        TimeoutException: () => Effect.succeed(failed("database-timeout")),
        SqlError: () => Effect.succeed(failed("database-unreachable"))
      })
    )

    const migrations = verifyMigrations().pipe(
      Effect.provideService(FileSystem.FileSystem, fs),
      Effect.provideService(Path.Path, path),
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.timeout(bound),
      Effect.as(ok),
      Effect.catchTags({
        TimeoutException: () => Effect.succeed(failed("migrations-check-timeout")),
        SqlError: () => Effect.succeed(failed("database-unreachable")),
        // Its message lists the pending migration files by name.
        MigrationError: (error) => Effect.succeed(failed(error.message))
      })
    )

    const workers = Effect.map(registry.snapshot, (states) => {
      const running = states.filter((state) => state.status === "running").map((state) => state.name)
      const notRunning = states.filter((state) => state.status !== "running")
      return { ok: notRunning.length === 0, enabled: config.role === "backend", running, notRunning }
    })

    const check: Effect.Effect<Ready, NotReady> = Effect.all({ database, migrations, workers }, {
      concurrency: "unbounded"
    }).pipe(
      Effect.flatMap((checks) => {
        const failedChecks = (["database", "migrations", "workers"] as const).filter((name) => !checks[name].ok)
        return failedChecks.length === 0
          ? Effect.succeed(new Ready({ status: "ready", role: config.role, checks }))
          : Effect.fail(new NotReady({ status: "not-ready", role: config.role, failed: failedChecks, checks }))
      }),
      Effect.withSpan("Readiness.check")
    )

    return { check } as const
  })
}) {}
