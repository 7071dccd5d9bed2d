import { Effect, Layer } from "effect"
import { inject } from "vitest"
import { PgCluster } from "./PgCluster.ts"
import { EmptyDatabase, MigratedDatabase } from "./TestDatabase.ts"

declare module "vitest" {
  export interface ProvidedContext {
    pgAdminUrl: string
  }
}

/** The cluster that the global setup started for this test run (or `DATABASE_URL`). */
export const PgClusterFromVitest = Layer.effect(
  PgCluster,
  Effect.sync(() => {
    const url = inject("pgAdminUrl")
    return { url, port: Number(new URL(url).port || 5432), external: process.env.DATABASE_URL !== undefined }
  })
)

/** A migrated database of the suite's own, with `SqlClient`/`PgClient` and `TestDatabase`. */
export const TestDatabaseLive = MigratedDatabase.pipe(Layer.provide(PgClusterFromVitest))
/** An unmigrated database of the suite's own. */
export const EmptyTestDatabaseLive = EmptyDatabase.pipe(Layer.provide(PgClusterFromVitest))
