/**
 * `@stryker-mutator/vitest-runner` as a Stryker plugin under Bun (`bun run mutate`), adapted to this repository.
 *
 * Making it load and run:
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
 * Making it fast and exact:
 * 4. Suites' coverage. scripts/mutate-vitest-suites.ts records what a suite's hooks reach; here it is handed to
 *    every test of that suite (`attributeSuiteCoverage`), so such mutants run those tests instead of all.
 * 5. Static mutants (reached while modules load): Stryker runs them against every test, with the modules loaded
 *    afresh. The initial run gives every test file a process of its own, so it shows which files' processes
 *    reached the mutant at all; a static mutant runs only those files' tests (still loaded afresh, with the
 *    mutant active). The per-file coverage is kept in the sandbox (`.mutate-file-coverage.json`), where the
 *    workers that test mutants find it.
 * 6. One process per mutant run. After the initial run (isolated: its per-file coverage needs it), a control run
 *    runs every test file in one shared process. If it passes, mutant runs do the same (`MUTATE_ISOLATE=0`, read
 *    by scripts/mutate-vitest.config.ts): one process start and one module load per mutant instead of one per
 *    test file. vitest still starts a fresh process for each run, so a static mutant still loads afresh. If the
 *    control run fails (files that disturb each other in one process), mutant runs stay isolated; either way
 *    `bun run mutate` prints which (through the file named by `MUTATE_NOTES`).
 * 7. A test file that fails as a whole with the mutant (its top level threw while loading, or an error escaped
 *    every test) counts as a kill, as it fails `vitest run`; the runner would report a "runtime error".
 */
import { commonTokens, type Injector, PluginKind, tokens } from "@stryker-mutator/api/plugin"
import type { DryRunOptions, DryRunResult, MutantRunOptions, MutantRunResult, TestRunner } from "@stryker-mutator/api/test-runner"
import { appendFileSync, existsSync, readFileSync, writeFileSync } from "node:fs"
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
const wrapper: { createVitest: CreateVitest; version: string } =
  (await import(new URL("./vitest-wrapper.js", pathToFileURL(runnerEntry)).href)).vitestWrapper

/** The parts of vitest's node API used here. */
interface VitestFile {
  readonly filepath: string
  readonly result?: { readonly state?: string }
  readonly meta: { readonly mutantCoverage?: MutantCoverage }
}
interface Vitest {
  readonly state: { getFiles(): ReadonlyArray<VitestFile>; readonly errorsSet: ReadonlySet<unknown> }
  start(files?: ReadonlyArray<string>): Promise<unknown>
  close(): Promise<void>
}
type CreateVitest = (mode: "test", options: Record<string, unknown>) => Promise<Vitest>
interface MutantCoverage {
  readonly static?: Record<string, number>
  readonly perTest?: Record<string, Record<string, number>>
}
/** The runner's own fields that are read here. */
interface VitestRunnerInternals {
  readonly ctx?: Vitest
  readonly options: { readonly vitest: { readonly configFile?: string } }
}

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

// ---------------------------------------------------------------------------------------------------------------
// What the initial run leaves for the workers that test mutants.

/** Per test file of the initial run: the test ids it holds and the mutants its process reached. */
interface FileCoverage {
  readonly tests: ReadonlyArray<string>
  readonly mutants: ReadonlyArray<string>
}
interface InitialRun {
  readonly files: Record<string, FileCoverage>
  /** The control run passed with every test file in one process. */
  readonly sharedProcess: boolean
}
/** In the sandbox, where every worker of the run finds it. */
const initialRunPath = () => join(process.cwd(), ".mutate-initial-run.json")

let initialRun: InitialRun | undefined
const readInitialRun = (): InitialRun | undefined => {
  if (initialRun === undefined && existsSync(initialRunPath())) {
    initialRun = JSON.parse(readFileSync(initialRunPath(), "utf8")) as InitialRun
  }
  return initialRun
}

/** Marks the coverage of a suite's hooks (scripts/mutate-vitest-suites.ts writes it): `<file>#<suite name><mark>`. */
const SUITE_MARK = "\u0000suite"

/**
 * Hands each suite's coverage (its hooks, and its background fibers between tests) to every test of the suite.
 * What matches no test stays static. Test ids are `<file>#<suite chain and test name joined by " ">`; a suite's
 * key is its tests' common prefix.
 */
const attributeSuiteCoverage = (result: CompleteDryRun) => {
  if (result.mutantCoverage === undefined) return
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

type CompleteDryRun = Extract<DryRunResult, { readonly tests: unknown }>
const isComplete = (result: DryRunResult): result is CompleteDryRun => (result.status as string) === "complete"

const coverageByFile = (ctx: Vitest, result: CompleteDryRun): Record<string, FileCoverage> => {
  const byFile = new Map<string, { tests: Array<string>; mutants: Set<string> }>()
  const entry = (file: string) => {
    let found = byFile.get(file)
    if (found === undefined) byFile.set(file, found = { tests: [], mutants: new Set() })
    return found
  }
  for (const test of result.tests) if (test.fileName !== undefined) entry(test.fileName).tests.push(test.id)
  for (const file of ctx.state.getFiles()) {
    const coverage = file.meta.mutantCoverage
    if (coverage === undefined) continue
    const mutants = entry(file.filepath).mutants
    for (const id of Object.keys(coverage.static ?? {})) mutants.add(id)
    for (const hits of Object.values(coverage.perTest ?? {})) for (const id of Object.keys(hits)) mutants.add(id)
  }
  const files: Record<string, FileCoverage> = {}
  for (const [file, { tests, mutants }] of byFile) files[file] = { tests, mutants: [...mutants] }
  return files
}

/** Every test file once, all in one process, no mutant active: does the suite pass that way? */
const controlRun = async (configFile: string | undefined): Promise<boolean> => {
  const ctx = await wrapper.createVitest("test", {
    ...(configFile === undefined ? {} : { config: configFile }),
    pool: "forks",
    poolOptions: { forks: { maxForks: 1, minForks: 1 } },
    isolate: false,
    coverage: { enabled: false },
    watch: false,
    bail: 1
  })
  try {
    await ctx.start()
    const files = ctx.state.getFiles()
    return files.length > 0 && files.every((file) => file.result?.state === "pass") && ctx.state.errorsSet.size === 0
  } catch {
    return false
  } finally {
    await ctx.close()
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Mutant runs.

let testsByMutant: ReadonlyMap<string, ReadonlyArray<string>> | undefined
const testsReaching = (mutantId: string): ReadonlyArray<string> | undefined => {
  if (testsByMutant === undefined) {
    const collected = new Map<string, Array<string>>()
    for (const { tests, mutants } of Object.values(readInitialRun()?.files ?? {})) {
      for (const id of mutants) {
        let list = collected.get(id)
        if (list === undefined) collected.set(id, list = [])
        list.push(...tests)
      }
    }
    testsByMutant = collected
  }
  return testsByMutant.get(mutantId)
}

const OUTSIDE_TESTS = "An error occurred outside of a test run: "

const failedFileIsKill = (result: MutantRunResult): MutantRunResult => {
  if ((result.status as string) !== "error" || !("errorMessage" in result) || !result.errorMessage.startsWith(OUTSIDE_TESTS)) return result
  return {
    status: "killed" as MutantRunResult["status"],
    failureMessage: result.errorMessage.slice(OUTSIDE_TESTS.length),
    killedBy: [],
    nrOfTests: 0
  } as MutantRunResult
}

function createSandboxVitestRunner(injector: Injector): TestRunner {
  const testRunner = original!.factory(injector)
  const internals = testRunner as unknown as VitestRunnerInternals

  const init = testRunner.init?.bind(testRunner)
  testRunner.init = async () => {
    await useSandboxVitest()
    // A worker started after the initial run tests mutants: one shared process per run if the control run passed.
    process.env.MUTATE_ISOLATE = readInitialRun()?.sharedProcess === true ? "0" : "1"
    await init?.()
  }

  const dryRun = testRunner.dryRun.bind(testRunner)
  testRunner.dryRun = async (options: DryRunOptions) => {
    const result = await dryRun(options)
    if (!isComplete(result) || internals.ctx === undefined) return result
    attributeSuiteCoverage(result)
    const files = coverageByFile(internals.ctx, result)
    const sharedProcess = await controlRun(internals.options.vitest.configFile)
    const notes = process.env.MUTATE_NOTES
    if (notes !== undefined && notes !== "") {
      appendFileSync(notes, sharedProcess
        ? "control run: every test file passed in one shared process; mutant runs use one process each\n"
        : "control run FAILED with every test file in one process: mutant runs start one process per test file (slower); look for test files that disturb each other\n")
    }
    writeFileSync(initialRunPath(), JSON.stringify({ files, sharedProcess } satisfies InitialRun))
    return result
  }

  const mutantRun = testRunner.mutantRun.bind(testRunner)
  testRunner.mutantRun = async (options: MutantRunOptions) => {
    // Stryker's plan for a static mutant: every test (no filter), modules loaded with the mutant active.
    if (options.testFilter === undefined) {
      const tests = testsReaching(options.activeMutant.id)
      if (tests !== undefined && tests.length > 0) return failedFileIsKill(await mutantRun({ ...options, testFilter: [...tests] }))
    }
    return failedFileIsKill(await mutantRun(options))
  }
  return testRunner
}
createSandboxVitestRunner.inject = tokens(commonTokens.injector)

export const strykerPlugins = [{ kind: PluginKind.TestRunner, name: "vitest", factory: createSandboxVitestRunner }]
export const strykerValidationSchema = runner.strykerValidationSchema
