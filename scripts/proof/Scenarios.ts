import { brokerEvents } from "./BrokerEvents.ts"
import { databaseOutage, leaseTakeover, rootFailure } from "./Faults.ts"
import { primary } from "./Primary.ts"
import type { Scenario } from "./Scenario.ts"
import { startStop } from "./StartStop.ts"

/** Every scenario of `bun run proof`, in the order they run. */
export const SCENARIOS: ReadonlyArray<Scenario> = [startStop, primary, leaseTakeover, rootFailure, databaseOutage, brokerEvents]
