import type { RunnerTask, RunnerTestSuite } from "vitest"
import { VitestTestRunner } from "vitest/runners"

/**
 * The vitest test runner of mutation runs (`test.runner` in scripts/mutate-vitest.config.ts): vitest's own, plus
 * coverage for code that runs in a suite's hooks.
 *
 * Stryker's setup file records the code each test reaches, between that test's `beforeEach` and `afterEach`.
 * Anything else counts as "static": a static mutant runs every test that loads its module, each time in a fresh
 * process. In this repository a great deal of code runs outside tests: `layer(...)` builds its services,
 * databases (with migrations) and background fibers in `beforeAll`, and those fibers keep running between tests.
 * This runner records such code against the suite that runs it; `bun run mutate` (scripts/mutate-vitest-runner.ts)
 * then counts it as covered by every test of that suite. Those tests are enough to notice the mutant: a suite's
 * hooks run only for its own tests, and Stryker activates a mutant before any suite hook runs (in a `beforeAll` of
 * the file). Only code that runs while modules load remains static.
 */

/** The key of a suite's own coverage: its file, `#`, its name as Stryker names tests (suite chain joined by " "). */
export const SUITE_MARK = "\u0000suite"

interface StrykerState {
  currentTestId?: string | undefined
}
const stryker = (): StrykerState | undefined => (globalThis as { __stryker__?: StrykerState }).__stryker__

const fullName = (task: RunnerTask): string => {
  const parts: Array<string> = []
  for (let current: RunnerTask | undefined = task; current !== undefined; current = current.suite) {
    // The file is a suite too, but Stryker leaves it out of test names.
    if (current.type === "suite" && current.file === current) break
    parts.unshift(current.name)
  }
  return parts.join(" ").trim()
}
const suiteKey = (suite: RunnerTestSuite): string => `${suite.file.filepath}#${fullName(suite)}${SUITE_MARK}`

export default class MutationRunner extends VitestTestRunner {
  override async onBeforeRunSuite(suite: RunnerTestSuite): Promise<void> {
    await super.onBeforeRunSuite(suite)
    const state = stryker()
    if (state !== undefined) state.currentTestId = suiteKey(suite)
  }

  override onAfterRunTask(test: RunnerTask): void {
    super.onAfterRunTask(test)
    // Between tests, background fibers of the suite's layers still run: theirs too.
    const state = stryker()
    if (state !== undefined && test.suite !== undefined) state.currentTestId = suiteKey(test.suite)
  }

  override async onAfterRunSuite(suite: RunnerTestSuite): Promise<void> {
    const state = stryker()
    if (state !== undefined) {
      const parent = suite.suite
      state.currentTestId = parent === undefined ? undefined : suiteKey(parent)
    }
    await super.onAfterRunSuite(suite)
  }
}
