import { startCluster } from "@delivery/testing"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import type { RunFigures } from "./outboxRun.ts"

// `bun run bench outbox [--json] [--fsync]`: one throwaway cluster; our outbox, pg-boss and
// graphile-worker each in a process of their own (scripts/bench/outboxRun.ts), every run in a fresh
// database, the same 20,000 jobs at the same concurrency (10) for every queue: first no-op jobs, then
// jobs that POST the same signed webhook to one receiver process (scripts/bench/receiver.ts), which
// checks that every message arrived exactly once. Each run is timed from the moment its workers start
// until the database holds no unfinished job; enqueueing is not timed.

export interface OutboxBenchOptions {
  readonly fsync: boolean
  readonly log: (line: string) => void
}

export interface OutboxBenchResult {
  readonly bench: "outbox"
  readonly ours_noop: number
  readonly pgboss: number
  readonly graphile: number
  /** ours_noop over the faster peer's no-op rate. */
  readonly ratio: number
  readonly ours_http: number
  readonly pgboss_http: number
  readonly graphile_http: number
  /** ours_http over the faster peer's HTTP rate. */
  readonly ratio_http: number
  /** Peak RSS of the processes that ran our worker (the max of the no-op and the HTTP one). */
  readonly rss_mb: number
  readonly rss_mb_pgboss: number
  readonly rss_mb_graphile: number
}

// BENCH_OUTBOX_JOBS and BENCH_OUTBOX_ROUNDS shrink a run for a quick look or a profile; the figures are 20,000 and 2.
const JOBS = Number(process.env.BENCH_OUTBOX_JOBS ?? 20_000)
// Each queue first processes an untimed run in a database of its own, in the same process as its
// timed runs, so no timed run pays for most of the JIT's warm-up: with 2,000 no-op jobs every queue (ours and
// graphile-worker alike) still got faster from one timed run to the next. The run lines print what JavaScriptCore's
// compiler thread still spent per job: ours 7-21 µs per no-op job and 9-32 per HTTP delivery in the timed runs,
// graphile-worker 2-7 and 8-17; five untimed runs of 20,000 (no-op and HTTP alike) instead of one did not bring ours
// lower (12-13 and 24-26 µs), so one stays the default. BENCH_OUTBOX_WARMUP_RUNS sets their number.
const WARMUP_JOBS = JOBS
const HTTP_WARMUP_JOBS = Math.min(4_000, JOBS)
const WARMUP_RUNS = Number(process.env.BENCH_OUTBOX_WARMUP_RUNS ?? 1)
// Best of two timed runs per queue (the machine is shared; one run can lose a core to something else).
const ROUNDS = Number(process.env.BENCH_OUTBOX_ROUNDS ?? 2)
const CONCURRENCY = 10

const repoRoot = new URL("../../", import.meta.url).pathname
// Extra flags for the bun that runs a queue, e.g. BENCH_WORKER_FLAGS="--cpu-prof-md --cpu-prof-dir=/tmp/prof";
// BENCH_ONLY="ours:http" runs only the listed runs (comma-separated queue:mode), to profile one of them.
const workerFlags = (process.env.BENCH_WORKER_FLAGS ?? "").split(" ").filter(Boolean)
const only = process.env.BENCH_ONLY?.split(",").filter(Boolean)

interface RunResult {
  readonly best: RunFigures
  readonly runs: ReadonlyArray<RunFigures>
  readonly rss_mb: number
  readonly body: string
}

// JavaScriptCore's options (BUN_JSC_*) reach the queue processes, to try them or to have the JIT report its work.
const childEnv = () => ({
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  HOME: process.env.HOME ?? "/tmp",
  ...Object.fromEntries(Object.entries(process.env).filter(([name]) => name.startsWith("BUN_JSC_")))
})

/** Runs one queue in one mode in its own process; resolves with its last stdout line, parsed. */
const runQueue = (queue: "ours" | "pgboss" | "graphile", mode: "noop" | "http", env: Record<string, string>) =>
  Effect.async<RunResult, Error>((resume) => {
    const child = spawn(process.execPath, [...workerFlags, "--no-env-file", `${repoRoot}scripts/bench/outboxRun.ts`, queue, mode], {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...childEnv(), ...env }
    })
    let last = ""
    createInterface({ input: child.stdout! }).on("line", (line) => {
      if (line.trim() !== "") last = line
    })
    child.once("exit", (code) => {
      if (code !== 0) return resume(Effect.fail(new Error(`${queue} ${mode} exited with code ${code}`)))
      // stdout may still hold the last line when the process is reported gone.
      setTimeout(() => {
        try {
          resume(Effect.succeed(JSON.parse(last) as RunResult))
        } catch {
          resume(Effect.fail(new Error(`${queue} ${mode}: no result line`)))
        }
      }, 50)
    })
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/** The receiver process (scripts/bench/receiver.ts), stopped with the bench; resolves once it listens. */
export const startReceiver = Effect.acquireRelease(
  Effect.async<{ readonly pid: number; readonly url: string }, Error>((resume) => {
    const child = spawn(process.execPath, ["--no-env-file", `${repoRoot}scripts/bench/receiver.ts`], {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "inherit"],
      env: childEnv()
    })
    createInterface({ input: child.stdout! }).once("line", (line) => {
      const { port } = JSON.parse(line) as { port: number }
      resume(Effect.succeed({ pid: child.pid!, url: `http://127.0.0.1:${port}` }))
    })
    child.once("exit", (code) => resume(Effect.fail(new Error(`receiver exited with code ${code}`))))
  }),
  ({ pid }) =>
    Effect.sync(() => {
      try {
        process.kill(pid, "SIGTERM")
      } catch {
        // already gone
      }
    })
)

const round = (n: number) => Math.round(n)
const ratioOf = (a: number, b: number) => Math.round((a / b) * 100) / 100

export const runOutboxBench = (options: OutboxBenchOptions): Effect.Effect<OutboxBenchResult, unknown> =>
  Effect.scoped(Effect.gen(function*() {
    const cluster = yield* startCluster({ fsync: options.fsync })
    const receiver = yield* startReceiver
    options.log(
      `cluster on port ${cluster.port} (fsync ${options.fsync ? "on" : "off"}); ${JOBS} jobs, concurrency ${CONCURRENCY}; ` +
        `no-op runs: warm-up ${WARMUP_RUNS} × ${WARMUP_JOBS} jobs, HTTP runs: warm-up ${WARMUP_RUNS} × ${HTTP_WARMUP_JOBS} jobs, then best of ${ROUNDS}; ` +
        `receiver pid ${receiver.pid} at ${receiver.url}`
    )
    let body = ""
    const zero: RunResult = { best: { rate: 0, wall: 0, workerCpu: 0, jitCpu: 0, postgresCpu: 0, receiverCpu: 0 }, runs: [], rss_mb: 0, body: "" }
    const timed = (name: string, queue: "ours" | "pgboss" | "graphile", mode: "noop" | "http") =>
      Effect.gen(function*() {
        if (only !== undefined && !only.includes(`${queue}:${mode}`)) return zero
        options.log(name)
        const result = yield* runQueue(queue, mode, {
          BENCH_CLUSTER_URL: cluster.url,
          BENCH_CLUSTER_PORT: String(cluster.port),
          BENCH_JOBS: String(JOBS),
          BENCH_WARMUP: String(mode === "noop" ? WARMUP_JOBS : HTTP_WARMUP_JOBS),
          BENCH_WARMUP_RUNS: String(WARMUP_RUNS),
          BENCH_ROUNDS: String(ROUNDS),
          BENCH_CONCURRENCY: String(CONCURRENCY),
          BENCH_RECEIVER: receiver.url,
          BENCH_RECEIVER_PID: String(receiver.pid),
          BENCH_BODY: body
        })
        if (queue === "ours") body = result.body
        const { best } = result
        options.log(
          `${name.padEnd(44)} ${String(round(best.rate)).padStart(6)} jobs/s best  (CPU per job: worker ${round((best.workerCpu * 1e6) / JOBS)} µs (JIT ${round((best.jitCpu * 1e6) / JOBS)}), ` +
            `PostgreSQL ${round((best.postgresCpu * 1e6) / JOBS)} µs${mode === "http" ? `, receiver ${round((best.receiverCpu * 1e6) / JOBS)} µs` : ""}; ` +
            `peak RSS ${result.rss_mb} MB)`
        )
        return result
      })
    const oursNoop = yield* timed("ours (no-op sender)", "ours", "noop")
    // The peers' jobs carry the same signed envelope as ours (the bytes our run stored).
    if (body === "") body = "x".repeat(424)
    options.log(`peers' job payload: our signed envelope, ${Buffer.byteLength(body)} bytes`)
    const pgbossNoop = yield* timed("pg-boss 12.38 (batchSize 100)", "pgboss", "noop")
    const graphileNoop = yield* timed("graphile-worker 0.18 (localQueue)", "graphile", "noop")
    const oursHttp = yield* timed("ours (HTTP, receiver process)", "ours", "http")
    const pgbossHttp = yield* timed("pg-boss 12.38 (HTTP, receiver process)", "pgboss", "http")
    const graphileHttp = yield* timed("graphile-worker 0.18 (HTTP, receiver process)", "graphile", "http")

    const ratio = ratioOf(oursNoop.best.rate, Math.max(pgbossNoop.best.rate, graphileNoop.best.rate))
    const ratio_http = ratioOf(oursHttp.best.rate, Math.max(pgbossHttp.best.rate, graphileHttp.best.rate))
    options.log(`ours / faster peer: no-op ${ratio}, HTTP ${ratio_http}`)
    return {
      bench: "outbox",
      ours_noop: round(oursNoop.best.rate),
      pgboss: round(pgbossNoop.best.rate),
      graphile: round(graphileNoop.best.rate),
      ratio,
      ours_http: round(oursHttp.best.rate),
      pgboss_http: round(pgbossHttp.best.rate),
      graphile_http: round(graphileHttp.best.rate),
      ratio_http,
      rss_mb: Math.max(oursNoop.rss_mb, oursHttp.rss_mb),
      rss_mb_pgboss: Math.max(pgbossNoop.rss_mb, pgbossHttp.rss_mb),
      rss_mb_graphile: Math.max(graphileNoop.rss_mb, graphileHttp.rss_mb)
    }
  }))
