import { startCluster } from "@delivery/testing"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { median, medianBy } from "./median.ts"
import type { RunFigures } from "./outboxMeasure.ts"

// `bun run bench outbox [--json] [--fsync]`: one throwaway cluster; our outbox, pg-boss and
// graphile-worker each in a process of their own (scripts/bench/outboxRun.ts), every run in a fresh
// database, the same 20,000 jobs at the same concurrency (10) for every queue: first no-op jobs, then
// jobs that POST the same signed webhook to one receiver process (scripts/bench/receiver.ts), which
// checks that every message arrived exactly once. Each run is timed from the moment its workers start
// until the database holds no unfinished job; enqueueing is not timed. The queues of one mode take turns,
// one run each per round; each rate is the median of a queue's runs, each ratio the median of the rounds'.

export interface OutboxBenchOptions {
  readonly fsync: boolean
  readonly log: (line: string) => void
}

export interface OutboxBenchResult {
  readonly bench: "outbox"
  readonly ours_noop: number
  readonly pgboss: number
  readonly graphile: number
  /** The median over the rounds of ours over the faster peer's no-op rate in the same round. */
  readonly ratio: number
  readonly ours_http: number
  readonly pgboss_http: number
  readonly graphile_http: number
  /** The same over HTTP. */
  readonly ratio_http: number
  /** Peak RSS of the processes that ran our worker (the max of the no-op and the HTTP one). */
  readonly rss_mb: number
  readonly rss_mb_pgboss: number
  readonly rss_mb_graphile: number
}

// BENCH_OUTBOX_JOBS and BENCH_OUTBOX_ROUNDS shrink a run for a quick look or a profile; the figures are 20,000 and 5.
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
// The queues take turns, one timed run each per round, and the ratio is the median of the rounds' ratios: this
// machine's speed moves by more than a change's worth from one minute to the next, so a queue measured a minute
// after another can be a quarter faster or slower for that alone.
const ROUNDS = Number(process.env.BENCH_OUTBOX_ROUNDS ?? 5)
const CONCURRENCY = 10
// Our claim loops (OUTBOX_CLAIMERS, the shipped default), sharing the 10 deliveries in flight: each loop claims up to
// 100 rows per statement. With five loops PostgreSQL spent a third more per no-op job than with two (their claims and
// outcome writes contend for the same pages: docs/controlplane-outbound.md, "Claim loops"). BENCH_OUTBOX_CLAIMERS
// (a divisor of 10) sets another number.
const CLAIMERS = Number(process.env.BENCH_OUTBOX_CLAIMERS ?? 2)
if (!(Number.isInteger(CLAIMERS) && CLAIMERS > 0 && CONCURRENCY % CLAIMERS === 0)) {
  throw new Error(`BENCH_OUTBOX_CLAIMERS must divide ${CONCURRENCY}: 1, 2, 5 or 10`)
}

const repoRoot = new URL("../../", import.meta.url).pathname
// Extra flags for the bun that runs a queue, e.g. BENCH_WORKER_FLAGS="--cpu-prof-md --cpu-prof-dir=/tmp/prof";
// BENCH_ONLY="ours:http" runs only the listed runs (comma-separated queue:mode), to profile one of them.
const workerFlags = (process.env.BENCH_WORKER_FLAGS ?? "").split(" ").filter(Boolean)
const only = process.env.BENCH_ONLY?.split(",").filter(Boolean)

type Queue = "ours" | "pgboss" | "graphile"
type Mode = "noop" | "http"

// JavaScriptCore's options (BUN_JSC_*) reach the queue processes, to try them or to have the JIT report its work.
const childEnv = () => ({
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  HOME: process.env.HOME ?? "/tmp",
  ...Object.fromEntries(Object.entries(process.env).filter(([name]) => name.startsWith("BUN_JSC_")))
})

/** A queue's process (scripts/bench/outboxRun.ts), warmed up: each `run` is one timed run, `end` its peak RSS. */
interface QueueProcess {
  readonly body: string
  readonly run: Effect.Effect<RunFigures, Error>
  readonly end: Effect.Effect<number, Error>
}

/** Starts one queue in one mode in its own process and waits until its warm-up is done; killed with the scope. */
const startQueue = (queue: Queue, mode: Mode, env: Record<string, string>) =>
  Effect.gen(function*() {
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        spawn(process.execPath, [...workerFlags, "--no-env-file", `${repoRoot}scripts/bench/outboxRun.ts`, queue, mode], {
          cwd: repoRoot,
          stdio: ["pipe", "pipe", "inherit"],
          env: { ...childEnv(), ...env }
        })
      ),
      // After `end` the process exits by itself, writing a CPU profile first when BENCH_WORKER_FLAGS asks for one:
      // it is killed only if it has not exited a few seconds later (or at once, when the bench stops before `end`).
      (child) =>
        Effect.async<void>((resume) => {
          if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
          const kill = setTimeout(() => child.kill("SIGKILL"), ended ? 10_000 : 0)
          child.once("exit", () => {
            clearTimeout(kill)
            resume(Effect.void)
          })
        })
    )
    let ended = false
    const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]()
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve))
    // The next JSON line the process prints, parsed (its worker may log to stdout too); a process that exits first
    // fails with its exit code.
    const answer = <A>(command: string | undefined) =>
      Effect.tryPromise({
        try: async () => {
          if (command !== undefined) child.stdin!.write(`${command}\n`)
          for (;;) {
            const line = await lines.next()
            if (line.done === true) throw new Error(`${queue} ${mode} exited with code ${await exited}`)
            if (line.value.startsWith("{")) return JSON.parse(line.value) as A
          }
        },
        catch: (cause) => (cause instanceof Error ? cause : new Error(String(cause)))
      })
    const { body } = yield* answer<{ readonly body: string }>(undefined)
    return {
      body,
      run: Effect.map(answer<{ readonly figures: RunFigures }>("run"), (a) => a.figures),
      end: Effect.map(answer<{ readonly rss_mb: number }>("end"), (a) => {
        ended = true
        return a.rss_mb
      })
    } satisfies QueueProcess
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
const twoDecimals = (n: number) => Math.round(n * 100) / 100

/** One queue in one mode: the rate of its median run, and its peak RSS over the process's whole life. */
interface QueueResult {
  readonly rate: number
  readonly rss_mb: number
}

const NAMES: Record<Queue, string> = {
  ours: "ours",
  pgboss: "pg-boss 12.38 (batchSize 100)",
  graphile: "graphile-worker 0.18 (localQueue)"
}

export const runOutboxBench = (options: OutboxBenchOptions): Effect.Effect<OutboxBenchResult, unknown> =>
  Effect.scoped(Effect.gen(function*() {
    const cluster = yield* startCluster({ fsync: options.fsync })
    const receiver = yield* startReceiver
    options.log(
      `cluster on port ${cluster.port} (fsync ${options.fsync ? "on" : "off"}); ${JOBS} jobs, concurrency ${CONCURRENCY}; ` +
        `no-op runs: warm-up ${WARMUP_RUNS} × ${WARMUP_JOBS} jobs, HTTP runs: warm-up ${WARMUP_RUNS} × ${HTTP_WARMUP_JOBS} jobs, ` +
        `then ${ROUNDS} rounds, the queues taking turns; receiver pid ${receiver.pid} at ${receiver.url}`
    )
    let body = ""

    /** Every listed queue of one mode: warmed up one after another, then one timed run each per round. */
    const mode = (name: string, m: Mode) =>
      Effect.scoped(Effect.gen(function*() {
        const queues = (["ours", "pgboss", "graphile"] as const).filter((q) => only === undefined || only.includes(`${q}:${m}`))
        if (queues.length === 0) return { results: new Map<Queue, QueueResult>(), ratio: Number.NaN }
        options.log(name)
        const started = new Map<Queue, QueueProcess>()
        for (const queue of queues) {
          const queueProcess = yield* startQueue(queue, m, {
            BENCH_CLUSTER_URL: cluster.url,
            BENCH_CLUSTER_PORT: String(cluster.port),
            BENCH_JOBS: String(JOBS),
            BENCH_WARMUP: String(m === "noop" ? WARMUP_JOBS : HTTP_WARMUP_JOBS),
            BENCH_WARMUP_RUNS: String(WARMUP_RUNS),
            BENCH_CONCURRENCY: String(CONCURRENCY),
            BENCH_CLAIMERS: String(CLAIMERS),
            BENCH_RECEIVER: receiver.url,
            BENCH_RECEIVER_PID: String(receiver.pid),
            BENCH_BODY: body
          })
          // The peers' jobs carry the same signed envelope as ours (the bytes our run stored).
          if (queue === "ours") body = queueProcess.body
          if (body === "") body = "x".repeat(424)
          started.set(queue, queueProcess)
        }
        const turns = new Map<Queue, Array<RunFigures>>(queues.map((q) => [q, []]))
        const ratios: Array<number> = []
        for (let r = 0; r < ROUNDS; r++) {
          // Each round starts with another queue, so none is always the one that runs right after a warm-up.
          for (const queue of [...queues.slice(r % queues.length), ...queues.slice(0, r % queues.length)]) {
            turns.get(queue)!.push(yield* started.get(queue)!.run)
          }
          const peers = queues.filter((q) => q !== "ours").map((q) => turns.get(q)![r]!.rate)
          if (queues.includes("ours") && peers.length > 0) ratios.push(turns.get("ours")![r]!.rate / Math.max(...peers))
        }
        const results = new Map<Queue, QueueResult>()
        for (const queue of queues) {
          const at = medianBy(turns.get(queue)!, (f) => f.rate)
          const rss_mb = yield* started.get(queue)!.end
          results.set(queue, { rate: at.rate, rss_mb })
          const perJob = (s: number) => round((s * 1e6) / JOBS)
          options.log(
            `${`${NAMES[queue]} (${m === "noop" ? "no-op" : "HTTP, receiver process"})`.padEnd(52)} ${String(round(at.rate)).padStart(6)} jobs/s median ` +
              `(CPU per job: worker ${perJob(at.workerCpu)} µs (JIT ${perJob(at.jitCpu)}), PostgreSQL ${perJob(at.postgresCpu)} µs` +
              `${m === "http" ? `, receiver ${perJob(at.receiverCpu)} µs` : ""}; peak RSS ${rss_mb} MB)`
          )
        }
        if (ratios.length > 0) {
          options.log(`ours / faster peer per round (${m === "noop" ? "no-op" : "HTTP"}): ${ratios.map((x) => x.toFixed(2)).join(", ")}`)
        }
        return { results, ratio: ratios.length > 0 ? twoDecimals(median(ratios)) : Number.NaN }
      }))

    const noop = yield* mode("no-op runs", "noop")
    options.log(`peers' job payload: our signed envelope, ${Buffer.byteLength(body)} bytes`)
    const http = yield* mode("HTTP runs (receiver process)", "http")
    const rateOf = ({ results }: { readonly results: Map<Queue, QueueResult> }, queue: Queue) => round(results.get(queue)?.rate ?? 0)
    const rssOf = (queue: Queue) => Math.max(noop.results.get(queue)?.rss_mb ?? 0, http.results.get(queue)?.rss_mb ?? 0)
    options.log(`ours / faster peer (median of the rounds): no-op ${noop.ratio}, HTTP ${http.ratio}`)
    return {
      bench: "outbox",
      ours_noop: rateOf(noop, "ours"),
      pgboss: rateOf(noop, "pgboss"),
      graphile: rateOf(noop, "graphile"),
      ratio: noop.ratio,
      ours_http: rateOf(http, "ours"),
      pgboss_http: rateOf(http, "pgboss"),
      graphile_http: rateOf(http, "graphile"),
      ratio_http: http.ratio,
      rss_mb: rssOf("ours"),
      rss_mb_pgboss: rssOf("pgboss"),
      rss_mb_graphile: rssOf("graphile")
    }
  }))
