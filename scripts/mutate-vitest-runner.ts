/**
 * `@stryker-mutator/vitest-runner` as a Stryker plugin under Bun, with three fixes for this repository's layout.
 *
 * 1. Stryker finds `@stryker-mutator/*` plugins next to its own package; Bun's isolated install puts the runner
 *    elsewhere, so `bun run mutate` passes this file's absolute path in `plugins` instead.
 * 2. By the time Stryker loads plugins, `@babel/core` (its instrumenter) has replaced `Error.prepareStackTrace`.
 *    On Bun, `Error.captureStackTrace` on an object that is not a real Error (vite does this while loading, for
 *    follow-redirects' error types) then throws "First argument must be an Error object" and the plugin fails
 *    to load. The runner is imported with Bun's default stack formatting in place.
 * 3. The runner picks the vitest of the current directory when it is loaded, but Stryker's worker loads plugins
 *    before it moves into the sandbox: vitest would come from this checkout while the sandbox's test files import
 *    the sandbox's own install, and every file would end in "No test suite found". The runner is pointed at the
 *    sandbox's vitest when it starts instead.
 *
 * And one narrowing. Stryker runs a static mutant (one whose code runs outside any test: while modules load, in a
 * `beforeAll` or in a layer's start-up) against every test, with its modules loaded afresh. Since every test file
 * runs in a process of its own, a test file whose process never reached the mutant's code in the initial run
 * cannot notice it: such a mutant runs only the test files whose process reached it (by the per-file coverage
 * of the initial run, kept in the sandbox for the other workers), still loaded afresh with the mutant active.
 */
import { commonTokens, type Injector, PluginKind, tokens } from "@stryker-mutator/api/plugin"
import type { DryRunOptions, DryRunResult, MutantRunOptions, MutantRunResult, TestRunner } from "@stryker-mutator/api/test-runner"
import { existsSync, readFileSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { join } from "node:path"
import { pathToFileURL } from "node:url"

const withBunStackTraces = async <A>(load: () => Promise<A>): Promise<A> => {
  const error = Error as { prepareStackTrace?: unknown }
  const saved = error.prepareStackTrace
  error.prepareStackTrace = undefined
  try {
    return await load()
  } finally {
    error.prepareStackTrace = saved
  }
}

const runnerEntry = createRequire(import.meta.url).resolve("@stryker-mutator/vitest-runner")
const runner = await withBunStackTraces(() => import(pathToFileURL(runnerEntry).href))
// Not exported by the package: the mutable `{ createVitest, version }` the runner reads in `init()`.
const wrapper: { createVitest: unknown; version: string } =
  (await import(new URL("./vitest-wrapper.js", pathToFileURL(runnerEntry)).href)).vitestWrapper

/** Called in the sandbox (the worker's current directory by then): use the vitest installed there. */
const useSandboxVitest = async () => {
  const require = createRequire(join(process.cwd(), "package.json"))
  const vitestNode = await withBunStackTraces(() => import(pathToFileURL(require.resolve("vitest/node")).href))
  wrapper.createVitest = vitestNode.createVitest
  wrapper.version = require(require.resolve("vitest/package.json")).version
}

const original = (runner.strykerPlugins as ReadonlyArray<{ kind: PluginKind; name: string; factory: (injector: Injector) => TestRunner }>)
  .find((plugin) => plugin.kind === PluginKind.TestRunner && plugin.name === "vitest")
if (original === undefined) throw new Error("@stryker-mutator/vitest-runner no longer declares the \"vitest\" test runner")

/** Per test file of the initial run: the test ids it holds and the mutants its process reached. */
interface FileCoverage {
  readonly tests: ReadonlyArray<string>
  readonly mutants: ReadonlyArray<string>
}
/** In the sandbox, where every worker of the run finds it. */
const fileCoveragePath = () => join(process.cwd(), ".mutate-file-coverage.json")

interface MutantCoverage {
  readonly static?: Record<string, number>
  readonly perTest?: Record<string, Record<string, number>>
}
interface VitestFile {
  readonly filepath: string
  readonly meta: { readonly mutantCoverage?: MutantCoverage }
}
interface VitestRunnerInternals {
  readonly ctx?: { readonly state: { getFiles(): ReadonlyArray<VitestFile> } }
}

/** Marks the coverage of a suite's hooks (scripts/mutate-vitest-suites.ts writes it): `<file>#<suite name><mark>`. */
const SUITE_MARK = "\u0000suite"

/**
 * Hands each suite's coverage (its hooks, and its background fibers between tests) to every test of the suite,
 * so that a mutant reached there runs those tests instead of counting as static. What matches no test stays
 * static. Test ids are `<file>#<suite chain and test name joined by " ">`, the suite's key is its own prefix.
 */
const attributeSuiteCoverage = (result: DryRunResult) => {
  if (result.status !== "complete" || result.mutantCoverage === undefined) return
  const { perTest } = result.mutantCoverage
  const tests = result.tests.map((test) => test.id)
  for (const [key, hits] of Object.entries(perTest)) {
    if (!key.endsWith(SUITE_MARK)) continue
    delete perTest[key]
    const suite = key.slice(0, -SUITE_MARK.length)
    const members = tests.filter((id) => id === suite || id.startsWith(suite.endsWith("#") ? suite : `${suite} `))
    const targets = members.length === 0 ? [result.mutantCoverage.static] : members.map((id) => perTest[id] ??= {})
    for (const target of targets) for (const [id, count] of Object.entries(hits)) target[id] = (target[id] ?? 0) + count
  }
}

const recordFileCoverage = (testRunner: VitestRunnerInternals, result: DryRunResult) => {
  if (result.status !== "complete" || testRunner.ctx === undefined) return
  const byFile = new Map<string, { tests: Array<string>; mutants: Set<string> }>()
  const entry = (file: string) => {
    let found = byFile.get(file)
    if (found === undefined) byFile.set(file, found = { tests: [], mutants: new Set() })
    return found
  }
  for (const test of result.tests) if (test.fileName !== undefined) entry(test.fileName).tests.push(test.id)
  for (const file of testRunner.ctx.state.getFiles()) {
    const coverage = file.meta.mutantCoverage
    if (coverage === undefined) continue
    const mutants = entry(file.filepath).mutants
    for (const id of Object.keys(coverage.static ?? {})) mutants.add(id)
    for (const hits of Object.values(coverage.perTest ?? {})) for (const id of Object.keys(hits)) mutants.add(id)
  }
  const files: Record<string, FileCoverage> = {}
  for (const [file, { tests, mutants }] of byFile) files[file] = { tests, mutants: [...mutants] }
  writeFileSync(fileCoveragePath(), JSON.stringify(files))
}

interface CoverageIndex {
  readonly testsByMutant: ReadonlyMap<string, ReadonlyArray<string>>
  readonly testsByFile: ReadonlyMap<string, ReadonlyArray<string>>
}
let index: CoverageIndex | undefined
const coverageIndex = (): CoverageIndex => {
  if (index !== undefined) return index
  const files: Record<string, FileCoverage> = existsSync(fileCoveragePath())
    ? JSON.parse(readFileSync(fileCoveragePath(), "utf8"))
    : {}
  const testsByMutant = new Map<string, Array<string>>()
  for (const { tests, mutants } of Object.values(files)) {
    for (const id of mutants) {
      let list = testsByMutant.get(id)
      if (list === undefined) testsByMutant.set(id, list = [])
      list.push(...tests)
    }
  }
  const testsByFile = new Map(Object.entries(files).map(([file, { tests }]) => [file, tests]))
  return index = { testsByMutant, testsByFile }
}

const OUTSIDE_TESTS = "An error occurred outside of a test run: "

/**
 * The runner reports a test file that failed as a whole (its top level threw while loading, or an error escaped
 * every test) as an error of the run, which Stryker would count as a "runtime error" outside the score. The initial
 * run had no such error, so it is the mutant's doing: `vitest run` fails with it, as it does on a failed test.
 */
const failedFileIsKill = (result: MutantRunResult): MutantRunResult => {
  if (result.status !== "error" || !result.errorMessage.startsWith(OUTSIDE_TESTS)) return result
  const detail = result.errorMessage.slice(OUTSIDE_TESTS.length)
  return {
    status: "killed" as MutantRunResult["status"],
    failureMessage: detail,
    killedBy: [],
    nrOfTests: 0
  } as MutantRunResult
}

function createSandboxVitestRunner(injector: Injector): TestRunner {
  const testRunner = original!.factory(injector)
  const init = testRunner.init?.bind(testRunner)
  testRunner.init = async () => {
    await useSandboxVitest()
    await init?.()
  }
  const dryRun = testRunner.dryRun.bind(testRunner)
  testRunner.dryRun = async (options: DryRunOptions) => {
    const result = await dryRun(options)
    attributeSuiteCoverage(result)
    recordFileCoverage(testRunner as VitestRunnerInternals, result)
    return result
  }
  const mutantRun = testRunner.mutantRun.bind(testRunner)
  testRunner.mutantRun = async (options: MutantRunOptions) => {
    // Stryker's plan for a static mutant: every test (no filter), modules loaded with the mutant active.
    if (options.testFilter === undefined) {
      const tests = coverageIndex().testsByMutant.get(options.activeMutant.id)
      if (tests !== undefined && tests.length > 0) return failedFileIsKill(await mutantRun({ ...options, testFilter: [...tests] }))
    }
    return failedFileIsKill(await mutantRun(options))
  }
  return testRunner
}
createSandboxVitestRunner.inject = tokens(commonTokens.injector)

export const strykerPlugins = [{ kind: PluginKind.TestRunner, name: "vitest", factory: createSandboxVitestRunner }]
export const strykerValidationSchema = runner.strykerValidationSchema
