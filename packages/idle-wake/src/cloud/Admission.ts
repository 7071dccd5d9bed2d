import { LimitStoreLive, type LimiterReason, recordLimiterRefusal } from "@delivery/core"
import { RateLimiter } from "@effect/experimental"
import { Duration, Effect, Layer, type Scope } from "effect"
import { CloudSettingsTag } from "./CloudConfig.ts"
import type { WakeRefusalReason } from "./CloudDomain.ts"

// Spec 001's admission bounds for requests to stacks that are not awake: "Cloud API admission is explicitly bounded
// per process". Waiting slots and pending preparations are counters in this process (each is released exactly once,
// by a scope finalizer); the four budgets are RateLimiter windows, in the process's memory store unless a shared
// store is provided (one budget across processes). Forwarded traffic to awake stacks never touches any of this.

/** A refusal before anything was forwarded: its reason and the whole seconds to wait. */
export interface AdmissionRefusal {
  readonly reason: WakeRefusalReason
  readonly retryAfter: number
}

/** How long to wait after a refusal whose cause is capacity, not a window: roughly one held request's turn. */
export const CAPACITY_RETRY_AFTER = 5

const TEN_MINUTES = Duration.minutes(10)

/** The refusals that are admission bounds (budgets and capacity), as `delivery_limiter_refusals_total` names them. */
const LIMITER_REASONS: Partial<Record<WakeRefusalReason, LimiterReason>> = {
  "source-request-budget": "wake-source-request-budget",
  "source-wake-budget": "wake-source-wake-budget",
  "stack-wake-budget": "wake-stack-wake-budget",
  "wake-budget": "wake-budget",
  "waiting-full": "wake-waiting-full",
  "stack-waiting-full": "wake-stack-waiting-full",
  "source-waiting-full": "wake-source-waiting-full",
  "preparations-full": "wake-preparations-full"
}

const seconds = (duration: Duration.Duration) => Math.max(1, Math.ceil(Duration.toMillis(duration) / 1000))

export interface AdmissionCounters {
  readonly waiting: number
  readonly waitingStacks: number
  readonly preparations: number
  readonly admitted: number
  readonly wakesStarted: number
  readonly refusals: Readonly<Record<string, number>>
}

export class Admission extends Effect.Service<Admission>()("@delivery/idle-wake/Admission", {
  effect: Effect.gen(function* () {
    const settings = (yield* CloudSettingsTag).admission
    const limiter = yield* RateLimiter.RateLimiter

    let waiting = 0
    const waitingByStack = new Map<string, number>()
    const waitingBySource = new Map<string, number>()
    let preparations = 0
    let admitted = 0
    let wakesStarted = 0
    const refusals = new Map<string, number>()

    const bump = (map: Map<string, number>, key: string, by: number) => {
      const next = (map.get(key) ?? 0) + by
      if (next <= 0) map.delete(key)
      else map.set(key, next)
    }

    const refuse = (reason: WakeRefusalReason, retryAfter: number) =>
      Effect.fail<AdmissionRefusal>({ reason, retryAfter })

    /** One fixed window of `limit` per `window` and key; an exceeded window is the refusal with its reset time. */
    const budget = (key: string, limit: number, window: Duration.Duration, reason: WakeRefusalReason) =>
      limiter.consume({ algorithm: "fixed-window", onExceeded: "fail", window, limit, key }).pipe(
        Effect.asVoid,
        Effect.catchAll((error) =>
          // A store that cannot answer fails closed: these budgets protect provider starts and availability.
          refuse(reason, error.reason === "Exceeded" ? seconds(error.retryAfter) : CAPACITY_RETRY_AFTER))
      )

    /** The source request budget: every request to a stack that is not awake counts, known key or not. */
    const requestBudget = (source: string) =>
      budget(`idle-wake:source-requests:${source}`, settings.sourceRequestsPerMinute, Duration.minutes(1), "source-request-budget")

    /**
     * A waiting slot for the life of the scope: at most `waitingMax` held requests, `waitingPerStack` per stack and
     * `waitingPerSource` per source. Released exactly once when the request stops waiting, whatever the outcome.
     */
    const hold = (stack: string, source: string): Effect.Effect<void, AdmissionRefusal, Scope.Scope> =>
      Effect.uninterruptible(Effect.suspend(() => {
        if (waiting >= settings.waitingMax) return refuse("waiting-full", CAPACITY_RETRY_AFTER)
        if ((waitingByStack.get(stack) ?? 0) >= settings.waitingPerStack) return refuse("stack-waiting-full", CAPACITY_RETRY_AFTER)
        if ((waitingBySource.get(source) ?? 0) >= settings.waitingPerSource) return refuse("source-waiting-full", CAPACITY_RETRY_AFTER)
        waiting += 1
        bump(waitingByStack, stack, 1)
        bump(waitingBySource, source, 1)
        admitted += 1
        return Effect.addFinalizer(() =>
          Effect.sync(() => {
            waiting -= 1
            bump(waitingByStack, stack, -1)
            bump(waitingBySource, source, -1)
          }))
      }))

    /**
     * The three wake budgets, consumed only by a request whose key matched the stored receipt (unknown inputs never
     * consume provider-start quota) and only when it starts a new wake (joining one in flight costs nothing). Consumed
     * in order source, stack, aggregate: a refusal by a later one has spent the earlier ones.
     */
    const wakeBudget = (stack: string, source: string) =>
      // The source's own budget first: a source that is refused spends nothing of the stack's or everyone's.
      budget(`idle-wake:source-wakes:${source}`, settings.sourceWakesPer10Minutes, TEN_MINUTES, "source-wake-budget").pipe(
        Effect.zipRight(budget(`idle-wake:stack-wakes:${stack}`, settings.stackWakesPerHour, Duration.hours(1), "stack-wake-budget")),
        Effect.zipRight(budget("idle-wake:wakes", settings.wakesPerMinute, Duration.minutes(1), "wake-budget"))
      )

    /**
     * A pending provider preparation: taken when a wake starts, given back only when the preparation settles (a
     * timed-out one stays counted until then). Answers the release, to be run exactly once.
     */
    const preparation = Effect.suspend(() => {
      if (preparations >= settings.preparationsMax) return refuse("preparations-full", CAPACITY_RETRY_AFTER)
      preparations += 1
      let released = false
      return Effect.succeed(Effect.sync(() => {
        if (released) return
        released = true
        preparations -= 1
      }))
    })

    const refused = (reason: WakeRefusalReason) => {
      const limiter = LIMITER_REASONS[reason]
      const count = Effect.sync(() => bump(refusals, reason, 1))
      return limiter === undefined ? count : Effect.zipRight(count, recordLimiterRefusal(limiter))
    }

    /** A wake this process claimed and started (what the operator view counts as a provider start). */
    const started = Effect.sync(() => {
      wakesStarted += 1
    })

    const counters = Effect.sync((): AdmissionCounters => ({
      waiting,
      waitingStacks: waitingByStack.size,
      preparations,
      admitted,
      wakesStarted,
      refusals: Object.fromEntries([...refusals].sort(([a], [b]) => a.localeCompare(b)))
    }))

    return { requestBudget, hold, wakeBudget, preparation, refused, started, counters, readinessWait: settings.readinessWait } as const
  })
}) {}

/**
 * The budgets in the process's limit store: memory (spec 001: "bounded per process"), or Redis so that every cloud
 * process shares one budget. A shared store that cannot answer refuses with Retry-After (fail closed): the budgets
 * bound provider starts and their cost. The waiting and preparation bounds stay counters of this process.
 */
export const AdmissionLive = Admission.Default.pipe(Layer.provide(RateLimiter.layer), Layer.provide(LimitStoreLive))
