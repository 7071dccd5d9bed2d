import { Effect } from "effect"
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { join } from "node:path"

// Tenant stacks that a cloud process started through its local compute provider live in process groups of their own
// and outlive the cloud on purpose (a restarted cloud finds them again). Tests, benchmarks and the proof stop them
// with this when they are done.

/** The pid of each pid file in `runDir` (`<pid>\n<start time>\n`). */
export const stackPids = (runDir: string): ReadonlyArray<number> =>
  (existsSync(runDir) ? readdirSync(runDir) : [])
    .filter((name) => name.endsWith(".pid"))
    .map((name) => Number(readFileSync(join(runDir, name), "utf8").split("\n")[0]))
    .filter((pid) => Number.isInteger(pid) && pid > 0)

/** Kills (SIGKILL) the process group of every stack with a pid file in `runDir`; `remove` also deletes the folder. */
export const killStacks = (runDir: string, options: { readonly remove: boolean }) =>
  Effect.sync(() => {
    for (const pid of stackPids(runDir)) {
      try {
        process.kill(-pid, "SIGKILL")
      } catch {
        // Already gone.
      }
    }
    if (options.remove) rmSync(runDir, { recursive: true, force: true })
  })
