import { Data, Duration, Effect, Schedule } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { connect } from "node:net"
import { basename, join } from "node:path"

/**
 * Real `bun` processes for tests: spawned with a clean environment (nothing inherited but PATH and HOME, so a
 * developer's DATABASE_URL never leaks in), output collected, killed with SIGKILL if a test leaves one running.
 */

export const repoRoot = new URL("../../../", import.meta.url).pathname
export const backendMain = join(repoRoot, "packages/backend/src/main.ts")

/** `process.execPath` under `bunx --bun vitest`; the workspace's bun when vitest runs on Node. */
export const bunExecutable = (): string => {
  if (basename(process.execPath).startsWith("bun")) return process.execPath
  const local = join(repoRoot, "node_modules/.bin/bun")
  if (existsSync(local)) return local
  throw new Error("bun not found: run the tests with `bunx --bun vitest` or install the workspace")
}

export class ProcessTimeout extends Data.TaggedError("ProcessTimeout")<{ readonly message: string }> {}

export interface BackendProcess {
  readonly pid: number
  /** stdout and stderr interleaved, ANSI colours removed. */
  readonly output: Effect.Effect<string>
  /** Resolves with the first match of `pattern` in the output (already printed or still to come). */
  readonly waitForOutput: (pattern: RegExp, timeout?: Duration.DurationInput) => Effect.Effect<string, ProcessTimeout>
  /** The exit code (or 128 + signal number when killed by a signal). */
  readonly exitCode: (timeout?: Duration.DurationInput) => Effect.Effect<number, ProcessTimeout>
  readonly hasExited: Effect.Effect<boolean>
  readonly signal: (signal: NodeJS.Signals) => Effect.Effect<void>
}

const ansi = /\u001b\[[0-9;]*m/g
const signalNumbers: Partial<Record<NodeJS.Signals, number>> = { SIGINT: 2, SIGKILL: 9, SIGTERM: 15 }

/** Stryker's state in an instrumented process: the active mutant, the running test, the coverage so far. */
interface StrykerState {
  activeMutant?: string | number
  currentTestId?: string
  mutantCoverage?: { static: Record<string, number>; perTest: Record<string, Record<string, number>> }
}
const strykerState = (): StrykerState | undefined => (globalThis as { __stryker__?: StrykerState }).__stryker__

let spawned = 0

/**
 * Mutation testing (`bun run mutate`): a spawned process must run the same mutant as the test that spawned it,
 * and, in the initial run of Stryker's vitest runner, the code it runs must count as covered by that test.
 * Outside a mutation run there is no `__stryker__` state and no `MUTATE_CHILD_COVERAGE_DIR`: nothing changes.
 *
 * - The mutant: Stryker's command runner sets `__STRYKER_ACTIVE_MUTANT__` in the environment, its vitest runner
 *   sets `__stryker__.activeMutant` in the test process; either way the child gets the variable, which the
 *   instrumented code reads when it loads.
 * - The coverage (initial run of the vitest runner, when `bun run mutate` sets `MUTATE_CHILD_COVERAGE_DIR`): the
 *   child is started with MutationChild.ts preloaded, which writes its coverage to a file; when the process is
 *   released, that coverage is added to the test that spawned it (or to the static coverage when a layer
 *   spawned it outside any test).
 */
const mutationRun = (): { readonly env: Record<string, string>; readonly collect: () => void } => {
  const state = strykerState()
  const active = process.env.__STRYKER_ACTIVE_MUTANT__ ?? state?.activeMutant
  if (active !== undefined) return { env: { __STRYKER_ACTIVE_MUTANT__: String(active) }, collect: () => {} }
  const dir = process.env.MUTATE_CHILD_COVERAGE_DIR
  if (state === undefined || dir === undefined || dir === "") return { env: {}, collect: () => {} }
  const token = `${process.pid}-${++spawned}`
  const testId = state.currentTestId
  const preload = new URL("./MutationChild.ts", import.meta.url).pathname
  return {
    env: { BUN_OPTIONS: `--preload ${preload}`, MUTATE_CHILD_COVERAGE: join(dir, token) },
    collect: () => {
      const coverage = state.mutantCoverage ??= { static: {}, perTest: {} }
      const into = testId === undefined ? coverage.static : (coverage.perTest[testId] ??= {})
      for (const name of existsSync(dir) ? readdirSync(dir) : []) {
        if (!name.startsWith(`${token}.`)) continue
        const path = join(dir, name)
        try {
          const child = JSON.parse(readFileSync(path, "utf8")) as NonNullable<StrykerState["mutantCoverage"]>
          for (const hits of [child.static ?? {}, ...Object.values(child.perTest ?? {})]) {
            for (const [id, count] of Object.entries(hits)) into[id] = (into[id] ?? 0) + count
          }
        } catch {
          // Half-written by a process killed while writing: its previous write is lost with it.
        }
        rmSync(path, { force: true })
      }
    }
  }
}

export const spawnBun = (entry: string, env: Readonly<Record<string, string>>) =>
  spawnBunWith(["--no-env-file", entry], env)

/** `bun run <script>` from the repository root, exactly as the README starts the backend (`bun run start`). */
export const spawnBunScript = (script: string, env: Readonly<Record<string, string>>) => spawnBunWith(["run", script], env)

const spawnBunWith = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const mutation = mutationRun()
      const child: ChildProcess = spawn(bunExecutable(), args, {
        cwd: repoRoot,
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", NO_COLOR: "1", ...mutation.env, ...env },
        stdio: ["ignore", "pipe", "pipe"],
        // Its own process group, so the release below also reaches what it started (`bun run` starts a child).
        detached: true
      })
      let text = ""
      let code: number | undefined
      const listeners = new Set<() => void>()
      const changed = () => listeners.forEach((listener) => listener())
      const append = (chunk: Buffer) => {
        text += chunk.toString("utf8").replace(ansi, "")
        changed()
      }
      child.stdout!.on("data", append)
      child.stderr!.on("data", append)
      child.on("close", (exit, signal) => {
        code = exit ?? 128 + (signal === null ? 0 : signalNumbers[signal] ?? 0)
        changed()
      })

      const waitUntil = <A>(ready: () => A | undefined, timeout: Duration.DurationInput, what: string) =>
        Effect.async<A>((resume) => {
          const check = () => {
            const value = ready()
            if (value === undefined) return
            listeners.delete(check)
            resume(Effect.succeed(value))
          }
          listeners.add(check)
          check()
          return Effect.sync(() => listeners.delete(check))
        }).pipe(
          Effect.timeoutFail({
            duration: timeout,
            onTimeout: () => new ProcessTimeout({ message: `timed out waiting for ${what}; output so far:\n${text}` })
          })
        )

      const process_: BackendProcess = {
        pid: child.pid!,
        output: Effect.sync(() => text),
        waitForOutput: (pattern, timeout = "30 seconds") =>
          waitUntil(() => pattern.exec(text)?.[0], timeout, `output ${pattern}`),
        exitCode: (timeout = "30 seconds") => waitUntil(() => code, timeout, "exit"),
        hasExited: Effect.sync(() => code !== undefined),
        signal: (signal) => Effect.sync(() => void child.kill(signal))
      }
      return { child, process: process_, exited: () => code !== undefined, mutation }
    }),
    ({ child, exited, mutation }) =>
      Effect.sync(() => {
        try {
          // The whole group: a SIGKILLed `bun run` cannot pass the signal on, and its child would live on.
          process.kill(-child.pid!, "SIGKILL")
        } catch {
          // Already gone.
        }
        if (!exited()) child.kill("SIGKILL")
        mutation.collect()
      })
  ).pipe(Effect.map(({ process }) => process))


/** "refused" when nothing listens (ECONNREFUSED), "open" when a TCP connection is accepted. */
export const probePort = (port: number) =>
  Effect.async<"open" | "refused" | "error">((resume) => {
    const socket = connect({ host: "127.0.0.1", port })
    socket.once("connect", () => {
      socket.destroy()
      resume(Effect.succeed("open"))
    })
    socket.once("error", (error: NodeJS.ErrnoException) => {
      socket.destroy()
      resume(Effect.succeed(error.code === "ECONNREFUSED" ? "refused" : "error"))
    })
  })

/** Polls until the port accepts connections. */
export const waitForPort = (port: number, timeout: Duration.DurationInput = "30 seconds") =>
  probePort(port).pipe(
    Effect.filterOrFail((state) => state === "open", () => new ProcessTimeout({ message: `port ${port} not open` })),
    Effect.retry(Schedule.spaced("50 millis")),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => new ProcessTimeout({ message: `port ${port} never opened` }) }),
    Effect.asVoid
  )

/** A GET with a fresh connection, so no pooled keep-alive connection hides a closed listener. */
export const get = (port: number, path: string) =>
  Effect.promise(async () => {
    const response = await fetch(`http://127.0.0.1:${port}${path}`, { headers: { connection: "close" } })
    return { status: response.status, contentType: response.headers.get("content-type") ?? "", body: await response.text() }
  })

export interface CliRun {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** `bun packages/client/src/cli/main.ts ...args` (the `bun run admin` command line) from the repository root, with only the environment given. */
export const runCli = (args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) =>
  Effect.async<CliRun>((resume) => {
    const child = spawn(bunExecutable(), ["--no-env-file", "packages/client/src/cli/main.ts", ...args], {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", NO_COLOR: "1", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout!.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")))
    child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
    child.on("close", (code) => resume(Effect.succeed({ code: code ?? -1, stdout, stderr })))
    return Effect.sync(() => void child.kill("SIGKILL"))
  })
