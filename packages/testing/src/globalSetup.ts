import { Context, Effect, Exit, Layer, Scope } from "effect"
import type { TestProject } from "vitest/node"
import { PgCluster, PgClusterLive } from "./PgCluster.ts"

/** One PostgreSQL cluster for the whole run; every suite creates its own database on it. */
export default async function setup(project: TestProject) {
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(Layer.buildWithScope(PgClusterLive, scope))
  project.provide("pgAdminUrl", Context.get(context, PgCluster).url)
  return async () => {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}
