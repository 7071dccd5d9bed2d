import { Duration, Effect, Schedule } from "effect"
import { postgresCpu, processCpu, selfCpu, selfThreadsCpu } from "./cpu.ts"

// What one queue process of the outbox bench was asked to do (its arguments and BENCH_* environment, see
// scripts/bench/outboxRun.ts) and how its runs are measured: shared by our run (outboxRun.ts) and the peers'
// (outboxPeers.ts), which run in the same process.

export const [queue, mode] = process.argv.slice(2) as ["ours" | "pgboss" | "graphile", "noop" | "http"]
export const env = (name: string) => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`${name} is not set`)
  return value
}
export const JOBS = Number(env("BENCH_JOBS"))
export const WARMUP = Number(env("BENCH_WARMUP"))
export const WARMUP_RUNS = Number(env("BENCH_WARMUP_RUNS"))
export const CONCURRENCY = Number(env("BENCH_CONCURRENCY"))
export const receiver = mode === "http" ? env("BENCH_RECEIVER") : ""
const receiverPid = mode === "http" ? Number(env("BENCH_RECEIVER_PID")) : 0
const RUN_TIMEOUT = Duration.seconds(120)
// Ours on a shared machine: a loopback answer can take over a second, and a timed-out request is a retry,
// which the run counts as a failure. The peers' requests get the same bound.
export const REQUEST_TIMEOUT_MS = 10_000

export const seed = new Uint8Array(32).fill(7)

/** What a run measured: jobs per second, and where the CPU went meanwhile (seconds). */
export interface RunFigures {
  readonly rate: number
  readonly wall: number
  /** This process: the queue's worker (and the 10 ms poll that waits for the drain). */
  readonly workerCpu: number
  /** Of `workerCpu`, JavaScriptCore's compiler thread: what the run still spent compiling. */
  readonly jitCpu: number
  readonly postgresCpu: number
  /** The receiver process, in http mode. */
  readonly receiverCpu: number
}

// JavaScriptCore compiles hot code on this thread while the program runs.
const JIT_THREAD = "JITWorker"

/** Marks the start of a timed phase: wall clock and CPU of this process, the cluster behind `url`, the receiver. */
export const startClock = (url: string) => {
  const port = Number(new URL(url).port)
  // Reading /proc takes a while on a busy machine: probes first, then the clock starts.
  const postgres = postgresCpu(port)
  const receiverStart = receiverPid > 0 ? processCpu(receiverPid) : 0
  const jit = selfThreadsCpu(JIT_THREAD)
  const self = selfCpu()
  return { port, postgres, receiver: receiverStart, self, jit, wall: performance.now() }
}

/** Polls `unfinished` until it says false; the time since `started` is the run's time. */
export const awaitDrained = (jobs: number, unfinished: Effect.Effect<boolean, unknown>, started: ReturnType<typeof startClock>) =>
  unfinished.pipe(
    Effect.repeat({ schedule: Schedule.spaced("10 millis"), while: (left) => left }),
    Effect.timeoutFail({ duration: RUN_TIMEOUT, onTimeout: () => new Error("bench run did not finish in time") }),
    Effect.map((): RunFigures => {
      const wall = (performance.now() - started.wall) / 1000
      const workerCpu = selfCpu() - started.self
      return {
        rate: jobs / wall,
        wall,
        workerCpu,
        jitCpu: selfThreadsCpu(JIT_THREAD) - started.jit,
        postgresCpu: postgresCpu(started.port) - started.postgres,
        receiverCpu: receiverPid > 0 ? processCpu(receiverPid) - started.receiver : 0
      }
    })
  )

/** The receiver's counts; every message must have arrived exactly once, with its headers. */
export const resetReceiver = Effect.promise(() => fetch(`${receiver}/reset`, { method: "POST" }).then((r) => r.arrayBuffer()))
export const checkReceiver = (jobs: number) =>
  Effect.flatMap(
    Effect.promise(() =>
      fetch(`${receiver}/count`).then((r) =>
        r.json() as Promise<{ requests: number; distinct: number; duplicates: number; unsigned: number }>
      )
    ),
    (count) =>
      count.requests === jobs && count.distinct === jobs && count.duplicates === 0 && count.unsigned === 0
        ? Effect.void
        : Effect.fail(new Error(`${queue} http: the receiver did not get every message exactly once: ${JSON.stringify(count)}`))
  )

/** The signed envelope our run stored, which the peers carry (set by our run, read by the peers' jobs). */
export const payload = { body: process.env.BENCH_BODY ?? "" }
