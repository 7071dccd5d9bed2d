import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Duration, Effect, Layer, Option, Redacted, type Scope } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs"
import { connect } from "node:net"
import { basename, join } from "node:path"
import type { StackId } from "../Domain.ts"
import { type LocalComputeSettings, type LocalStackSettings, repoRoot } from "./LocalComputeConfig.ts"
import { pollUntil } from "./Poll.ts"
import {
  ComputeProvider,
  type ComputeProviderShape,
  ComputeStartFailed,
  type ComputeStatus,
  type ComputeTarget,
  type StopOutcome
} from "./ComputeProvider.ts"

// Spec 001's compute for stacks on this machine: each stack is a real tenant backend process
// (`bun --no-env-file <entry>`) listening on 127.0.0.1 and its own port. The process belongs to the stack, not to
// the cloud: it is found again through its pid file and its port, whatever happened to the cloud process meanwhile.

interface Owned {
  readonly pid: number
  readonly start: string | undefined
}

interface Spawned extends Owned {
  readonly child: ChildProcess
  exited: boolean
}

const bunExecutable = (): string => {
  if (basename(process.execPath).startsWith("bun")) return process.execPath
  const local = join(repoRoot, "node_modules/.bin/bun")
  return existsSync(local) ? local : "bun"
}

const hasProc = existsSync("/proc/self/stat")

/** State and start time (clock ticks since boot) from /proc; undefined when the process is gone or there is no /proc. */
const procStat = (pid: number): { readonly state: string; readonly start: string } | undefined => {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8")
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    const fields = text.slice(text.lastIndexOf(")") + 2).split(" ")
    return { state: fields[0] ?? "", start: fields[19] ?? "" }
  } catch {
    return undefined
  }
}

const isAlive = (owned: Owned): boolean => {
  if (hasProc) {
    const stat = procStat(owned.pid)
    // A zombie has exited; a different start time is another process that got the pid after a reboot or a crash.
    return stat !== undefined && stat.state !== "Z" && stat.state !== "X" &&
      (owned.start === undefined || owned.start === stat.start)
  }
  try {
    process.kill(owned.pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** True when something accepts TCP connections on 127.0.0.1:port (within a second: loopback answers at once). */
const portOpen = (port: number) =>
  Effect.async<boolean>((resume) => {
    const socket = connect({ host: "127.0.0.1", port })
    const done = (open: boolean) => {
      socket.destroy()
      resume(Effect.succeed(open))
    }
    socket.setTimeout(1000, () => done(false))
    socket.once("connect", () => done(true))
    socket.once("error", () => done(false))
    return Effect.sync(() => void socket.destroy())
  })

const pidFile = (runDir: string, stack: string) => join(runDir, `${stack}.pid`)
const logFile = (runDir: string, stack: string) => join(runDir, `${stack}.log`)

/** `<pid>\n<start time>\n`: the pid first, so a human (or a test) reading it needs no parser. */
const readPidFile = (path: string): Owned | undefined => {
  try {
    const [pid, start] = readFileSync(path, "utf8").split("\n")
    const value = Number(pid)
    return Number.isInteger(value) && value > 0 ? { pid: value, start: start === undefined || start === "" ? undefined : start } : undefined
  } catch {
    return undefined
  }
}

const writePidFile = (path: string, owned: Owned) => {
  // Renamed into place, so a reader never sees half a pid.
  const temporary = `${path}.${process.pid}.tmp`
  writeFileSync(temporary, `${owned.pid}\n${owned.start ?? ""}\n`, { mode: 0o600 })
  renameSync(temporary, path)
}

/**
 * The whole group: every tenant is the leader of the group its spawn created, so whatever it started hears the
 * signal too. A pid that leads no group was not started here and gets nothing (the stop then stays uncertain).
 */
const signalGroup = (pid: number, signal: NodeJS.Signals) => {
  try {
    process.kill(-pid, signal)
  } catch {
    // Gone meanwhile, or not a group of ours.
  }
}

/** Runs `check` every 100 ms until it gives a value; None when `bound` passes first. */
const pollWithin = <A>(check: Effect.Effect<A | undefined>, bound: Duration.Duration) =>
  pollUntil(check, Duration.millis(100)).pipe(Effect.timeoutOption(bound))

/**
 * The local `ComputeProvider`. Closing its scope does NOT stop the stacks it started: a stack's compute is
 * independent of the cloud process, and a restarted cloud finds each one again through its pid file and its port.
 * `prepare` and `stop` of one stack run one at a time (a stop waits for a start in progress), so a start is never
 * spawned twice and a stop never misses a process being started.
 */
export const makeLocalCompute = (settings: LocalComputeSettings): Effect.Effect<ComputeProviderShape, never, Scope.Scope> =>
  Effect.gen(function* () {
    const client = (yield* HttpClient.HttpClient.pipe(Effect.provide(FetchHttpClient.layer))).pipe(
      HttpClient.withTracerPropagation(false)
    )
    const locks = new Map<string, Effect.Semaphore>()
    for (const stack of settings.stacks.keys()) locks.set(stack, yield* Effect.makeSemaphore(1))
    const spawned = new Map<string, Spawned>()

    // Forget the children, do not stop them (see above).
    yield* Effect.addFinalizer(() => Effect.sync(() => spawned.clear()))

    /** The stack's live process, from memory or its pid file; a stale pid file is removed on the way. */
    const findOwned = (stack: string) =>
      Effect.sync((): Owned | undefined => {
        const known = spawned.get(stack)
        if (known !== undefined && !known.exited && isAlive(known)) return known
        const path = pidFile(settings.runDir, stack)
        const recorded = readPidFile(path)
        if (recorded !== undefined && isAlive(recorded)) return recorded
        if (existsSync(path)) rmSync(path, { force: true })
        return undefined
      })

    const startFailed = (stack: StackId, code: ComputeStartFailed["code"]) => new ComputeStartFailed({ stack, code })

    const launch = (stack: StackId, config: LocalStackSettings) =>
      Effect.try({
        try: (): Spawned => {
          mkdirSync(settings.runDir, { recursive: true, mode: 0o700 })
          const out = openSync(logFile(settings.runDir, stack), "a", 0o600)
          let child: ChildProcess
          try {
            // node:child_process rather than Bun.spawn or a CommandExecutor: `detached` gives the tenant its own
            // process group (one signal reaches all of it, and the cloud's exit or its terminal's signals do not),
            // and output goes straight to a file descriptor, so nothing in the cloud has to keep reading a pipe.
            child = spawn(bunExecutable(), ["--no-env-file", settings.entry], {
              cwd: repoRoot,
              // Nothing else from the cloud's environment: the cloud's own secrets never reach a tenant.
              env: {
                PATH: process.env.PATH ?? "/usr/bin:/bin",
                HOME: process.env.HOME ?? "/tmp",
                NO_COLOR: "1",
                ...Redacted.value(config.env),
                HOST: "127.0.0.1",
                PORT: String(config.port)
              },
              stdio: ["ignore", out, out],
              detached: true
            })
          } finally {
            closeSync(out)
          }
          child.unref()
          const entry: Spawned = { pid: child.pid ?? -1, start: undefined, child, exited: false }
          child.once("exit", () => (entry.exited = true))
          // Listened to before anything can throw: an unheard 'error' event (a missing binary) would end the cloud.
          child.on("error", () => (entry.exited = true))
          if (child.pid === undefined) throw new Error("spawn gave no pid")
          const started: Spawned = Object.assign(entry, { start: procStat(child.pid)?.start })
          writePidFile(pidFile(settings.runDir, stack), started)
          return started
        },
        catch: (cause) => cause
      }).pipe(
        Effect.tapError((cause) =>
          Effect.logError("local stack could not be spawned", cause instanceof Error ? cause.message : "unknown error").pipe(
            Effect.annotateLogs({ stack })
          )),
        Effect.mapError(() => startFailed(stack, "compute-start-failed"))
      )

    const prepare = Effect.fn("LocalCompute.prepare")(function* (stack: StackId) {
      const config = settings.stacks.get(stack)
      const lock = locks.get(stack)
      if (config === undefined || lock === undefined) return yield* startFailed(stack, "compute-unknown-stack")
      const target = { upstream: `http://127.0.0.1:${config.port}` }
      return yield* lock.withPermits(1)(Effect.gen(function* () {
        if ((yield* findOwned(stack)) !== undefined || (yield* portOpen(config.port))) return target
        const entry = yield* launch(stack, config)
        spawned.set(stack, entry)
        yield* Effect.logInfo("local stack started").pipe(Effect.annotateLogs({ stack, pid: entry.pid, port: config.port }))
        const outcome = yield* pollWithin(
          Effect.suspend(() =>
            entry.exited
              ? Effect.succeed("exited" as const)
              : Effect.map(portOpen(config.port), (open) => (open ? "open" as const : undefined))
          ),
          settings.startTimeout
        )
        if (Option.isNone(outcome)) {
          // Left running: it may still come up, and the next prepare or status finds it.
          yield* Effect.logWarning("local stack did not open its port in time").pipe(Effect.annotateLogs({ stack, pid: entry.pid }))
          return yield* startFailed(stack, "compute-start-failed")
        }
        if (outcome.value === "exited") {
          yield* Effect.sync(() => rmSync(pidFile(settings.runDir, stack), { force: true }))
          return yield* startFailed(stack, "compute-exited")
        }
        return target
      }))
    })

    const readiness = Effect.fn("LocalCompute.readiness")(function* (_stack: StackId, target: ComputeTarget) {
      // A fresh connection each time: a pooled one could still reach a listener that is closing.
      const request = HttpClientRequest.get(`${target.upstream}/ready`).pipe(HttpClientRequest.setHeader("connection", "close"))
      return yield* client.execute(request).pipe(
        Effect.map((response) => response.status === 200),
        Effect.scoped,
        Effect.timeout("2 seconds"),
        Effect.orElseSucceed(() => false)
      )
    })

    const stop = Effect.fn("LocalCompute.stop")(function* (stack: StackId) {
      const config = settings.stacks.get(stack)
      const lock = locks.get(stack)
      if (config === undefined || lock === undefined) return { _tag: "Failed", code: "compute-unknown-stack" } satisfies StopOutcome
      return yield* lock.withPermits(1)(Effect.gen(function* () {
        const owned = yield* findOwned(stack)
        if (owned === undefined) {
          return (yield* portOpen(config.port))
            ? { _tag: "Failed", code: "compute-not-owned" } satisfies StopOutcome
            : { _tag: "Stopped" } satisfies StopOutcome
        }
        // SIGTERM only: the tenant drains its in-flight requests on it; a SIGKILL would cut them off.
        yield* Effect.sync(() => signalGroup(owned.pid, "SIGTERM"))
        yield* Effect.logInfo("local stack stopping").pipe(Effect.annotateLogs({ stack, pid: owned.pid }))
        const gone = yield* pollWithin(
          Effect.suspend(() =>
            isAlive(owned) ? Effect.succeed(undefined) : Effect.map(portOpen(config.port), (open) => (open ? undefined : true))
          ),
          settings.stopTimeout
        )
        if (Option.isNone(gone)) {
          yield* Effect.logWarning("local stack still running after its stop timeout").pipe(Effect.annotateLogs({ stack, pid: owned.pid }))
          return { _tag: "Uncertain", code: "compute-stop-timeout" } satisfies StopOutcome
        }
        yield* Effect.sync(() => {
          spawned.delete(stack)
          rmSync(pidFile(settings.runDir, stack), { force: true })
        })
        return { _tag: "Stopped" } satisfies StopOutcome
      }))
    })

    const status = Effect.fn("LocalCompute.status")(function* (stack: StackId) {
      const config = settings.stacks.get(stack)
      if (config === undefined) return "unknown" satisfies ComputeStatus
      if ((yield* findOwned(stack)) !== undefined || (yield* portOpen(config.port))) return "running" satisfies ComputeStatus
      return "stopped" satisfies ComputeStatus
    })

    return { prepare, readiness, stop, status } satisfies ComputeProviderShape
  })

export const localComputeLayer = (settings: LocalComputeSettings): Layer.Layer<ComputeProvider> =>
  Layer.scoped(ComputeProvider, makeLocalCompute(settings))
