/**
 * `bun run mutate <package> [options]`: mutation testing of one package with StrykerJS. By default through Stryker's
 * vitest runner (scripts/mutate-vitest-runner.ts), each mutant against the tests that reached it; `--runner command`
 * runs the package's whole test command per mutant instead. Minutes to an hour per package; not part of CI.
 *
 *   --files <glob,...>     mutate these instead of the package's modules (`file:12-40` narrows to lines)
 *   --tests <path,...>     test paths for vitest instead of `packages/<package>`
 *   --concurrency <n>      test runners at a time (default 1)
 *   --runner <vitest|command>
 *   --count                instrument only: count the mutants per file, run no test (seconds)
 *   --dry-run              only the initial run inside the sandbox
 *   --incremental          reuse results of the previous run for mutants whose code and tests did not change
 *   --report               print the summary of the last run again, run nothing
 *   --keep                 keep the sandbox (`.stryker-tmp/run-<pid>`) to look into a failing initial run
 *
 * How it works (docs/testing.md): Stryker copies the repository into `.stryker-tmp/run-<pid>/sandbox-*`, instruments
 * the modules there with every mutant behind a switch, and installs the workspace into the sandbox (`bun install
 * --frozen-lockfile`, so `@delivery/*` imports resolve to the sandbox's mutated copies, not to this checkout). Tests
 * run with `__STRYKER_ACTIVE_MUTANT__` set; `spawnBun` passes it on to real `bun` processes. One throwaway
 * PostgreSQL cluster serves every run (`DATABASE_URL`). Reports go to `reports/mutation/<package>/`.
 */
import { startCluster } from "@delivery/testing"
import type { PartialStrykerOptions } from "@stryker-mutator/api/core"
import { Stryker } from "@stryker-mutator/core"
import { Effect, Exit, Scope } from "effect"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { PACKAGES } from "./mutate-packages.ts"
import { type Report, summarize } from "./mutate-report.ts"

const root = new URL("../", import.meta.url).pathname
process.chdir(root)

const usage = `usage: bun run mutate <${Object.keys(PACKAGES).join("|")}> [--files g1,g2] [--tests p1,p2] [--concurrency n] [--count | --dry-run | --report] [--incremental] [--keep]`

const { values: flags, positionals } = parseArgs({
  args: process.argv.slice(2),
  allowPositionals: true,
  options: {
    files: { type: "string" },
    tests: { type: "string" },
    concurrency: { type: "string", default: "1" },
    runner: { type: "string", default: "vitest" },
    count: { type: "boolean", default: false },
    "dry-run": { type: "boolean", default: false },
    incremental: { type: "boolean", default: false },
    keep: { type: "boolean", default: false },
    trace: { type: "boolean", default: false },
    report: { type: "boolean", default: false }
  }
})

const name = positionals[0]
const pkg = name === undefined ? undefined : PACKAGES[name]
if (name === undefined || pkg === undefined || positionals.length > 1) {
  console.error(usage)
  process.exit(2)
}
const list = (value: string | undefined) => value?.split(",").map((s) => s.trim()).filter((s) => s !== "")
const mutate = list(flags.files) ?? [...pkg.mutate]
const tests = list(flags.tests) ?? [...pkg.tests]
const runner = flags.runner
if (runner !== "vitest" && runner !== "command") {
  console.error(`--runner must be vitest or command\n${usage}`)
  process.exit(2)
}
const concurrency = Number(flags.concurrency)
if (!Number.isInteger(concurrency) || concurrency < 1) {
  console.error(`--concurrency must be a positive integer\n${usage}`)
  process.exit(2)
}

const mode = flags.count ? "count" : flags["dry-run"] ? "dry-run" : flags.report ? "report" : "run"
// A count writes its own report, so it never replaces the last real run's.
const reportDir = join("reports", "mutation", mode === "count" ? `${name}-count` : name)
const jsonReport = join(reportDir, "mutation.json")

// ---------------------------------------------------------------------------------------------------------------
// The summary (scripts/mutate-report.ts), printed and kept as survivors.txt.

const printReport = (counting: boolean) => {
  if (!existsSync(jsonReport)) {
    console.error(`no report at ${jsonReport}: run \`bun run mutate ${name}\` first`)
    process.exit(1)
  }
  const text = summarize(JSON.parse(readFileSync(jsonReport, "utf8")) as Report, counting)
  console.log(`\n${text}\n`)
  if (!counting) {
    writeFileSync(join(reportDir, "survivors.txt"), `${text}\n`)
    console.log(`report: ${join(reportDir, "index.html")} (open in a browser), ${jsonReport}, ${join(reportDir, "survivors.txt")}`)
  }
}

if (mode === "report") {
  printReport(false)
  process.exit(0)
}

// ---------------------------------------------------------------------------------------------------------------
// The run.

const bun = process.execPath
const tempDir = join(".stryker-tmp", `run-${process.pid}`)
const command = mode === "count" ? "true" : `bunx --bun vitest run ${tests.join(" ")} --bail=1 --reporter=dot`

// The vitest runner reads the package's test files from this variable (scripts/mutate-vitest.config.ts) rather than from
// Stryker's `testFiles`: with `testFiles`, Stryker 10.1 activates static mutants only after the modules have loaded.
process.env.MUTATE_TESTS = tests.join(",")
// A folder of this run's own outside the sandbox: tests that spawn `bun` processes add the processes' coverage to
// their own through it (BunProcess.ts), and the test runner leaves notes for the summary there.
const runDir = mkdtempSync(join(tmpdir(), "mutate-run-"))
const notesFile = join(runDir, "notes.txt")
process.env.MUTATE_NOTES = notesFile
if (runner === "vitest" && mode !== "count") {
  process.env.MUTATE_CHILD_COVERAGE_DIR = join(runDir, "child-coverage")
  mkdirSync(process.env.MUTATE_CHILD_COVERAGE_DIR)
}
const printNotes = () => {
  if (existsSync(notesFile)) console.log(readFileSync(notesFile, "utf8").trimEnd())
}
const runnerOptions: PartialStrykerOptions =
  runner === "vitest" && mode !== "count"
    ? {
      testRunner: "vitest",
      vitest: { configFile: "scripts/mutate-vitest.config.ts", pool: "forks", related: false },
      coverageAnalysis: "perTest"
    }
    : { testRunner: "command", commandRunner: { command }, coverageAnalysis: "off" }

const options: PartialStrykerOptions = {
  ...runnerOptions,
  mutate,
  concurrency,
  // Instrumented code runs under Bun in the sandbox; a real install there makes every workspace import
  // (`@delivery/core` from outbox, the backend process's imports) resolve to the sandbox's mutated files.
  // Stryker's default, symlinking this checkout's node_modules, would resolve them to the unmutated checkout.
  symlinkNodeModules: false,
  ...(mode === "count" ? {} : { buildCommand: `${bun} install --frozen-lockfile --silent` }),
  dryRunOnly: mode === "dry-run",
  // `--trace`: Stryker's own log, test runs' output included, in stryker.log.
  ...(flags.trace ? { fileLogLevel: "trace" } as PartialStrykerOptions : {}),
  plugins: ["@stryker-mutator/*", join(root, "scripts/mutate-vitest-runner.ts"), join(root, "scripts/mutate-ignorers.ts")],
  ignorers: ["effect-logs", "effect-service-keys", "effect-span-names"],
  ignorePatterns: ["/.data", "/reports", "/.stryker-tmp", "*.log"],
  // One folder per run, so an interrupted run can remove its own sandbox without touching another run's.
  tempDirName: tempDir,
  cleanTempDir: flags.keep ? false : "always",
  // One test run takes tens of seconds and other test runs share the two cores: a generous margin keeps a
  // slow run from counting as a timeout (which would count as detected).
  timeoutFactor: 2,
  timeoutMS: 30_000,
  incremental: flags.incremental,
  incrementalFile: join(reportDir, "incremental.json"),
  reporters: mode === "run" || mode === "count" ? ["json", "html", process.stdout.isTTY ? "progress" : "progress-append-only"] : ["progress-append-only"],
  jsonReporter: { fileName: jsonReport },
  htmlReporter: { fileName: join(reportDir, "index.html") },
  thresholds: { high: 80, low: 60, break: null }
}

const scope = Effect.runSync(Scope.make())
const cleanUp = () => {
  // The cluster's finalizers are synchronous (pg_ctl stop, rm), so they also run from an exit handler.
  Effect.runSync(Scope.close(scope, Exit.void))
  // Stryker removes its sandbox when it finishes, not when interrupted: remove this run's folder either way.
  if (!flags.keep) rmSync(tempDir, { recursive: true, force: true })
  rmSync(runDir, { recursive: true, force: true })
  if (existsSync(".stryker-tmp") && readdirSync(".stryker-tmp").length === 0) rmdirSync(".stryker-tmp")
}
// On Ctrl-C Stryker kills its test runs, removes its sandbox and calls process.exit: stop the cluster then too.
process.on("exit", cleanUp)
// Before Stryker runs (and installs its own signal handlers), Ctrl-C exits at once through the same clean-up.
let strykerRunning = false
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
  process.on(signal, () => {
    if (!strykerRunning) process.exit(130)
  })
}
const started = Date.now()
let failed = false
try {
  if (mode !== "count" && (process.env.DATABASE_URL ?? "") === "") {
    const cluster = await Effect.runPromise(Scope.extend(startCluster(), scope))
    process.env.DATABASE_URL = cluster.url
    console.log(`mutate: one PostgreSQL cluster for every test run at 127.0.0.1:${cluster.port}`)
  }
  mkdirSync(reportDir, { recursive: true })
  const testsLine = runnerOptions.testRunner === "vitest"
    ? `vitest runner, coverage per test: ${tests.join(" ")} (scripts/mutate-vitest.config.ts)`
    : command
  console.log(`mutate ${name}: ${mutate.join(", ")}\n  tests: ${testsLine}\n  concurrency: ${concurrency}`)
  strykerRunning = true
  const results = await new Stryker(options).runMutationTest()
  const seconds = (Date.now() - started) / 1000
  const tested = results.filter((r) => r.status !== "Ignored").length
  printNotes()
  if (mode === "run") {
    printReport(false)
    console.log(
      `${tested} mutants tested in ${seconds.toFixed(0)} s (${tested === 0 ? "-" : (seconds / tested).toFixed(1)} s per mutant, sandbox and initial run included)`
    )
  } else if (mode === "count") {
    printReport(true)
  } else {
    console.log(`dry run done in ${seconds.toFixed(0)} s (sandbox, install and one test run); see "Initial test run" above for the time per mutant`)
  }
} catch (error) {
  failed = true
  console.error(error)
} finally {
  cleanUp()
}
process.exit(failed ? 1 : 0)
