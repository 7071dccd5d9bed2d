import type { Effect } from "effect"
import type { Evidence } from "./Evidence.ts"
import type { World } from "./World.ts"

/** One scenario of the proof: runs in a world of its own and records its checks in the evidence. */
export interface Scenario {
  readonly name: string
  readonly run: (world: World, evidence: Evidence) => Effect.Effect<ScenarioFigures, unknown>
}

export interface ScenarioFigures {
  /** From the successful restart to the last piece of work in its final state. */
  readonly recoverySeconds?: number
  /** Per family: requests under one idempotency key that may have reached the provider (2xx, held open or abandoned) beyond the first. */
  readonly duplicates?: Readonly<Record<string, number>>
}
