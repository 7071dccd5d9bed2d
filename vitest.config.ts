import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["packages/*/test/**/*.test.ts"],
    // Each suite starts real PostgreSQL clusters and real processes; two cores bound the useful parallelism.
    fileParallelism: true,
    maxWorkers: 2,
    minWorkers: 1,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    globalSetup: ["packages/testing/src/globalSetup.ts"]
  }
})
