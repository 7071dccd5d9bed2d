import { WebhookSignature } from "@delivery/outbox"
import { privateKeyFromSeed } from "@delivery/signer"
import { connect, createDatabase } from "@delivery/testing"
import { Effect } from "effect"
import { makeWorkerUtils, Logger as GraphileLogger, run as runGraphile } from "graphile-worker"
import { randomUUID, sign } from "node:crypto"
import { PgBoss } from "pg-boss"
import {
  awaitDrained,
  checkReceiver,
  CONCURRENCY,
  mode,
  payload,
  receiver,
  REQUEST_TIMEOUT_MS,
  resetReceiver,
  seed,
  startClock
} from "./outboxMeasure.ts"

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
const peerJobs = (count: number): Array<PeerJob> => Array.from({ length: count }, () => ({ id: randomUUID(), body: payload.body }))

/** pg-boss 12: `work` with `batchSize` (its documented way to fetch many jobs per poll), 10 local workers. */
export const runPgBoss = (jobs: number) =>
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
export const runGraphileWorker = (jobs: number) =>
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
