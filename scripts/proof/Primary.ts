import { Effect } from "effect"
import type { Scenario } from "./Scenario.ts"

// Spec 002's primary scenario: being built (scripts/proof/Primary.ts).
export const primary: Scenario = {
  name: "primary",
  run: (_world, evidence) => Effect.sync(() => (evidence.check("primary", "the primary scenario is built", false, "not built yet"), {}))
}
