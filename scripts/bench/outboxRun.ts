import { RateLimiter } from "@effect/experimental"
import { BunContext } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { runMigrations, WorkerRegistry } from "@delivery/core"
import {
  HttpSenderLive,
  noopSender,
  Outbox,
  OutboxSettings,
  outboxWorkerLayer,
  type SignRequest,
  WebhookSignature
} from "@delivery/outbox"
import { KeyId, KeySource, privateKeyFromSeed, ProjectId, RawPublicKey, rawPublicKey, Signer, TenantId } from "@delivery/signer"
import { connect, createDatabase, PgCluster } from "@delivery/testing"
import { Context, Duration, Effect, Layer, Redacted, Schedule } from "effect"
import { makeWorkerUtils, Logger as GraphileLogger, run as runGraphile } from "graphile-worker"
import { randomUUID, sign } from "node:crypto"
import { createInterface } from "node:readline"
import { PgBoss } from "pg-boss"
import { databasePool } from "../../packages/backend/src/Database.ts"
import { peakRssMb, postgresCpu, processCpu, selfCpu, selfThreadsCpu } from "./cpu.ts"

// One queue of the outbox bench in a process of its own, so that its CPU and its peak RSS are its
// own: `bun --no-env-file scripts/bench/outboxRun.ts <ours|pgboss|graphile> <noop|http>`, started by
// scripts/bench/outbox.ts, which has the queues take turns. Untimed warm-up runs first, then
// `{"ready":true,"body":…}` on stdout (body: the signed envelope ours delivers, which the peers then carry and
// POST); then each `run` line on stdin starts one timed run in a fresh database of the cluster at
// BENCH_CLUSTER_URL and answers `{"figures":RunFigures}`, and `end` answers `{"rss_mb":…}` and exits.
// Progress goes to stderr.
//
// Environment: BENCH_CLUSTER_URL, BENCH_CLUSTER_PORT, BENCH_JOBS, BENCH_WARMUP (jobs per untimed run),
// BENCH_WARMUP_RUNS, BENCH_CONCURRENCY; in http mode BENCH_RECEIVER (base URL) and BENCH_RECEIVER_PID; for the
// peers BENCH_BODY (the body each job carries).

const [queue, mode] = process.argv.slice(2) as ["ours" | "pgboss" | "graphile", "noop" | "http"]
const env = (name: string) => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`${name} is not set`)
  return value
}
const JOBS = Number(env("BENCH_JOBS"))
const WARMUP = Number(env("BENCH_WARMUP"))
const WARMUP_RUNS = Number(env("BENCH_WARMUP_RUNS"))
const CONCURRENCY = Number(env("BENCH_CONCURRENCY"))
const receiver = mode === "http" ? env("BENCH_RECEIVER") : ""
const receiverPid = mode === "http" ? Number(env("BENCH_RECEIVER_PID")) : 0
// Our concurrency = claim loops x deliveries in flight each; each loop claims up to 100 rows per query.
const CLAIMERS = 5
const RUN_TIMEOUT = Duration.seconds(120)
// Ours on a shared machine: a loopback answer can take over a second, and a timed-out request is a retry,
// which the run counts as a failure. The peers' requests get the same bound.
const REQUEST_TIMEOUT_MS = 10_000

const tenant = TenantId.make("bench")
const project = ProjectId.make("web")
const seed = new Uint8Array(32).fill(7)

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
const startClock = (url: string) => {
  const port = Number(new URL(url).port)
  // Reading /proc takes a while on a busy machine: probes first, then the clock starts.
  const postgres = postgresCpu(port)
  const receiverStart = receiverPid > 0 ? processCpu(receiverPid) : 0
  const jit = selfThreadsCpu(JIT_THREAD)
  const self = selfCpu()
  return { port, postgres, receiver: receiverStart, self, jit, wall: performance.now() }
}

/** Polls `unfinished` until it says false; the time since `started` is the run's time. */
const awaitDrained = (jobs: number, unfinished: Effect.Effect<boolean, unknown>, started: ReturnType<typeof startClock>) =>
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
const resetReceiver = Effect.promise(() => fetch(`${receiver}/reset`, { method: "POST" }).then((r) => r.arrayBuffer()))
const checkReceiver = (jobs: number) =>
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

/** The signed envelope our run stored, which the peers carry. */
let body = process.env.BENCH_BODY ?? ""

/** Our outbox: the real worker layer (claim ≤ 100 with SKIP LOCKED, fenced batched transitions). */
const runOurs = (jobs: number) =>
  Effect.scoped(Effect.gen(function*() {
    const db = yield* createDatabase
    // The backend's own pool (named prepared statements for the statements that ask for them), as shipped.
    const pool = yield* Layer.build(
      databasePool({ url: Redacted.make(db.url), maxConnections: CLAIMERS * 3 + 2, applicationName: "delivery-bench" })
    )
    const Sql = Layer.succeedContext(pool)
    const sql = Context.get(pool, SqlClient.SqlClient)
    yield* runMigrations().pipe(Effect.provide(Sql), Effect.provide(BunContext.layer))
    const settings = OutboxSettings.fromMap({
      OUTBOX_CLAIMERS: String(CLAIMERS),
      OUTBOX_CONCURRENCY: String(CONCURRENCY / CLAIMERS),
      OUTBOX_BATCH_SIZE: "100",
      OUTBOX_POLL_INTERVAL: "10 millis",
      // 100 rows, 2 in flight: 50 rounds must fit the cycle, and the lease the cycle.
      OUTBOX_REQUEST_TIMEOUT: `${REQUEST_TIMEOUT_MS} millis`,
      OUTBOX_CYCLE_TIMEOUT: "10 minutes",
      OUTBOX_LEASE: "11 minutes",
      // The benchmark measures the queue, not the tenant's delivery rate.
      SYNC_INGEST_LIMIT: "1000000000"
    })
    const SignerLive = Signer.Default.pipe(
      Layer.provide(KeySource.layerMemory([{ tenant, keyId: KeyId.make("k1"), seed }])),
      Layer.provide(Sql)
    )
    const signer = yield* Signer.pipe(Effect.provide(SignerLive))
    yield* signer.registerKey(tenant, KeyId.make("k1"), RawPublicKey.make(rawPublicKey(privateKeyFromSeed(seed))))
    const outbox = yield* Outbox.pipe(Effect.provide(Outbox.Default.pipe(
      Layer.provide(settings), Layer.provide(Layer.succeed(Signer, signer)), Layer.provide(Sql)
    )))
    // In noop mode nothing is sent; the target only has to be registered.
    yield* outbox.registerTarget(tenant, project, `${receiver || "http://127.0.0.1:9"}/hooks`, "system:bench")
    // One real enqueue (signed, fingerprinted), then its row cloned under new ids and keys.
    yield* outbox.enqueue({
      envelope: {
        type: "controlplane/v1",
        route: { tenant, project, producer: "bench" },
        eventId: "bench-event-0000000001",
        idempotencyKey: "bench-0",
        sequence: 1,
        createdAt: "2025-01-15T09:30:00.123Z",
        schemaVersion: 1,
        metadata: { kind: "task.proposed", subject: "task-1", attributes: { title: "benchmark" } }
      } as unknown as SignRequest
    })
    yield* sql`
      WITH e AS (
        INSERT INTO outbox_envelopes (id, tenant, project, idempotency_key, request_sha256, event_identity, envelope, created_at)
        SELECT gen_random_uuid(), t.tenant, t.project, 'bench-' || g, t.request_sha256, t.event_identity, t.envelope, t.created_at
        FROM generate_series(1, ${jobs - 1}) g, (SELECT * FROM outbox_envelopes LIMIT 1) t
        RETURNING id, tenant, project
      )
      INSERT INTO outbox_messages (id, tenant, project, state, max_attempts, attempt_ceiling, due_at, created_at)
      SELECT e.id, e.tenant, e.project, 'pending', m.max_attempts, m.attempt_ceiling, m.due_at, m.created_at
      FROM e, (SELECT * FROM outbox_messages LIMIT 1) m`
    const [sample] = yield* sql<{ envelope: string }>`SELECT envelope FROM outbox_envelopes LIMIT 1`
    body = sample!.envelope
    yield* sql`VACUUM ANALYZE outbox_messages`
    yield* sql`VACUUM ANALYZE outbox_envelopes`

    const sender = mode === "noop"
      ? noopSender
      : HttpSenderLive.pipe(Layer.provide(Layer.succeed(Signer, signer)), Layer.provide(KeySource.layerMemory([{ tenant, keyId: KeyId.make("k1"), seed }])))
    const worker = outboxWorkerLayer.pipe(
      Layer.provide(sender),
      Layer.provide(RateLimiter.layerStoreMemory),
      Layer.provide(settings),
      Layer.provide(WorkerRegistry.Default),
      Layer.provide(Sql)
    )
    if (mode === "http") yield* resetReceiver
    const started = startClock(db.url)
    const figures = yield* Effect.scoped(Effect.zipRight(
      Layer.build(worker),
      awaitDrained(
        jobs,
        Effect.map(sql<{ left: boolean }>`SELECT EXISTS (SELECT 1 FROM outbox_messages WHERE state IN ('pending', 'delivering')) AS left`, (r) => r[0]!.left),
        started
      )
    ))
    const [counts] = yield* sql<{ delivered: number; attempts: number }>`
      SELECT count(*) FILTER (WHERE state = 'delivered')::int AS delivered, sum(attempt)::int AS attempts FROM outbox_messages`
    if (counts!.delivered !== jobs || counts!.attempts !== jobs) {
      return yield* Effect.fail(new Error(`ours ${mode}: ${counts!.delivered} delivered in ${counts!.attempts} attempts`))
    }
    if (mode === "http") yield* checkReceiver(jobs)
    return figures
  }))

// The peers' HTTP task, written as a user of those libraries would: sign the same Standard Webhooks
// content with the same key (node:crypto Ed25519, our formatting helpers), POST the same body with the
// same headers our sender sends, keep-alive (Bun's fetch default), no redirect followed, the same
// timeout; a non-2xx answer fails the job (a retry would show up at the receiver as a duplicate).
const privateKey = privateKeyFromSeed(seed)
interface PeerJob {
  readonly id: string
  readonly body: string
}
const postSigned = async (job: PeerJob) => {
  const timestamp = Math.floor(Date.now() / 1000)
  const signature = sign(null, WebhookSignature.signedContent(job.id, timestamp, job.body), privateKey)
  const response = await fetch(`${receiver}/hooks`, {
    method: "POST",
    body: job.body,
    redirect: "manual",
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    headers: {
      "content-type": "application/json",
      "idempotency-key": job.id,
      "webhook-id": job.id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": WebhookSignature.formatSignature(signature)
    }
  })
  await response.arrayBuffer()
  if (response.status < 200 || response.status >= 300) throw new Error(`receiver answered ${response.status}`)
}
const peerJobs = (count: number): Array<PeerJob> => Array.from({ length: count }, () => ({ id: randomUUID(), body }))

/** pg-boss 12: `work` with `batchSize` (its documented way to fetch many jobs per poll), 10 local workers. */
const runPgBoss = (jobs: number) =>
  Effect.scoped(Effect.gen(function*() {
    const db = yield* createDatabase
    const boss = yield* Effect.acquireRelease(
      Effect.promise(() => new PgBoss({ connectionString: db.url, max: CONCURRENCY + 2, schedule: false, supervise: false }).start()),
      (b) => Effect.promise(() => b.stop({ graceful: false, close: true }))
    )
    yield* Effect.promise(() => boss.createQueue("bench"))
    for (let i = 0; i < jobs; i += 1_000) {
      yield* Effect.promise(() => boss.insert("bench", peerJobs(Math.min(1_000, jobs - i)).map((data) => ({ data }))))
    }
    const sql = yield* connect(db.url, { maxConnections: 1 })
    if (mode === "http") yield* resetReceiver
    const started = startClock(db.url)
    yield* Effect.promise(() =>
      boss.work<PeerJob>(
        "bench",
        { batchSize: 100, localConcurrency: CONCURRENCY, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
        // Each of the 10 local workers sends its batch one job after another: 10 requests in flight.
        mode === "noop" ? async () => {} : async (batch) => {
          for (const job of batch) await postSigned(job.data)
        }
      )
    )
    const figures = yield* awaitDrained(
      jobs,
      Effect.map(
        sql<{ left: boolean }>`SELECT EXISTS (SELECT 1 FROM pgboss.job WHERE name = 'bench' AND state <> 'completed') AS left`,
        (r) => r[0]!.left
      ),
      started
    )
    if (mode === "http") yield* checkReceiver(jobs)
    return figures
  }))

/** graphile-worker 0.18: `localQueue` and batched completion, as its performance page configures it. */
const runGraphileWorker = (jobs: number) =>
  Effect.scoped(Effect.gen(function*() {
    const db = yield* createDatabase
    const logger = new GraphileLogger(() => () => {})
    const preset = {
      worker: {
        connectionString: db.url,
        concurrentJobs: CONCURRENCY,
        maxPoolSize: CONCURRENCY + 1,
        pollInterval: 500,
        localQueue: { size: 500 },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0
      }
    }
    const utils = yield* Effect.acquireRelease(
      Effect.promise(() => makeWorkerUtils({ connectionString: db.url, logger, preset })),
      (u) => Effect.promise(async () => u.release())
    )
    yield* Effect.promise(() => utils.migrate())
    for (let i = 0; i < jobs; i += 1_000) {
      yield* Effect.promise(() =>
        utils.addJobs(peerJobs(Math.min(1_000, jobs - i)).map((payload) => ({ identifier: "bench", payload })))
      )
    }
    const sql = yield* connect(db.url, { maxConnections: 1 })
    if (mode === "http") yield* resetReceiver
    const started = startClock(db.url)
    yield* Effect.acquireRelease(
      Effect.promise(() =>
        runGraphile({
          noHandleSignals: true,
          logger,
          preset,
          taskList: { bench: mode === "noop" ? async () => {} : async (payload) => postSigned(payload as PeerJob) }
        })
      ),
      (runner) => Effect.promise(() => runner.stop())
    )
    const figures = yield* awaitDrained(
      jobs,
      Effect.map(sql<{ left: boolean }>`SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs) AS left`, (r) => r[0]!.left),
      started
    )
    if (mode === "http") yield* checkReceiver(jobs)
    return figures
  }))

const runs = { ours: runOurs, pgboss: runPgBoss, graphile: runGraphileWorker }

const program = Effect.gen(function*() {
  const run = runs[queue]
  if (run === undefined || (mode !== "noop" && mode !== "http")) return yield* Effect.dieMessage(`unknown run ${queue} ${mode}`)
  if (queue !== "ours" && body === "") return yield* Effect.dieMessage("BENCH_BODY is not set")
  // Untimed runs first, each as large as asked and in a database of its own, so that the timed runs meet code the
  // JIT has compiled: the run lines print what the JIT thread still spent per job.
  for (let i = 0; i < WARMUP_RUNS; i++) yield* run(WARMUP)
  console.log(JSON.stringify({ ready: true, body }))
  const commands = createInterface({ input: process.stdin })[Symbol.asyncIterator]()
  while ((yield* Effect.promise(() => commands.next())).value === "run") {
    const f = yield* run(JOBS)
    const perJob = (s: number) => Math.round((s * 1e6) / JOBS)
    console.error(
      `  ${`${queue} ${mode}`.padEnd(14)} ${String(Math.round(f.rate)).padStart(6)} jobs/s  (${f.wall.toFixed(2)} s; CPU µs per job: ` +
        `worker ${perJob(f.workerCpu)} (JIT ${perJob(f.jitCpu)}), PostgreSQL ${perJob(f.postgresCpu)}` +
        (mode === "http" ? `, receiver ${perJob(f.receiverCpu)})` : ")")
    )
    console.log(JSON.stringify({ figures: f }))
  }
  console.log(JSON.stringify({ rss_mb: peakRssMb("self") }))
}).pipe(
  Effect.provideService(PgCluster, { url: env("BENCH_CLUSTER_URL"), port: Number(env("BENCH_CLUSTER_PORT")), external: true })
)

await Effect.runPromise(program)
// pg-boss and graphile-worker may leave timers behind after stopping.
process.exit(0)
