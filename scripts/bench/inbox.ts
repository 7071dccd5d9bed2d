import { Context, Effect, Either, Layer, Redacted, Schedule, Schema } from "effect"
import { spawn } from "node:child_process"
import { generateKeyPairSync, type KeyObject } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DeviceId, Email, Identity, TenantId } from "@delivery/identity"
import { decodeUnsignedEnvelope, KeyId, KeySource, RawPublicKey, rawPublicKey, Signer, signEnvelope } from "@delivery/signer"
import { freePort, MigratedDatabase, PgCluster, startCluster, TestDatabase } from "@delivery/testing"
import { childrenOf, describeCpu, listensOn, machineBusyCpu, measure, peakRssMb, postgresCpu, processCpu, reapedChildrenCpu, selfCpu } from "./cpu.ts"
import { type PgbenchMode, runPgbench } from "./pgbench.ts"

export interface InboxBenchOptions {
  /** Seconds per measured run at 1 client; at 10, ours and pgbench -M prepared take turns of half this (at least 2 s), five each (pgbench -M extended runs at most 4). */
  readonly seconds: number
  /** fsync and synchronous_commit for the one cluster both sides share. */
  readonly fsync: boolean
  /** Backend processes: 1 starts one; N > 1 starts the backend with WORKERS=N (a supervisor and N processes on one port). */
  readonly processes: number
  readonly log: (line: string) => void
}

export interface InboxBenchResult {
  readonly bench: "inbox"
  readonly ours_c1: number
  readonly pgbench_c1: number
  /** Over the rounds at 10 producers: ours, all rounds' accepted envelopes over their time; pgbench, the mean tps. */
  readonly ours_c10: number
  readonly pgbench_c10: number
  /** The median of the rounds' ratios (ours over pgbench -M prepared, taking turns). */
  readonly ratio_c10: number
  /** Peak RSS (VmHWM) over the backend processes that served, in MB: the largest one. */
  readonly rss_mb: number
  readonly processes: number
}

const repoRoot = new URL("../../", import.meta.url).pathname
const round = (n: number) => Math.round(n * 10) / 10
// Turns of ours and pgbench at 10 producers (odd, so the median is one round's ratio).
const C10_ROUNDS = 5

// Extra flags for the backend's bun, e.g. BENCH_BACKEND_FLAGS="--cpu-prof-md --cpu-prof-dir=/tmp/prof" to profile it.
const backendFlags = (process.env.BENCH_BACKEND_FLAGS ?? "").split(" ").filter(Boolean)

// The heap sizing `bun run start` gives the backend unless its environment sets one (package.json's start script;
// docs/operations.md, "Memory"), so the bench measures the process as shipped.
const shippedRamSize = /BUN_JSC_forceRAMSize:-(\d+)/.exec(
  (JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { scripts: { start: string } }).scripts.start
)?.[1]

// Each backend process has its own pool of DATABASE_POOL_MAX connections; the cluster allows 100.
const POOL_PER_PROCESS = 10

/**
 * A real backend started as `bun run start` starts it (`bun --no-env-file packages/backend/src/start.ts`: the bundle
 * of main.ts, built on first use), stopped with SIGTERM. With processes > 1 it
 * runs with WORKERS=N: the started process supervises N backend processes listening on one port.
 */
const startBackend = (databaseUrl: string, port: number, processes: number) =>
  Effect.acquireRelease(
    Effect.sync(() =>
      spawn(process.execPath, [...backendFlags, "--no-env-file", join(repoRoot, "packages/backend/src/start.ts")], {
        cwd: repoRoot,
        stdio: ["ignore", "ignore", "inherit"],
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HOME: process.env.HOME ?? "/tmp",
          DATABASE_URL: databaseUrl,
          PORT: String(port),
          PASSWORD_RESET_DELIVERY: "disabled",
          RECEIPT_DELIVERY: "disabled",
          LOG_LEVEL: "warn",
          WORKERS: String(processes),
          DATABASE_POOL_MAX: String(POOL_PER_PROCESS),
          // The bench measures the pipeline, not the limits: both are raised far past what it sends.
          IDENTITY_PEER_LIMIT: "1000000",
          SYNC_INGEST_LIMIT: "1000000000",
          // JavaScriptCore's options (e.g. BUN_JSC_forceRAMSize) and the inbox's settings (e.g. INBOX_INGEST_CONCURRENCY)
          // reach the backend, to try them.
          ...(shippedRamSize === undefined ? {} : { BUN_JSC_forceRAMSize: shippedRamSize }),
          ...Object.fromEntries(Object.entries(process.env).filter(([name]) => name.startsWith("BUN_JSC_") || name.startsWith("INBOX_")))
        }
      })),
    (child) =>
      Effect.async<void>((resume) => {
        if (child.exitCode !== null) return resume(Effect.void)
        child.once("exit", () => resume(Effect.void))
        child.kill("SIGTERM")
      })
  ).pipe(
    // Ready once /health answers: migrations, health check, workers and listener are up.
    Effect.tap((child) =>
      Effect.suspend(() =>
        child.exitCode === null
          ? Effect.tryPromise(() => fetch(`http://127.0.0.1:${port}/health`))
          : Effect.dieMessage(`backend exited with code ${child.exitCode} before it was ready`)
      ).pipe(
        Effect.filterOrFail((response) => response.ok),
        Effect.retry({ schedule: Schedule.spaced("50 millis").pipe(Schedule.upTo("60 seconds")), while: () => true }),
        Effect.orDie
      ))
  ).pipe(
    // The processes that serve: the started one, or the supervisor's N children once each of them listens.
    Effect.flatMap((child) =>
      Effect.suspend(() => {
        if (processes === 1) return Effect.succeed({ child, servers: [child.pid!] })
        const servers = childrenOf(child.pid!)
        return servers.length === processes && servers.every((pid) => listensOn(pid, port))
          ? Effect.succeed({ child, servers })
          : Effect.fail("not yet" as const)
      }).pipe(
        Effect.retry({ schedule: Schedule.spaced("50 millis").pipe(Schedule.upTo("60 seconds")), while: () => true }),
        Effect.orElse(() => Effect.dieMessage(`the backend did not start ${processes} listening processes`))
      ))
  )

/** Signed envelope bodies for one producer stream, sequences 1..count, serialized up front. */
const signedBodies = (tenant: string, producer: string, count: number, privateKey: KeyObject) =>
  Array.from({ length: count }, (_, i) => {
    const unsigned = Either.getOrThrow(decodeUnsignedEnvelope({
      type: "controlplane/v1",
      route: { tenant, project: "website", producer },
      eventId: `${producer}-event-${String(i + 1).padStart(10, "0")}`,
      idempotencyKey: `${producer}:op:${i + 1}`,
      sequence: i + 1,
      keyId: "k1",
      createdAt: "2025-01-15T09:30:00.123Z",
      schemaVersion: 1,
      metadata: { kind: "task.proposed", subject: "task-42", attributes: { title: "Review the plan", priority: "high" } }
    }))
    return JSON.stringify(signEnvelope(unsigned, privateKey))
  })

/** A producer's stream: its bodies in sequence order and the next one to send, so a later run goes on where one stopped. */
interface Stream {
  readonly bodies: ReadonlyArray<string>
  next: number
}
const streamOf = (bodies: ReadonlyArray<string>): Stream => ({ bodies, next: 0 })

/** Sends the stream's next bodies one after another until done or `deadline`; returns how many were accepted (201). */
const producerLoop = async (url: string, token: string, stream: Stream, deadline: number) => {
  let accepted = 0
  while (stream.next < stream.bodies.length) {
    if (performance.now() >= deadline) break
    const body = stream.bodies[stream.next++]!
    const response = await fetch(url, { method: "POST", body, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } })
    await response.arrayBuffer()
    if (response.status === 201) accepted++
    else throw new Error(`unexpected status ${response.status}`)
  }
  return accepted
}

export const runInboxBench = (options: InboxBenchOptions) =>
  Effect.scoped(Effect.gen(function* () {
    const { log, seconds } = options
    const cluster = yield* startCluster({ fsync: options.fsync, maxConnections: 100 })
    const context = yield* Layer.build(
      Layer.mergeAll(Identity.Default, Signer.Default.pipe(Layer.provide(KeySource.layerNone))).pipe(
        Layer.provideMerge(MigratedDatabase),
        Layer.provide(Layer.succeed(PgCluster, cluster))
      )
    )
    const db = Context.get(context, TestDatabase)
    const target = { port: cluster.port, database: db.name }
    log(`cluster on port ${cluster.port} (fsync=${options.fsync ? "on" : "off"}, synchronous_commit=${options.fsync ? "on" : "off"} for both sides)`)

    // One tenant, one account, a device credential per producer, one registered signing key.
    const { privateKey } = generateKeyPairSync("ed25519")
    const tenant = TenantId.make("bench")
    const tokens = yield* Effect.gen(function* () {
      const identity = yield* Identity
      const signer = yield* Signer
      yield* identity.createTenant(tenant)
      const account = yield* identity.createAccount({ tenant, email: Schema.decodeSync(Email)("bench@bench.example") })
      yield* signer.registerKey(tenant, KeyId.make("k1"), RawPublicKey.make(rawPublicKey(privateKey)))
      return yield* Effect.forEach(Array.from({ length: 12 }, (_, i) => i), (i) =>
        Effect.map(identity.issueDeviceCredential({ tenant, account, device: DeviceId.make(`device-${i}`) }), (c) => Redacted.value(c.token)))
    }).pipe(Effect.provide(context))

    const port = yield* freePort
    const { child: backend, servers } = yield* startBackend(db.url, port, options.processes)
    const url = `http://127.0.0.1:${port}/controlplane/v1/envelopes`
    log(
      options.processes === 1
        ? `backend pid ${backend.pid} on port ${port} (pool ${POOL_PER_PROCESS})`
        : `backend supervisor pid ${backend.pid}, WORKERS=${options.processes}: pids ${servers.join(", ")} on port ${port} (pool ${POOL_PER_PROCESS} each)`
    )
    const backendCpu = () => servers.reduce((sum, pid) => sum + processCpu(pid), 0)

    // At 10 producers ours and pgbench take turns, C10_ROUNDS times each for half the run length (at least 2 s):
    // this machine's speed moves by more than the difference between two codes from one minute to the next, and
    // turns put both sides under the same minutes. The ratio is the median of the rounds' ratios.
    const roundSeconds = Math.max(2, Math.round(seconds / 2))
    // Pre-signed bodies: enough for the fastest rate plausible on two cores, so the deadline ends each run.
    const perProducer = (rate: number, producers: number, runSeconds: number) => Math.ceil((rate * runSeconds) / producers)
    const warmup = signedBodies(tenant, "warmup", 1_000, privateKey)
    const c1 = streamOf(signedBodies(tenant, "solo", perProducer(3_000, 1, seconds), privateKey))
    const c10 = Array.from({ length: 10 }, (_, i) =>
      streamOf(signedBodies(tenant, `producer-${i}`, perProducer(6_000, 10, roundSeconds * C10_ROUNDS), privateKey)))
    const envelopeText = warmup[0]!

    yield* Effect.promise(() =>
      Promise.all([0, 1, 2, 3].map((i) => producerLoop(url, tokens[11]!, streamOf(warmup.slice(i * 250, (i + 1) * 250)), Infinity))))

    const oursProbes = { client: selfCpu, backend: backendCpu, postgres: () => postgresCpu(cluster.port), machine: machineBusyCpu }
    const pgProbes = { pgbench: reapedChildrenCpu, postgres: () => postgresCpu(cluster.port), machine: machineBusyCpu }
    const scriptDir = mkdtempSync(join(tmpdir(), "bench-inbox-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(scriptDir, { recursive: true, force: true })))

    const ours = (streams: ReadonlyArray<Stream>, runSeconds: number) =>
      Effect.promise(() =>
        measure(oursProbes, async () => {
          const deadline = performance.now() + runSeconds * 1000
          const counts = await Promise.all(streams.map((stream, i) => producerLoop(url, tokens[i]!, stream, deadline)))
          return counts.reduce((a, b) => a + b, 0)
        }))
    // The JSON figures are pgbench's default mode here, `-M prepared`; `-M extended` (an unnamed statement
    // planned on every execution, as our driver sends them) is printed beside it, over a shorter run.
    const reference = (clients: number, mode: PgbenchMode, runSeconds: number) =>
      Effect.promise(() =>
        measure(pgProbes, async () => runPgbench(target, scriptDir, envelopeText, clients, mode === "prepared" ? runSeconds : Math.min(runSeconds, 4), mode), 500))

    // CPU per accepted envelope (or pgbench transaction), in µs, for the "what limits it" question.
    const perItem = (cpu: Readonly<Record<string, number>>, items: number) =>
      Object.entries(cpu).filter(([name]) => name !== "machine").map(([name, s]) => `${name} ${Math.round((s * 1e6) / items)}`).join(", ")
    const report = (label: string, run: { result: number; wall: number; cpu: Readonly<Record<string, number>> }, rate: number, unit: string) =>
      log(`${label}: ${round(rate)} ${unit}  (cpu ${describeCpu(run.cpu, run.wall)}; µs per item: ${perItem(run.cpu, rate * run.wall)})`)

    const oursC1 = yield* ours([c1], seconds)
    report("ours    c1 ", oursC1, oursC1.result / oursC1.wall, "accepted envelopes/s")
    const pgC1 = yield* reference(1, "prepared", seconds)
    report("pgbench c1  -M prepared", pgC1, pgC1.result, "tx/s")
    const pgC1Extended = yield* reference(1, "extended", seconds)
    report("pgbench c1  -M extended", pgC1Extended, pgC1Extended.result, "tx/s")
    const rounds: Array<{ readonly ours: number; readonly wall: number; readonly pgbench: number }> = []
    for (let i = 1; i <= C10_ROUNDS; i++) {
      const oursC10 = yield* ours(c10, roundSeconds)
      report(`ours    c10 (round ${i})`, oursC10, oursC10.result / oursC10.wall, "accepted envelopes/s")
      const pgC10 = yield* reference(10, "prepared", roundSeconds)
      report(`pgbench c10 -M prepared (round ${i})`, pgC10, pgC10.result, "tx/s")
      rounds.push({ ours: oursC10.result, wall: oursC10.wall, pgbench: pgC10.result })
    }
    const pgC10Extended = yield* reference(10, "extended", seconds)
    report("pgbench c10 -M extended", pgC10Extended, pgC10Extended.result, "tx/s")
    const ratios = rounds.map((r) => r.ours / r.wall / r.pgbench).sort((a, b) => a - b)
    const oursC10Rate = rounds.reduce((sum, r) => sum + r.ours, 0) / rounds.reduce((sum, r) => sum + r.wall, 0)
    const pgC10Rate = rounds.reduce((sum, r) => sum + r.pgbench, 0) / rounds.length

    // Read while the processes still run: VmHWM is each one's peak over the whole bench.
    const peaks = servers.map((pid) => peakRssMb(pid))
    log(`backend peak RSS: ${peaks.map((mb) => `${mb} MB`).join(", ")} (VmHWM${servers.length > 1 ? " per process" : ""})`)
    const result: InboxBenchResult = {
      bench: "inbox",
      ours_c1: round(oursC1.result / oursC1.wall),
      pgbench_c1: round(pgC1.result),
      ours_c10: round(oursC10Rate),
      pgbench_c10: round(pgC10Rate),
      ratio_c10: Math.round(ratios[Math.floor(ratios.length / 2)]! * 1000) / 1000,
      rss_mb: Math.max(...peaks),
      processes: options.processes
    }
    const ratio = (a: number, b: number) => Math.round((a / b) * 1000) / 1000
    log(`ratio c10 per round: ${ratios.map((r) => Math.round(r * 1000) / 1000).join(", ")} (sorted; the median is the JSON's ratio_c10)`)
    log(`ratio c1 = ${ratio(result.ours_c1, result.pgbench_c1)}, ratio c10 = ${result.ratio_c10} (ours / pgbench -M prepared; the JSON's figures)`)
    log(`ratio c1 = ${ratio(result.ours_c1, pgC1Extended.result)}, ratio c10 = ${ratio(result.ours_c10, pgC10Extended.result)} (ours / pgbench -M extended)`)
    return result
  }))
