import { RateLimiter } from "@effect/experimental"
import { BunContext } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { runMigrations, WorkerRegistry } from "@delivery/core"
import { HttpSenderLive, noopSender, Outbox, OutboxSettings, outboxWorkerLayer, type SignRequest } from "@delivery/outbox"
import { KeyId, KeySource, privateKeyFromSeed, ProjectId, RawPublicKey, rawPublicKey, Signer, TenantId } from "@delivery/signer"
import { createDatabase, PgCluster } from "@delivery/testing"
import { Context, Effect, Layer, Redacted } from "effect"
import { createInterface } from "node:readline"
import { databasePool } from "../../packages/backend/src/Database.ts"
import { peakRssMb } from "./cpu.ts"
import {
  awaitDrained,
  checkReceiver,
  CONCURRENCY,
  env,
  JOBS,
  mode,
  payload,
  queue,
  receiver,
  REQUEST_TIMEOUT_MS,
  resetReceiver,
  seed,
  startClock,
  WARMUP,
  WARMUP_RUNS
} from "./outboxMeasure.ts"
import { runGraphileWorker, runPgBoss } from "./outboxPeers.ts"

// One queue of the outbox bench in a process of its own, so that its CPU and its peak RSS are its
// own: `bun --no-env-file scripts/bench/outboxRun.ts <ours|pgboss|graphile> <noop|http>`, started by
// scripts/bench/outbox.ts, which has the queues take turns. Untimed warm-up runs first, then
// `{"ready":true,"body":…}` on stdout (body: the signed envelope ours delivers, which the peers then carry and
// POST); then each `run` line on stdin starts one timed run in a fresh database of the cluster at
// BENCH_CLUSTER_URL and answers `{"figures":RunFigures}`, and `end` answers `{"rss_mb":…}` and exits.
// Progress goes to stderr.
//
// Environment: BENCH_CLUSTER_URL, BENCH_CLUSTER_PORT, BENCH_JOBS, BENCH_WARMUP (jobs per untimed run),
// BENCH_WARMUP_RUNS, BENCH_CONCURRENCY, BENCH_CLAIMERS (our claim loops, sharing the concurrency); in http mode BENCH_RECEIVER (base URL) and BENCH_RECEIVER_PID; for the
// peers BENCH_BODY (the body each job carries).

// Our concurrency = claim loops x deliveries in flight each; each loop claims up to 100 rows per query.
const CLAIMERS = Number(env("BENCH_CLAIMERS"))
const tenant = TenantId.make("bench")
const project = ProjectId.make("web")

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
    payload.body = sample!.envelope
    yield* sql`VACUUM ANALYZE outbox_messages`
    yield* sql`VACUUM ANALYZE outbox_envelopes`

    const sender = mode === "noop"
      ? noopSender
      : HttpSenderLive.pipe(Layer.provide(Layer.succeed(Signer, signer)), Layer.provide(KeySource.layerMemory([{ tenant, keyId: KeyId.make("k1"), seed }])))
    const worker = outboxWorkerLayer.pipe(
      // As the backend runs it without a span exporter (OTEL_EXPORTER_OTLP_ENDPOINT unset): tracing off.
      Layer.provide(Layer.setTracerEnabled(false)),
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

const runs = { ours: runOurs, pgboss: runPgBoss, graphile: runGraphileWorker }

const program = Effect.gen(function*() {
  const run = runs[queue]
  if (run === undefined || (mode !== "noop" && mode !== "http")) return yield* Effect.dieMessage(`unknown run ${queue} ${mode}`)
  if (queue !== "ours" && payload.body === "") return yield* Effect.dieMessage("BENCH_BODY is not set")
  // Untimed runs first, each as large as asked and in a database of its own, so that the timed runs meet code the
  // JIT has compiled: the run lines print what the JIT thread still spent per job.
  for (let i = 0; i < WARMUP_RUNS; i++) yield* run(WARMUP)
  console.log(JSON.stringify({ ready: true, body: payload.body }))
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
