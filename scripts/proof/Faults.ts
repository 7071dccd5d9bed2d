import { Effect } from "effect"
import type { Scenario } from "./Scenario.ts"

// Spec 002's fault scenarios: being built (scripts/proof/Faults.ts).
const notBuilt = (name: string): Scenario => ({
  name,
  run: (_world, evidence) => Effect.sync(() => (evidence.check(name, "the scenario is built", false, "not built yet"), {}))
})

export const leaseTakeover = notBuilt("lease-takeover")
export const rootFailure = notBuilt("root-failure")
export const databaseOutage = notBuilt("database-outage")
