/**
 * Preloaded (`bun --preload`) into the `bun` processes that tests spawn during the initial run of a mutation run
 * (`bun run mutate`, Stryker's vitest runner), and only then: see `spawnBun` in BunProcess.ts.
 *
 * Stryker decides which tests run against a mutant from the coverage each test produced in the initial run. Code
 * that runs only inside a spawned process records its coverage in that process, where Stryker never looks: this
 * file writes it to `$MUTATE_CHILD_COVERAGE.<pid>.json` every 200 ms and at exit, and the test that spawned the
 * process adds it to its own coverage. A process killed with SIGKILL loses at most its last 200 ms.
 */
import { writeFileSync } from "node:fs"

const target = process.env.MUTATE_CHILD_COVERAGE
if (target !== undefined && target !== "") {
  const file = `${target}.${process.pid}.json`
  const write = () => {
    const coverage = (globalThis as { __stryker__?: { mutantCoverage?: unknown } }).__stryker__?.mutantCoverage
    if (coverage === undefined) return
    try {
      writeFileSync(file, JSON.stringify(coverage))
    } catch {
      // The run's folder is gone: the run is over.
    }
  }
  setInterval(write, 200).unref()
  process.on("exit", write)
}
