import { RateLimiter } from "@effect/experimental"
import { leaseDeadline, LimitStoreLive, ProviderHttp, recordLimiterRefusal, workerLayer } from "@delivery/core"
import { KeySource, type TenantId } from "@delivery/signer"
import { Clock, Duration, Effect, Either, Exit, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import { type Decision, interrupted } from "./Delivery.ts"
import { takeUpTo } from "./DeliveryRate.ts"
import { deliverInLanes } from "./Lanes.ts"
import { OutboxSettings, type Settings } from "./OutboxConfig.ts"
import { type ClaimedRow, DeliveryRepo } from "./DeliveryRepo.ts"
import { makeRecorder } from "./Recorder.ts"
import { httpSender, OutboxSender } from "./Sender.ts"
import { WebhookSigner } from "./WebhookSignature.ts"

export interface TickResult {
  readonly claimed: number
  readonly delivered: number
  readonly retried: number
  readonly dead: number
  readonly lost: number
  /** Tenants whose delivery rate is spent at this tick: their rows stay pending and are looked past. */
  readonly rateLimited: number
}

const leaseExpiredOnLastAttempt: Decision = { _tag: "Dead", reason: "attempts-exhausted", code: "lease-expired" }

/** A tenant and how many of its rows a claim may take (the rate tokens consumed for them). */
interface Grant {
  readonly tenant: string
  readonly tokens: number
}

/** How long a claim loop keeps claiming for the tenants it found due before it looks again. */
const PEEK_EVERY_MS = 200

type Recorder = Effect.Effect.Success<ReturnType<typeof makeRecorder>>

/** The spec 000 delivery key: same sync policy as ingest, a key of its own per tenant. */
export const deliveryRateKey = (tenant: string) => `tenant-scheduler-delivery:${tenant}`

/**
 * One delivery cycle, in the order spec 000 asks for: cancellation and rate are checked before a
 * lease is taken, so an exhausted rate leaves rows `pending`; then claim (≤ batch, ≤ 100), deliver
 * within the cycle timeout, and record every outcome with fenced, batched transitions.
 */
export class OutboxDelivery extends Effect.Service<OutboxDelivery>()("@delivery/outbox/OutboxDelivery", {
  dependencies: [DeliveryRepo.Default],
  effect: Effect.gen(function*() {
    const repo = yield* DeliveryRepo
    const sender = yield* OutboxSender
    const store = yield* RateLimiter.RateLimiterStore
    const settings = yield* OutboxSettings
    const { limit, window } = settings.syncPolicy
    // Tenants whose rate is spent, until when (epoch ms): the peek looks past their rows so they
    // cannot starve other tenants, and their rows stay pending.
    const blocked = new Map<string, number>()

    /** Tokens granted (one per envelope to claim): as many as the tenant's window has left, up to `wanted`. */
    const admit = (tenant: string, wanted: number, now: number) =>
      takeUpTo(store, { key: deliveryRateKey(tenant), limit, window, wanted }).pipe(
        Effect.tap(({ exhaustedFor }) =>
          // A spent window is skipped (and looked past) until it resets; its rows stay pending.
          exhaustedFor === undefined
            ? Effect.void
            : Effect.zipRight(
              Effect.sync(() => blocked.set(tenant, now + Duration.toMillis(exhaustedFor))),
              recordLimiterRefusal("outbox-delivery-rate")
            )
        ),
        Effect.map(({ granted }) => granted),
        Effect.catchAll((error) => {
          // A store outage fails closed for this tick: nothing is claimed, nothing is stranded.
          blocked.set(tenant, now + 1_000)
          return Effect.logWarning("outbox delivery rate store unavailable; rows stay pending").pipe(
            Effect.annotateLogs({ tenant, reason: error.reason }),
            Effect.as(0)
          )
        })
      )

    /** The batch's sends (the sender reads its tenants' keys now), all within the cycle timeout. */
    const sendBatch = (rows: ReadonlyArray<ClaimedRow>, recorder: Recorder) =>
      sender.forBatch(new Set(rows.map((row) => row.tenant as TenantId))).pipe(
        Effect.flatMap((send) => deliverInLanes(send, rows, settings.concurrency, recorder.add)),
        Effect.timeout(settings.cycleTimeout)
      )

    // Which tenants each claim loop last found due, after a full batch (the loop goes again at once):
    // the next tick checks their rate and claims again without peeking first. Re-peeked at least every
    // PEEK_EVERY, so other tenants and earlier rows are seen; a short claim or a spent rate ends the
    // plan at once. A batch below the batch size keeps no plan: the next tick peeks and sees every row.
    const plans = new Map<string, { readonly grants: ReadonlyArray<Grant>; readonly until: number }>()

    const peek = (now: number) =>
      Effect.map(
        repo.peekDue({ now: new Date(now), blocked: [...blocked.keys()], limit: settings.batchSize }),
        (due) => due.map(({ due: count, tenant }): Grant => ({ tenant, tokens: count }))
      )

    /** Rate first (spec 000): only what the tenant's delivery rate admits is claimed, at most the batch size. */
    const admitAll = (wanted: ReadonlyArray<Grant>, now: number) =>
      Effect.gen(function*() {
        const grants: Array<Grant> = []
        let budget = settings.batchSize
        for (const { tenant, tokens: count } of wanted) {
          // Stryker disable next-line ConditionalExpression: peeked and planned counts add up to at most the batch size, so the budget never runs out before the last tenant
          if (budget === 0) break
          const tokens = blocked.has(tenant) ? 0 : yield* admit(tenant, Math.min(count, budget), now)
          if (tokens > 0) grants.push({ tenant, tokens })
          // Stryker disable next-line AssignmentOperator: the counts add up to at most the batch size, so the budget left always covers the next count and `Math.min` never cuts it
          budget -= tokens
        }
        return grants
      })

    const tick = Effect.fn("OutboxDelivery.tick")(function*(owner: string) {
      const now = yield* Clock.currentTimeMillis
      for (const [tenant, until] of blocked) if (until <= now) blocked.delete(tenant)
      const plan = plans.get(owner)
      plans.delete(owner)
      let grants = plan !== undefined && plan.until > now ? yield* admitAll(plan.grants, now) : []
      if (grants.length === 0) grants = yield* admitAll(yield* peek(now), now)
      const rateLimited = blocked.size
      if (grants.length === 0) return { claimed: 0, delivered: 0, retried: 0, dead: 0, lost: 0, rateLimited }

      // From the first claim on, interruption (shutdown) can only reach the deliveries: every
      // claimed row is then recorded, fenced, as an ambiguous attempt, never as delivered.
      return yield* Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          const leaseUntil = yield* leaseDeadline(settings.lease)
          const rows: Array<ClaimedRow> = []
          let full = true
          yield* Effect.gen(function*() {
            for (const grant of grants) {
              const claimed = yield* repo.claim({ tenant: grant.tenant, limit: grant.tokens, now: new Date(now), leaseUntil, owner })
              // Stryker disable next-line AssignmentOperator,ConditionalExpression: grants add up to at most the batch size, so a batch that reaches it had every claim come back full
              full &&= claimed.length === grant.tokens
              rows.push(...claimed)
            }
            yield* Effect.annotateCurrentSpan("delivery.claimed", rows.length)
          }).pipe(Effect.withSpan("OutboxDelivery.claim", { attributes: { "delivery.family": "outbox" } }))
          if (full && rows.length >= settings.batchSize) plans.set(owner, { grants, until: now + PEEK_EVERY_MS })
          const recorder = yield* makeRecorder(repo, settings)
          const sendable: Array<ClaimedRow> = []
          for (const row of rows) {
            // attempt > ceiling: the previous owner's lease expired on the last allowed attempt.
            if (row.attempt > row.attempt_ceiling) recorder.addDecision(row, leaseExpiredOnLastAttempt)
            else sendable.push(row)
          }
          const exit = yield* Effect.exit(restore(sendBatch(sendable, recorder)))
          // Whatever has no outcome (shutdown, cycle timeout) was interrupted: an ambiguous attempt.
          recorder.addUnsettled(sendable, interrupted)
          // At shutdown a failed write must not pass silently (DESIGN: cleanup failure exits non-zero);
          // the rows are still safe, their leases expire and another worker takes them.
          const recorded = yield* (Exit.isInterrupted(exit) ? Effect.orDie(recorder.finish) : recorder.finish)
          return { claimed: rows.length, ...recorded, rateLimited }
        })
      )
    })

    return { tick } as const
  })
}) {}

/** A claim loop: a full batch goes again at once; otherwise, and after a failure, it waits the poll interval. */
const claimLoop = (delivery: OutboxDelivery, index: number) =>
  Effect.gen(function*() {
    const settings = yield* OutboxSettings
    // Shows up as lease_owner: which process and loop holds a row. Never part of the fence.
    const owner = `${hostname().slice(0, 40)}:${process.pid}:${index}:${randomBytes(4).toString("hex")}`
    while (true) {
      const result = yield* Effect.either(delivery.tick(owner))
      if (Either.isLeft(result)) {
        yield* Effect.logWarning("outbox delivery tick failed; waiting for the next one").pipe(
          Effect.annotateLogs({ error: result.left._tag })
        )
      } else if (result.right.claimed >= settings.batchSize) {
        yield* Effect.yieldNow()
        continue
      }
      yield* Effect.sleep(settings.pollInterval)
    }
  })

/** All claim loops of this process. */
export const deliveryLoop = Effect.gen(function*() {
  const delivery = yield* OutboxDelivery
  const { claimers } = yield* OutboxSettings
  yield* Effect.forEach(Array.from({ length: claimers }, (_, i) => i), (i) => claimLoop(delivery, i), {
    concurrency: "unbounded",
    // Stryker disable next-line BooleanLiteral: the claim loops never return, so there is nothing to collect
    discard: true
  })
})

export const WORKER_NAME = "outbox-delivery"

/**
 * The worker with its sender and rate store left open: tests and the benchmark pass a no-op or
 * HTTP sender; a deployment of many processes passes a shared (Redis) `RateLimiterStore`.
 */
export const outboxWorkerLayer = workerLayer(WORKER_NAME, deliveryLoop).pipe(
  Layer.provide(OutboxDelivery.Default)
)

/** The real sender: the provider adapter over fetch, webhook signatures by the tenant's active key. */
export const HttpSenderLive = httpSender.pipe(
  Layer.provide(WebhookSigner.Default),
  Layer.provide(ProviderHttp.ProviderHttp.layerFetch)
)

/**
 * The backend role's worker (`BackendWorkers`): HTTP sender, webhook signatures through the
 * configured key source (the same `KeySource.layerFromConfig` the backend's Signer uses, so one
 * instance), `Signer` from the backend's services, the process's limit store (memory, or Redis shared by every
 * process: one delivery rate per tenant across them; while Redis cannot answer nothing is claimed).
 */
export const outboxWorkerLive = (settings: Settings) =>
  outboxWorkerLayer.pipe(
    Layer.provide(HttpSenderLive),
    Layer.provide(KeySource.layerFromConfig),
    Layer.provide(LimitStoreLive),
    Layer.provide(Layer.succeed(OutboxSettings, settings)),
    // A key list that does not parse already stopped start-up in the Signer: unreachable here.
    Layer.orDie
  )
