import { defineConfig } from "vitest/config"
import base from "../vitest.config.ts"

/**
 * The vitest configuration of mutation runs (`bun run mutate`, through Stryker's vitest runner); `bun run test`
 * never reads it. Stryker's runner adds its own setup file (coverage per test, the active mutant) and runs one
 * worker per vitest instance. `bun run mutate` passes the test paths of the package in `MUTATE_TESTS`.
 */
const tests = (process.env.MUTATE_TESTS ?? "").split(",").map((path) => path.trim()).filter((path) => path !== "")

export default defineConfig({
  ...base,
  // This file sits in scripts/; paths in the shared configuration (globalSetup, include) are from the root.
  root: new URL("../", import.meta.url).pathname,
  test: {
    ...base.test,
    // A file stands for itself, a folder for the test files under it.
    ...(tests.length === 0 ? {} : { include: tests.map((path) => path.endsWith(".ts") ? path : `${path.replace(/\/$/, "")}/**/*.test.ts`) }),
    // The initial run gives each test file a process of its own (coverage per file). Mutant runs share one
    // process among the run's files when the control run allowed it (`MUTATE_ISOLATE=0`, set by
    // scripts/mutate-vitest-runner.ts); vitest starts a fresh process for every run either way, so a static
    // mutant (in code that runs while modules load) loads afresh, active.
    pool: "forks",
    isolate: process.env.MUTATE_ISOLATE !== "0",
    // vitest's runner, which also records what a suite's hooks reach (see the file).
    runner: new URL("./mutate-vitest-suites.ts", import.meta.url).pathname
  }
})
