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
    // A fresh process for each test file in each run: a static mutant (one in code that runs while modules
    // load) is only active if its module loads again with it.
    pool: "forks",
    isolate: true,
    // vitest's runner, which also records what a suite's hooks reach (see the file).
    runner: new URL("./mutate-vitest-suites.ts", import.meta.url).pathname
  }
})
