import { Effect, Random } from "effect"

/**
 * The seed of this run's random choices: `TEST_SEED` replays a run, otherwise a fresh one is drawn. A failing
 * test prints it (fast-check prints its own `seed`, which is this one), so any failure can be run again.
 */
export const testSeed: number = process.env.TEST_SEED === undefined
  ? Math.floor(Math.random() * 2 ** 31)
  : Number(process.env.TEST_SEED)

/** Runs `effect` with Effect's `Random` seeded by `testSeed`, and names the seed if it fails. */
export const seeded = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  effect.pipe(
    Effect.withRandom(Random.make(testSeed)),
    // The console, not Effect's logger: @effect/vitest removes the logger inside tests.
    Effect.tapErrorCause(() => Effect.sync(() => console.error(`TEST_SEED=${testSeed} replays this run`)))
  )
