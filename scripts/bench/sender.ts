import { ProviderHttp } from "@delivery/core"
import { httpSender, OutboxSender, OutboxSettings, type Send, WebhookSignature, WebhookSigner } from "@delivery/outbox"
import { KeyId, KeySource, privateKeyFromSeed, Signer, TenantId } from "@delivery/signer"
import { Effect, Layer } from "effect"
import { randomUUID, sign } from "node:crypto"
import type { ClaimedRow } from "../../packages/outbox/src/DeliveryRepo.ts"
import { deliverInLanes } from "../../packages/outbox/src/Lanes.ts"
import { selfCpu } from "./cpu.ts"
import { median } from "./median.ts"
import { startReceiver } from "./outbox.ts"

// `bun run bench sender [--json]`: the CPU one webhook delivery costs in this process, our send path against a bare
// one, alternating in the same process so that the machine's changing speed falls on both alike. Ours is the
// outbox's own lanes (packages/outbox/src/Lanes.ts: each attempt's span) over the shipped sender (webhook signature by
// the tenant's key, the provider adapter, its span and histogram); bare is what the outbox bench's peers run per
// job (scripts/bench/outboxRun.ts): one Ed25519 signature and one `fetch` with the same headers, an
// `AbortSignal.timeout`, the body read. Both send 10 at a time to the bench's receiver process
// (scripts/bench/receiver.ts) over keep-alive. The difference is what our path adds around each request; claims and
// outcome writes are not in it (the outbox bench measures those).

export interface SenderBenchOptions {
  readonly log: (line: string) => void
}

export interface SenderBenchResult {
  readonly bench: "sender"
  /** Median over the rounds of our CPU per delivery, µs (this process: every thread). */
  readonly ours_us: number
  readonly bare_us: number
  readonly overhead_us: number
}

const DELIVERIES = Number(process.env.BENCH_SENDER_DELIVERIES ?? 10_000)
const ROUNDS = 5
const CONCURRENCY = 10
const REQUEST_TIMEOUT_MS = 10_000
const tenant = TenantId.make("bench")
const keyId = KeyId.make("k1")
const seed = new Uint8Array(32).fill(7)
const body = JSON.stringify({ bench: "x".repeat(400) })

// The sender reads each batch's active key from the Signer once per batch (one statement per 100 deliveries in the
// worker); here a Signer that knows one active key stands in for the database.
const oneActiveKey = Layer.succeed(Signer, { keys: () => Effect.succeed([{ keyId, state: "active" }]) } as unknown as Signer)

const sender = httpSender.pipe(
  Layer.provide(WebhookSigner.Default),
  Layer.provide(ProviderHttp.ProviderHttp.layerFetch),
  Layer.provide(KeySource.layerMemory([{ tenant, keyId, seed }])),
  Layer.provide(oneActiveKey),
  Layer.provide(OutboxSettings.fromMap({ OUTBOX_REQUEST_TIMEOUT: `${REQUEST_TIMEOUT_MS} millis` }))
)

const ours = (send: Send, endpoint: string) =>
  Effect.suspend(() => {
    const rows = Array.from({ length: DELIVERIES }, (): ClaimedRow => ({
      id: randomUUID(), tenant, project: "web", attempt: 1, attempt_ceiling: 10, envelope: body, endpoint
    }))
    let delivered = 0
    return Effect.map(
      deliverInLanes(send, rows, CONCURRENCY, (_, outcome) => {
        if (outcome._tag === "Delivered") delivered++
      }),
      () => delivered
    )
  })

const privateKey = privateKeyFromSeed(seed)
const bare = (endpoint: string) =>
  Effect.promise(async () => {
    let next = 0
    let delivered = 0
    const lane = async () => {
      while (next < DELIVERIES) {
        next++
        const id = randomUUID()
        const timestamp = Math.floor(Date.now() / 1000)
        const signature = sign(null, WebhookSignature.signedContent(id, timestamp, body), privateKey)
        const response = await fetch(endpoint, {
          method: "POST",
          body,
          redirect: "manual",
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
          headers: {
            "content-type": "application/json",
            "idempotency-key": id,
            "webhook-id": id,
            "webhook-timestamp": String(timestamp),
            "webhook-signature": WebhookSignature.formatSignature(signature)
          }
        })
        await response.arrayBuffer()
        if (response.status >= 200 && response.status < 300) delivered++
      }
    }
    await Promise.all(Array.from({ length: CONCURRENCY }, lane))
    return delivered
  })

/** CPU µs per delivery of one run; every delivery must have been acknowledged. */
const cpuPerDelivery = <E>(name: string, run: Effect.Effect<number, E>) =>
  Effect.gen(function*() {
    const before = selfCpu()
    const delivered = yield* run
    const cpu = selfCpu() - before
    if (delivered !== DELIVERIES) return yield* Effect.dieMessage(`${name}: ${delivered} of ${DELIVERIES} delivered`)
    return (cpu * 1e6) / DELIVERIES
  })

const round1 = (n: number) => Math.round(n * 10) / 10

export const runSenderBench = (options: SenderBenchOptions): Effect.Effect<SenderBenchResult, unknown> =>
  Effect.scoped(Effect.gen(function*() {
    const receiver = yield* startReceiver
    const endpoint = `${receiver.url}/hooks`
    const send = yield* Effect.flatMap(OutboxSender, (s) => s.forBatch(new Set([tenant]))).pipe(Effect.provide(sender))
    options.log(`receiver pid ${receiver.pid}; ${DELIVERIES} deliveries per run, ${CONCURRENCY} at a time, ${ROUNDS} rounds after a warm-up of each`)
    yield* ours(send, endpoint)
    yield* bare(endpoint)
    const oursUs: Array<number> = []
    const bareUs: Array<number> = []
    for (let i = 0; i < ROUNDS; i++) {
      oursUs.push(yield* cpuPerDelivery("ours", ours(send, endpoint)))
      bareUs.push(yield* cpuPerDelivery("bare", bare(endpoint)))
      options.log(`round ${i + 1}: ours ${round1(oursUs[i]!)} µs, bare ${round1(bareUs[i]!)} µs of CPU per delivery`)
    }
    const result: SenderBenchResult = {
      bench: "sender",
      ours_us: round1(median(oursUs)),
      bare_us: round1(median(bareUs)),
      overhead_us: round1(median(oursUs) - median(bareUs))
    }
    options.log(`medians: ours ${result.ours_us} µs, bare ${result.bare_us} µs; ours adds ${result.overhead_us} µs per delivery`)
    return result
  })).pipe(
    // As the backend runs without a span exporter (OTEL_EXPORTER_OTLP_ENDPOINT unset): tracing off.
    Effect.withTracerEnabled(false)
  )
