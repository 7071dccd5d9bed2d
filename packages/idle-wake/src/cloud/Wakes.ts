import { Clock, Deferred, Duration, Effect, FiberId, FiberSet, Option } from "effect"
import { pollUntil } from "./Poll.ts"
import type { StackId } from "../Domain.ts"
import { Admission, type AdmissionRefusal } from "./Admission.ts"
import { CloudStacksRepo, type StackRow } from "./CloudStacksRepo.ts"
import { ComputeProvider } from "./ComputeProvider.ts"
import { Routing } from "./Routing.ts"

// One bounded wake per stack (spec 001: "coalesces a bounded wake, waits for tenant readiness, refreshes routing").
// In this process every request for a stack joins the one wake in flight; across processes the database claim
// (state waking, wake_attempt + 1, a lease) makes one process the waker and the others follow its outcome. A wake
// runs in the service's own fibers, not in a request's: a request that stops waiting (its bound, its client gone)
// never cancels it, and "a timed-out provider preparation remains coalesced until it actually settles".

export type WakeResult =
  | { readonly _tag: "Awake"; readonly upstream: string }
  | { readonly _tag: "Failed"; readonly code: string }
  | { readonly _tag: "Refused"; readonly refusal: AdmissionRefusal }
  | { readonly _tag: "NoMatch" }

export interface WakeMatch {
  /** The stored receipt's challenge: the exact cycle the caller matched against. */
  readonly challenge: string
  /** The presented key's fingerprint in that cycle, for a key wake. */
  readonly fingerprint: string | null
  /** The connector instance of a broker event, for an event wake. */
  readonly connectorInstance: string | null
}

const READINESS_POLL = Duration.millis(100)
const FOLLOW_POLL = Duration.millis(200)
/** A wake's lease outlives the readiness bound (by this, or the bound again if shorter), so that its waker records the outcome itself. */
const LEASE_MARGIN = Duration.seconds(30)

export class Wakes extends Effect.Service<Wakes>()("@delivery/idle-wake/Wakes", {
  scoped: Effect.gen(function* () {
    const repo = yield* CloudStacksRepo
    const compute = yield* ComputeProvider
    const admission = yield* Admission
    const routing = yield* Routing
    const fibers = yield* FiberSet.make()
    const inFlight = new Map<string, Deferred.Deferred<WakeResult>>()
    const readinessWait = admission.readinessWait
    const leaseMs = Duration.toMillis(readinessWait) + Math.min(Duration.toMillis(LEASE_MARGIN), Duration.toMillis(readinessWait))

    /** Polls readiness until it answers or the bound from `since` passes. */
    const awaitReady = (stack: StackId, upstream: string, since: number) =>
      pollUntil(Effect.map(compute.readiness(stack, { upstream }), (ready) => (ready ? true : undefined)), READINESS_POLL).pipe(
        Effect.timeoutOption(Duration.millis(Math.max(0, since + Duration.toMillis(readinessWait) - Date.now()))),
        Effect.map((ready) => Option.getOrElse(ready, () => false))
      )

    /** The waker's work: prepare (unbounded: the provider settles it), readiness, then the fenced outcome. */
    const run = (stack: StackId, attempt: number, correlationId: string) =>
      Effect.gen(function* () {
        const since = yield* Clock.currentTimeMillis
        /** The failure recorded fenced; compute the provider still finds running leaves the stack stop-uncertain. */
        const failed = (code: string) =>
          Effect.flatMap(compute.status(stack), (status) =>
            Effect.as(repo.wakeFailed(stack, attempt, code, status === "running", correlationId), { _tag: "Failed", code } as WakeResult))
        const prepared = yield* Effect.either(compute.prepare(stack))
        if (prepared._tag === "Left") return yield* failed(prepared.left.code)
        const upstream = prepared.right.upstream
        const ready = yield* awaitReady(stack, upstream, since)
        if (!ready) return yield* failed("readiness-timeout")
        const woke = yield* repo.woke(stack, attempt, upstream, correlationId)
        if (Option.isSome(woke)) return { _tag: "Awake", upstream } as WakeResult
        // Our lease ended and someone else's wake owns the stack now: its outcome is the answer.
        return yield* follow(stack)
      }).pipe(
        Effect.catchAll(() => Effect.succeed<WakeResult>({ _tag: "Failed", code: "storage-unavailable" })),
        Effect.ensuring(routing.changed(stack))
      )

    /** Another process's wake: watch the stack until it is awake or no longer waking, within the readiness bound. */
    const follow = (stack: StackId): Effect.Effect<WakeResult> =>
      pollUntil(Effect.map(repo.get(stack), (row): WakeResult | undefined => {
          if (Option.isNone(row)) return { _tag: "Failed", code: "stack-unknown" }
          const current = row.value
          if (current.state === "awake" && current.upstream !== null) return { _tag: "Awake", upstream: current.upstream }
          if (current.state === "waking") return undefined
          return { _tag: "Failed", code: "wake-failed" }
        }), FOLLOW_POLL).pipe(
        Effect.timeoutOption(readinessWait),
        Effect.map((result) => Option.getOrElse(result, () => ({ _tag: "Failed", code: "wake-timeout" } as WakeResult))),
        Effect.catchAll(() => Effect.succeed<WakeResult>({ _tag: "Failed", code: "storage-unavailable" }))
      )

    /** Budgets, a preparation slot and the database claim; then the waker's work, or another process's outcome. */
    const start = (stack: StackId, match: WakeMatch, source: string, correlationId: string) =>
      Effect.gen(function* () {
        // Capacity before quota: a wake refused for want of a preparation slot spends no budget.
        const slot = yield* Effect.either(admission.preparation)
        if (slot._tag === "Left") return { _tag: "Refused", refusal: slot.left } as WakeResult
        const release = slot.right
        const budget = yield* Effect.either(admission.wakeBudget(stack, source))
        if (budget._tag === "Left") {
          yield* release
          return { _tag: "Refused", refusal: budget.left } as WakeResult
        }
        const claimed = yield* Effect.either(repo.claimWake(stack, match, leaseMs, correlationId))
        if (claimed._tag === "Left") {
          yield* release
          return { _tag: "Refused", refusal: { reason: "storage-unavailable", retryAfter: 1 } } as WakeResult
        }
        if (Option.isNone(claimed.right)) {
          yield* release
          const current = yield* repo.get(stack)
          if (Option.isNone(current)) return { _tag: "NoMatch" } as WakeResult
          const row: StackRow = current.value
          if (row.state === "waking") return yield* follow(stack)
          if (row.state === "awake" && row.upstream !== null) return { _tag: "Awake", upstream: row.upstream } as WakeResult
          return { _tag: "NoMatch" } as WakeResult
        }
        yield* routing.changed(stack)
        yield* admission.started
        yield* Effect.logInfo("wake started").pipe(Effect.annotateLogs({ stack, wakeAttempt: claimed.right.value.wake_attempt }))
        return yield* run(stack, claimed.right.value.wake_attempt, correlationId).pipe(Effect.ensuring(release))
      }).pipe(Effect.catchAll(() => Effect.succeed<WakeResult>({ _tag: "Refused", refusal: { reason: "storage-unavailable", retryAfter: 1 } })))

    /**
     * The wake of a stack whose receipt `match` was checked against. Decided synchronously: a request either joins
     * the Deferred of the wake in flight in this process or registers a new one before anything else runs, so N
     * concurrent requests make one wake and spend one set of wake budgets. The Deferred ends `Awake`, `Failed`,
     * `Refused` (a budget, a slot, storage) or `NoMatch` (the claim found the receipt changed or gone).
     */
    const wake = (stack: StackId, match: WakeMatch, source: string, correlationId: string) =>
      Effect.suspend(() => {
        const joined = inFlight.get(stack)
        if (joined !== undefined) return Effect.succeed(joined)
        const deferred = Deferred.unsafeMake<WakeResult>(FiberId.none)
        inFlight.set(stack, deferred)
        return start(stack, match, source, correlationId).pipe(
          Effect.flatMap((result) => Deferred.succeed(deferred, result)),
          Effect.ensuring(Effect.sync(() => {
            if (inFlight.get(stack) === deferred) inFlight.delete(stack)
          })),
          FiberSet.run(fibers),
          Effect.as(deferred)
        )
      })

    return { wake } as const
  })
}) {}
