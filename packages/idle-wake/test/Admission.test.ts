import { RateLimiter } from "@effect/experimental"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Context, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, Redacted, Scope, TestClock } from "effect"
import { limitStoreLayer } from "@delivery/core"
import { startRedis } from "@delivery/testing"
import { randomBytes } from "node:crypto"
import { Admission, AdmissionLive, CAPACITY_RETRY_AFTER } from "../src/cloud/Admission.ts"
import { CloudConfig, CloudSettingsTag } from "../src/cloud/CloudConfig.ts"

// Spec 001, "Delivery and admission guarantees": "Cloud API admission is explicitly bounded per process: 64 waiting
// requests, 8 per stack, 4 per source, 32 pending provider preparations; source request budget 24/minute, source wake
// budget 3/10 minutes, stack wake budget 8/hour, and aggregate wake budget 32/minute."
// The settings are the cloud role's real configuration with nothing but its required variables set, so the bounds
// exercised are the defaults a deployment gets. Each test builds its own Admission (fresh counters, fresh memory
// store) under it.effect's TestClock, which the memory store's windows read.

const env = new Map([
  ["IDLE_WAKE_CLOUD_SIGNING_KEY", `cloud-1:${randomBytes(32).toString("base64url")}`],
  ["IDLE_WAKE_PROXY_PORT", "8080"]
])
const SettingsLive = Layer.effect(CloudSettingsTag, Effect.withConfigProvider(CloudConfig, ConfigProvider.fromMap(env)))

const fresh = <A, E>(effect: Effect.Effect<A, E, Admission | Scope.Scope>) =>
  Effect.scoped(effect).pipe(Effect.provide(AdmissionLive.pipe(Layer.provide(SettingsLive))))

/** A store that cannot answer: the budgets must fail closed. */
const downStore = Layer.succeed(RateLimiter.RateLimiterStore, {
  fixedWindow: () => Effect.fail(new RateLimiter.RateLimitStoreError({ message: "store unavailable" })),
  tokenBucket: () => Effect.die("the admission budgets are fixed windows")
})
const withDownStore = <A, E>(effect: Effect.Effect<A, E, Admission>) =>
  effect.pipe(Effect.provide(Admission.Default.pipe(Layer.provide(RateLimiter.layer), Layer.provide(downStore), Layer.provide(SettingsLive))))

/** A waiting slot in its own scope: answers the effect that gives it back. Fails with the refusal. */
const take = (stack: string, source: string) =>
  Effect.gen(function* () {
    const admission = yield* Admission
    const scope = yield* Scope.make()
    yield* Scope.extend(admission.hold(stack, source), scope)
    return Scope.close(scope, Exit.void)
  })

const counters = Effect.flatMap(Admission, (admission) => admission.counters)

describe("admission settings", () => {
  it.effect("the defaults are spec 001's bounds: 64 waiting, 8 per stack, 4 per source, 32 preparations, 24/min, 3/10 min, 8/h, 32/min, 90 s readiness", () =>
    Effect.gen(function* () {
      const settings = yield* CloudSettingsTag
      expect({ ...settings.admission, readinessWait: Duration.toSeconds(settings.admission.readinessWait) }).toEqual({
        waitingMax: 64,
        waitingPerStack: 8,
        waitingPerSource: 4,
        preparationsMax: 32,
        sourceRequestsPerMinute: 24,
        sourceWakesPer10Minutes: 3,
        stackWakesPerHour: 8,
        wakesPerMinute: 32,
        readinessWait: 90
      })
      const admission = yield* Admission
      expect(Duration.toSeconds(admission.readinessWait)).toBe(90)
    }).pipe(Effect.provide(SettingsLive), fresh))
})

describe("the source request budget (spec 001: \"source request budget 24/minute\"; \"Unknown requests cannot consume provider-start quota\" but do count here)", () => {
  it.effect("the 25th request of a source within a minute is refused `source-request-budget` with a Retry-After in 1..60", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      for (let i = 0; i < 24; i++) yield* admission.requestBudget("v4:198.51.100.1")
      const refusal = yield* Effect.flip(admission.requestBudget("v4:198.51.100.1"))
      expect(refusal).toEqual({ reason: "source-request-budget", retryAfter: 60 })
      // Another source has its own budget ("A shared proxy/NAT therefore shares its source limits", nobody else's).
      yield* admission.requestBudget("v4:198.51.100.2")
      // Whole seconds, rounded up: a client that waits Retry-After finds the window over (30.5 s left: 31).
      yield* TestClock.adjust("29500 millis")
      expect(yield* Effect.flip(admission.requestBudget("v4:198.51.100.1"))).toEqual({ reason: "source-request-budget", retryAfter: 31 })
      yield* TestClock.adjust("30 seconds")
      expect(yield* Effect.flip(admission.requestBudget("v4:198.51.100.1"))).toEqual({ reason: "source-request-budget", retryAfter: 1 })
      yield* TestClock.adjust("500 millis")
      yield* admission.requestBudget("v4:198.51.100.1")
    })))

  it.effect("after the window the source is admitted again, for a full budget", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      for (let i = 0; i < 24; i++) yield* admission.requestBudget("v4:198.51.100.1")
      expect((yield* Effect.flip(admission.requestBudget("v4:198.51.100.1"))).reason).toBe("source-request-budget")
      yield* TestClock.adjust("61 seconds")
      for (let i = 0; i < 24; i++) yield* admission.requestBudget("v4:198.51.100.1")
      expect(yield* Effect.flip(admission.requestBudget("v4:198.51.100.1"))).toEqual({ reason: "source-request-budget", retryAfter: 60 })
    })))

  it.effect("a store that cannot answer fails closed: refused with the budget's reason and a capacity Retry-After", () =>
    withDownStore(Effect.gen(function* () {
      const admission = yield* Admission
      expect(yield* Effect.flip(admission.requestBudget("v4:198.51.100.1"))).toEqual({ reason: "source-request-budget", retryAfter: CAPACITY_RETRY_AFTER })
      expect(yield* Effect.flip(admission.wakeBudget("stack-a", "v4:198.51.100.1"))).toEqual({ reason: "source-wake-budget", retryAfter: CAPACITY_RETRY_AFTER })
    })))
})

describe("budget keys (a shared store holds other limiters' windows too, each under its own prefix)", () => {
  it.effect("every budget's key is its own under `idle-wake:`: per source, per stack, and one aggregate key for every wake", () => {
    const keys: Array<string> = []
    const recording = Layer.effect(
      RateLimiter.RateLimiterStore,
      Effect.map(RateLimiter.RateLimiterStore, (memory) => ({
        ...memory,
        fixedWindow: (options: Parameters<typeof memory.fixedWindow>[0]) => {
          keys.push(options.key)
          return memory.fixedWindow(options)
        }
      }))
    ).pipe(Layer.provide(RateLimiter.layerStoreMemory))
    return Effect.gen(function* () {
      const admission = yield* Admission
      yield* admission.requestBudget("v4:198.51.100.1")
      yield* admission.wakeBudget("stack-a", "v4:198.51.100.1")
      yield* admission.wakeBudget("stack-b", "v4:198.51.100.2")
      expect(keys).toHaveLength(7)
      for (const key of keys) expect(key.startsWith("idle-wake:"), key).toBe(true)
      const [requests, sourceWakesA, stackWakesA, wakesA, sourceWakesB, stackWakesB, wakesB] = keys
      expect(new Set([requests, sourceWakesA, stackWakesA, wakesA]).size).toBe(4)
      expect(requests).toContain("v4:198.51.100.1")
      expect(sourceWakesA).toContain("v4:198.51.100.1")
      expect(stackWakesA).toContain("stack-a")
      expect(sourceWakesB).not.toBe(sourceWakesA)
      expect(stackWakesB).not.toBe(stackWakesA)
      expect(wakesB).toBe(wakesA)
    }).pipe(Effect.provide(Admission.Default.pipe(Layer.provide(RateLimiter.layer), Layer.provide(recording), Layer.provide(SettingsLive))))
  })
})

describe("waiting slots (spec 001: \"64 waiting requests, 8 per stack, 4 per source\")", () => {
  it.effect("the 5th waiting request of one source is refused `source-waiting-full`, Retry-After 5", () =>
    fresh(Effect.gen(function* () {
      for (let i = 0; i < 4; i++) yield* take(`stack-${i}`, "src-a")
      expect(yield* Effect.flip(take("stack-9", "src-a"))).toEqual({ reason: "source-waiting-full", retryAfter: 5 })
      yield* take("stack-9", "src-b")
      expect(yield* counters).toMatchObject({ waiting: 5, waitingStacks: 5, admitted: 5 })
    })))

  it.effect("the 9th waiting request for one stack is refused `stack-waiting-full`, Retry-After 5", () =>
    fresh(Effect.gen(function* () {
      for (let i = 0; i < 8; i++) yield* take("stack-a", `src-${i}`)
      expect(yield* Effect.flip(take("stack-a", "src-9"))).toEqual({ reason: "stack-waiting-full", retryAfter: 5 })
      yield* take("stack-b", "src-9")
      expect(yield* counters).toMatchObject({ waiting: 9, waitingStacks: 2, admitted: 9 })
    })))

  it.effect("the 65th waiting request in the process is refused `waiting-full`, Retry-After 5", () =>
    fresh(Effect.gen(function* () {
      // 8 stacks of 8, 16 sources of 4: every per-stack and per-source bound exactly at its limit, none exceeded.
      for (let i = 0; i < 64; i++) yield* take(`stack-${Math.floor(i / 8)}`, `src-${Math.floor(i / 4)}`)
      expect(yield* Effect.flip(take("stack-new", "src-new"))).toEqual({ reason: "waiting-full", retryAfter: 5 })
      expect(yield* counters).toMatchObject({ waiting: 64, waitingStacks: 8, admitted: 64 })
    })))

  it.effect("precedence when several bounds are full: total (`waiting-full`), then stack, then source", () =>
    fresh(Effect.gen(function* () {
      for (let i = 0; i < 4; i++) yield* take("stack-s", "src-a") // src-a full, stack-s at 4
      expect(yield* Effect.flip(take("stack-other", "src-a"))).toEqual({ reason: "source-waiting-full", retryAfter: 5 })
      for (let i = 0; i < 4; i++) yield* take("stack-s", `src-b${i}`) // stack-s full
      expect(yield* Effect.flip(take("stack-s", "src-a"))).toEqual({ reason: "stack-waiting-full", retryAfter: 5 })
      expect(yield* Effect.flip(take("stack-s", "src-fresh"))).toEqual({ reason: "stack-waiting-full", retryAfter: 5 })
      for (let i = 0; i < 56; i++) yield* take(`stack-t${Math.floor(i / 8)}`, `src-c${Math.floor(i / 4)}`) // 64 in all
      expect(yield* Effect.flip(take("stack-s", "src-a"))).toEqual({ reason: "waiting-full", retryAfter: 5 })
      expect(yield* Effect.flip(take("stack-s", "src-fresh"))).toEqual({ reason: "waiting-full", retryAfter: 5 })
      expect(yield* Effect.flip(take("stack-fresh", "src-a"))).toEqual({ reason: "waiting-full", retryAfter: 5 })
      // A refusal holds nothing.
      expect(yield* counters).toMatchObject({ waiting: 64, admitted: 64 })
    })))

  it.effect("a slot is given back exactly once when its scope closes: total, stack and source all free again", () =>
    fresh(Effect.gen(function* () {
      const releases: Array<Effect.Effect<void>> = []
      for (let i = 0; i < 4; i++) releases.push(yield* take("stack-a", "src-a"))
      expect(yield* Effect.flip(take("stack-a", "src-a"))).toEqual({ reason: "source-waiting-full", retryAfter: 5 })
      yield* releases[0]!
      yield* releases[0]! // closing a closed scope runs no finalizer again
      expect(yield* counters).toMatchObject({ waiting: 3, waitingStacks: 1 })
      releases.push(yield* take("stack-a", "src-a"))
      expect(yield* Effect.flip(take("stack-a", "src-a"))).toEqual({ reason: "source-waiting-full", retryAfter: 5 })
      for (const release of releases) yield* release
      expect(yield* counters).toMatchObject({ waiting: 0, waitingStacks: 0, admitted: 5 })
    })))

  it.effect("\"Released exactly once when the request stops waiting, whatever the outcome\": a scoped effect that fails", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      for (let i = 0; i < 10; i++) {
        const exit = yield* Effect.exit(Effect.scoped(Effect.zipRight(admission.hold("stack-a", "src-a"), Effect.fail("upstream-ambiguous"))))
        expect(Exit.isFailure(exit)).toBe(true)
      }
      expect(yield* counters).toMatchObject({ waiting: 0, waitingStacks: 0, admitted: 10 })
      const died = yield* Effect.exit(Effect.scoped(Effect.zipRight(admission.hold("stack-a", "src-a"), Effect.die("defect"))))
      expect(Exit.isFailure(died)).toBe(true)
      expect(yield* counters).toMatchObject({ waiting: 0, waitingStacks: 0 })
    })))

  it.effect("a waiting request that is interrupted (client gone, readiness wait over) gives its slot back", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      const held = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(Effect.scoped(admission.hold("stack-a", "src-a").pipe(
        Effect.zipRight(Deferred.succeed(held, undefined)),
        Effect.zipRight(Effect.never)
      )))
      yield* Deferred.await(held)
      expect(yield* counters).toMatchObject({ waiting: 1, waitingStacks: 1 })
      yield* Fiber.interrupt(fiber)
      expect(yield* counters).toMatchObject({ waiting: 0, waitingStacks: 0 })

      // The readiness wait: a held request timed out by the clock releases its slot too.
      const waits = yield* Effect.fork(Effect.all(
        Array.from({ length: 4 }, () =>
          Effect.scoped(admission.hold("stack-a", "src-a").pipe(Effect.zipRight(Effect.never), Effect.timeoutOption(admission.readinessWait)))),
        { concurrency: "unbounded" }
      ))
      yield* TestClock.adjust("1 second")
      expect(yield* counters).toMatchObject({ waiting: 4 })
      expect(yield* Effect.flip(take("stack-a", "src-a"))).toEqual({ reason: "source-waiting-full", retryAfter: 5 })
      yield* TestClock.adjust("90 seconds")
      expect(yield* Fiber.join(waits)).toEqual([Option.none(), Option.none(), Option.none(), Option.none()])
      expect(yield* counters).toMatchObject({ waiting: 0, waitingStacks: 0, admitted: 5 })
    })))
})

describe("wake budgets (spec 001: \"source wake budget 3/10 minutes, stack wake budget 8/hour, and aggregate wake budget 32/minute\")", () => {
  it.effect("a source's 4th wake within 10 minutes is refused `source-wake-budget`, Retry-After 600; admitted after the window", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      for (let i = 0; i < 3; i++) yield* admission.wakeBudget(`stack-${i}`, "src-a")
      expect(yield* Effect.flip(admission.wakeBudget("stack-3", "src-a"))).toEqual({ reason: "source-wake-budget", retryAfter: 600 })
      yield* TestClock.adjust("5 minutes")
      expect(yield* Effect.flip(admission.wakeBudget("stack-3", "src-a"))).toEqual({ reason: "source-wake-budget", retryAfter: 300 })
      yield* TestClock.adjust("301 seconds")
      yield* admission.wakeBudget("stack-3", "src-a")
    })))

  it.effect("a stack's 9th wake within an hour is refused `stack-wake-budget`, Retry-After 3600; admitted after the window", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      for (let i = 0; i < 8; i++) yield* admission.wakeBudget("stack-a", `src-${i}`)
      expect(yield* Effect.flip(admission.wakeBudget("stack-a", "src-8"))).toEqual({ reason: "stack-wake-budget", retryAfter: 3600 })
      yield* admission.wakeBudget("stack-b", "src-9")
      yield* TestClock.adjust("3601 seconds")
      yield* admission.wakeBudget("stack-a", "src-10")
    })))

  it.effect("the 33rd wake in a minute, any stack and source, is refused `wake-budget`, Retry-After 60; admitted after the window", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      for (let i = 0; i < 32; i++) yield* admission.wakeBudget(`stack-${i}`, `src-${i}`)
      expect(yield* Effect.flip(admission.wakeBudget("stack-x", "src-x"))).toEqual({ reason: "wake-budget", retryAfter: 60 })
      yield* TestClock.adjust("61 seconds")
      yield* admission.wakeBudget("stack-y", "src-y")
    })))

  it.effect("consumed source first: a refused source spends nothing of the stack's budget", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      for (let i = 0; i < 3; i++) yield* admission.wakeBudget(`stack-${i}`, "src-a")
      for (let i = 0; i < 5; i++) {
        expect((yield* Effect.flip(admission.wakeBudget("stack-z", "src-a"))).reason).toBe("source-wake-budget")
      }
      // stack-z still has its whole hour: 8 wakes from other sources, the 9th refused by the stack budget.
      for (let i = 0; i < 8; i++) yield* admission.wakeBudget("stack-z", `src-b${i}`)
      expect((yield* Effect.flip(admission.wakeBudget("stack-z", "src-c"))).reason).toBe("stack-wake-budget")
    })))

  it.effect("a refusal by a later budget has spent the earlier ones (the aggregate refusal cost its source one wake)", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      for (let i = 0; i < 32; i++) yield* admission.wakeBudget(`stack-${i}`, `src-${i}`)
      expect((yield* Effect.flip(admission.wakeBudget("stack-x", "src-x"))).reason).toBe("wake-budget")
      yield* TestClock.adjust("61 seconds")
      // src-x spent 1 of its 3 on the refused wake: 2 left in its 10 minutes.
      yield* admission.wakeBudget("stack-y1", "src-x")
      yield* admission.wakeBudget("stack-y2", "src-x")
      expect((yield* Effect.flip(admission.wakeBudget("stack-y3", "src-x"))).reason).toBe("source-wake-budget")
    })))
})

describe("provider preparations (spec 001: \"32 pending provider preparations\"; \"A timed-out provider preparation remains coalesced until it actually settles\")", () => {
  it.effect("the 33rd pending preparation is refused `preparations-full`, Retry-After 5; a release frees exactly one slot, once", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      const releases: Array<Effect.Effect<void>> = []
      for (let i = 0; i < 32; i++) releases.push(yield* admission.preparation)
      expect(yield* Effect.flip(admission.preparation)).toEqual({ reason: "preparations-full", retryAfter: 5 })
      yield* releases[0]!
      yield* releases[0]! // idempotent: a second run frees nothing
      expect((yield* counters).preparations).toBe(31)
      releases.push(yield* admission.preparation)
      expect(yield* Effect.flip(admission.preparation)).toEqual({ reason: "preparations-full", retryAfter: 5 })
      for (const release of releases) yield* release
      expect((yield* counters).preparations).toBe(0)
    })))

  it.effect("a preparation stays counted until its release runs, however long it takes (no clock frees it)", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      const release = yield* admission.preparation
      yield* TestClock.adjust("1 day")
      expect((yield* counters).preparations).toBe(1)
      yield* release
      expect((yield* counters).preparations).toBe(0)
    })))
})

describe("counters (the operator view)", () => {
  it.effect("report waiting requests and stacks, preparations, admitted, wakes started and refusals by reason", () =>
    fresh(Effect.gen(function* () {
      const admission = yield* Admission
      expect(yield* admission.counters).toEqual({ waiting: 0, waitingStacks: 0, preparations: 0, admitted: 0, wakesStarted: 0, refusals: {} })
      const release = yield* take("stack-a", "src-a")
      yield* take("stack-a", "src-b")
      yield* take("stack-b", "src-a")
      yield* admission.preparation
      yield* admission.started
      yield* admission.started
      yield* admission.refused("waiting-full")
      yield* admission.refused("source-request-budget")
      yield* admission.refused("waiting-full")
      yield* release
      const now = yield* admission.counters
      expect(now).toEqual({
        waiting: 2,
        waitingStacks: 2,
        preparations: 1,
        admitted: 3,
        wakesStarted: 2,
        refusals: { "source-request-budget": 1, "waiting-full": 2 }
      })
      // Sorted by reason, so the operator view is stable.
      expect(Object.keys(now.refusals)).toEqual(["source-request-budget", "waiting-full"])
      // A refusal by a bound is counted only when reported (the proxy reports every one it answers).
      yield* Effect.flip(admission.preparation.pipe(Effect.repeatN(40)))
      expect((yield* admission.counters).refusals).toEqual({ "source-request-budget": 1, "waiting-full": 2 })
    })))

  it.scopedLive("shared budgets (REDIS_URL): two cloud processes' admissions over one real Redis spend one source request budget: of 30 requests from one source, alternately admitted by each, 24 pass and 6 are refused with the window's Retry-After", () =>
    Effect.gen(function* () {
      const redis = yield* startRedis
      const settings = { url: Option.some(Redacted.make(redis.url)), prefix: `admission-${randomBytes(3).toString("hex")}:`, commandTimeout: Duration.millis(250) }
      const admissionOver = Effect.gen(function* () {
        const context = yield* Layer.build(Admission.Default.pipe(Layer.provide(RateLimiter.layer), Layer.provide(limitStoreLayer(settings)), Layer.provide(SettingsLive)))
        return Context.get(context, Admission)
      })
      const processes = [yield* admissionOver, yield* admissionOver]
      const outcomes = yield* Effect.forEach(Array.from({ length: 30 }, (_, i) => i), (i) =>
        Effect.either(processes[i % 2]!.requestBudget("v4:203.0.113.9")))
      expect(outcomes.filter((o) => o._tag === "Right")).toHaveLength(24)
      const refusals = outcomes.flatMap((o) => (o._tag === "Left" ? [o.left] : []))
      expect(refusals.map((r) => r.reason)).toEqual(Array(6).fill("source-request-budget"))
      expect(refusals.every((r) => r.retryAfter >= 1 && r.retryAfter <= 60)).toBe(true)
      // Stopped, the shared store refuses every budget (fail closed) with the capacity Retry-After.
      yield* redis.stop
      expect(yield* Effect.flip(processes[0]!.requestBudget("v4:203.0.113.10"))).toEqual({ reason: "source-request-budget", retryAfter: CAPACITY_RETRY_AFTER })
    }), { timeout: 30_000 })
})
