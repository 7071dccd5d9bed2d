import type { VerifiedIdentity } from "@delivery/identity"
import { WorkerRegistry } from "@delivery/core"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Fiber, Layer, Option, TestClock } from "effect"
import { ApiActivity } from "../src/ApiActivity.ts"
import { DrainGate } from "../src/DrainGate.ts"
import { LocalWork, RuntimeRegistries } from "../src/LocalWork.ts"
import { makeRuntimeRegistry, type RuntimeRegistry } from "../src/Runtimes.ts"

// Spec 001's process-local state, driven by TestClock (Effect's monotonic `currentTimeNanos`): the local API
// activity hold, the idle hold and requests in flight, the runtime registries and the local-work probe.

const boardKey: VerifiedIdentity = { _tag: "ApiKey", tenant: "t" as never, account: "a" as never, keyId: "k" as never, kind: "board", permissions: [] }
const agentKey: VerifiedIdentity = { ...boardKey, kind: "agent" }
const device: VerifiedIdentity = { _tag: "Device", tenant: "t" as never, account: "a" as never, device: "d" as never }
const session: VerifiedIdentity = { _tag: "Session", tenant: "t" as never, account: "a" as never }

const active = Effect.flatMap(ApiActivity, (activity) => Effect.map(activity.remaining, Option.isSome))

describe("the local API activity hold (spec 001: ten minutes on a monotonic clock)", () => {
  it.effect("a successful board or agent key request holds for ten minutes; further success extends it", () =>
    Effect.gen(function* () {
      const activity = yield* ApiActivity
      expect(yield* active).toBe(false)
      yield* activity.observe(boardKey, 200)
      expect(yield* active).toBe(true)
      yield* TestClock.adjust(Duration.minutes(9))
      yield* activity.observe(agentKey, 201)
      yield* TestClock.adjust(Duration.minutes(9))
      // 18 minutes after the first success, 9 after the second: still held.
      expect(yield* active).toBe(true)
      yield* TestClock.adjust(Duration.minutes(1))
      expect(yield* active).toBe(false)
    }).pipe(Effect.provide(ApiActivity.Default)))

  it.effect("ends exactly ten minutes after the last success", () =>
    Effect.gen(function* () {
      const activity = yield* ApiActivity
      yield* activity.observe(boardKey, 204)
      yield* TestClock.adjust(Duration.subtract(Duration.minutes(10), Duration.millis(1)))
      expect(yield* active).toBe(true)
      yield* TestClock.adjust(Duration.millis(1))
      expect(yield* active).toBe(false)
    }).pipe(Effect.provide(ApiActivity.Default)))

  it.effect("rejections, failed requests, devices, sessions and unauthenticated requests do not extend it", () =>
    Effect.gen(function* () {
      const activity = yield* ApiActivity
      for (const status of [100, 199, 300, 301, 400, 401, 403, 404, 409, 422, 429, 500, 503]) yield* activity.observe(boardKey, status)
      yield* activity.observe(device, 200)
      yield* activity.observe(session, 200)
      yield* activity.observe(undefined, 200)
      expect(yield* active).toBe(false)
      // A failure after a success does not shorten the hold either.
      yield* activity.observe(boardKey, 200)
      yield* TestClock.adjust(Duration.minutes(5))
      yield* activity.observe(boardKey, 500)
      yield* TestClock.adjust(Duration.minutes(5))
      expect(yield* active).toBe(false)
    }).pipe(Effect.provide(ApiActivity.Default)))
})

describe("the idle hold and requests in flight", () => {
  it.effect("while the hold lasts requests are refused with the time left; admitted ones are counted until they leave", () =>
    Effect.gen(function* () {
      const gate = yield* DrainGate
      expect(yield* gate.admit).toEqual({ _tag: "Admitted" })
      expect(yield* gate.inFlight).toBe(1)
      yield* gate.take("hold-1", Duration.seconds(30))
      expect(yield* gate.admit).toEqual({ _tag: "Draining", retryAfterSeconds: 30 })
      expect(yield* gate.inFlight).toBe(1)
      yield* gate.leave
      expect(yield* gate.inFlight).toBe(0)
      yield* TestClock.adjust(Duration.millis(29_500))
      expect(yield* gate.admit).toEqual({ _tag: "Draining", retryAfterSeconds: 1 })
      yield* TestClock.adjust(Duration.millis(500))
      // The hold ended on its own: admitted again.
      expect(yield* gate.admit).toEqual({ _tag: "Admitted" })
      expect(Option.isNone(yield* gate.current)).toBe(true)
    }).pipe(Effect.provide(DrainGate.Default)))

  it.effect("a release ends only the hold of the same idle hold", () =>
    Effect.gen(function* () {
      const gate = yield* DrainGate
      yield* gate.take("hold-1", Duration.minutes(1))
      expect(yield* gate.release("hold-2")).toBe(false)
      expect((yield* gate.admit)._tag).toBe("Draining")
      expect(yield* gate.release("hold-1")).toBe(true)
      expect((yield* gate.admit)._tag).toBe("Admitted")
      expect(yield* gate.release("hold-1")).toBe(false)
    }).pipe(Effect.provide(DrainGate.Default)))
})

const failureOf = <A, E>(effect: Effect.Effect<A, E>) => Effect.map(Effect.flip(effect), (error) => ({ ...(error as object) }))

describe("runtime registries (spec 001: unsettled initialization or retirement blocks sleep)", () => {
  it.effect("get and list show initializing and running runtimes; unknown ids, other owners and double retirements are refused by name", () =>
    Effect.gen(function* () {
      const registry = makeRuntimeRegistry("r")
      yield* registry.begin("one", "owner")
      expect((yield* registry.list).map((r) => [r.id, r.state])).toEqual([["one", "initializing"]])
      expect(Option.isSome(yield* registry.get("one"))).toBe(true)
      expect(yield* failureOf(registry.begin("one", "other"))).toEqual({ _tag: "RuntimeConflict", registry: "r", id: "one" })
      expect(yield* failureOf(registry.ready("nope"))).toEqual({ _tag: "RuntimeNotFound", registry: "r", id: "nope" })
      expect(yield* failureOf(registry.retire("nope", "owner", Effect.void))).toEqual({ _tag: "RuntimeNotFound", registry: "r", id: "nope" })
      // Retiring what is still initializing would race its start.
      expect(yield* failureOf(registry.retire("one", "owner", Effect.void))).toEqual({ _tag: "RuntimeConflict", registry: "r", id: "one" })
      yield* registry.ready("one")
      expect(yield* failureOf(registry.retire("one", "intruder", Effect.void))).toEqual({ _tag: "RuntimeNotOwned", registry: "r", id: "one" })
      const stopping = yield* Deferred.make<void>()
      const first = yield* Effect.fork(registry.retire("one", "owner", Deferred.await(stopping)))
      yield* Effect.yieldNow()
      expect((yield* registry.unsettled).runtimes.map((r) => r.state)).toEqual(["retiring"])
      expect(yield* failureOf(registry.retire("one", "owner", Effect.void))).toEqual({ _tag: "RuntimeConflict", registry: "r", id: "one" })
      yield* Deferred.succeed(stopping, undefined)
      yield* Fiber.join(first)
      expect((yield* registry.unsettled).runtimes).toEqual([])
    }))

  it.effect("a failed initialization settles: nothing of it is left; ready never revives a failed retirement", () =>
    Effect.gen(function* () {
      const registry = makeRuntimeRegistry("r")
      yield* registry.begin("one", "owner")
      yield* registry.initializationFailed("one")
      expect(yield* registry.list).toEqual([])
      expect((yield* registry.unsettled).runtimes).toEqual([])
      yield* registry.begin("two", "owner")
      yield* registry.ready("two")
      yield* Effect.exit(registry.retire("two", "owner", Effect.fail("stuck")))
      yield* registry.ready("two")
      expect((yield* registry.unsettled).runtimes.map((r) => r.state)).toEqual(["retirement-failed"])
    }))

  it.effect("a full shutdown that succeeds leaves nothing owed; one started while a retirement runs leaves that retirement alone", () =>
    Effect.gen(function* () {
      const registry = makeRuntimeRegistry("r")
      for (const id of ["one", "two"]) {
        yield* registry.begin(id, "owner")
        yield* registry.ready(id)
      }
      const stopping = yield* Deferred.make<void>()
      const first = yield* Effect.fork(registry.retire("one", "owner", Deferred.await(stopping)))
      yield* Effect.yieldNow()
      yield* registry.shutdown(() => Effect.void)
      yield* Deferred.succeed(stopping, undefined)
      yield* Fiber.join(first)
      expect(yield* registry.unsettled).toEqual({ runtimes: [], shutdownFailed: false })
    }))

  it.effect("initializing and retiring runtimes are unsettled; running ones are not", () =>
    Effect.gen(function* () {
      const registry = makeRuntimeRegistry("r")
      yield* registry.begin("one", "owner")
      expect((yield* registry.unsettled).runtimes.map((r) => r.state)).toEqual(["initializing"])
      yield* registry.ready("one")
      expect((yield* registry.unsettled).runtimes).toEqual([])
      expect((yield* registry.list).map((r) => r.id)).toEqual(["one"])
      const exit = yield* registry.begin("one", "owner").pipe(Effect.exit)
      expect(Exit.isFailure(exit)).toBe(true)
      yield* registry.initializationFailed("one")
      // initializationFailed only settles an initializing runtime.
      expect((yield* registry.list).map((r) => r.id)).toEqual(["one"])
    }))

  it.effect("a failed retirement stays reported after get and list hide it, until the owner's retry succeeds", () =>
    Effect.gen(function* () {
      const registry = makeRuntimeRegistry("r")
      yield* registry.begin("one", "owner")
      yield* registry.ready("one")
      const failed = yield* registry.retire("one", "owner", Effect.fail("stuck")).pipe(Effect.exit)
      expect(Exit.isFailure(failed)).toBe(true)
      expect(Option.isNone(yield* registry.get("one"))).toBe(true)
      expect(yield* registry.list).toEqual([])
      expect((yield* registry.unsettled).runtimes).toEqual([{ registry: "r", id: "one", owner: "owner", state: "retirement-failed" }])
      const stranger = yield* registry.retire("one", "someone-else", Effect.void).pipe(Effect.exit)
      expect(Exit.isFailure(stranger)).toBe(true)
      expect((yield* registry.unsettled).runtimes).toHaveLength(1)
      yield* registry.retire("one", "owner", Effect.void)
      expect((yield* registry.unsettled).runtimes).toEqual([])
    }))

  it.effect("an interrupted retirement is a failed one", () =>
    Effect.gen(function* () {
      const registry = makeRuntimeRegistry("r")
      yield* registry.begin("one", "owner")
      yield* registry.ready("one")
      const exit = yield* registry.retire("one", "owner", Effect.interrupt).pipe(Effect.exit)
      expect(Exit.isFailure(exit)).toBe(true)
      expect((yield* registry.unsettled).runtimes.map((r) => r.state)).toEqual(["retirement-failed"])
    }))

  it.effect("a failed full shutdown keeps the registry unsettled even after a later retry succeeds", () =>
    Effect.gen(function* () {
      const registry = makeRuntimeRegistry("r")
      for (const id of ["one", "two"]) {
        yield* registry.begin(id, "owner")
        yield* registry.ready(id)
      }
      const exit = yield* registry.shutdown((runtime) => (runtime.id === "two" ? Effect.fail("stuck") : Effect.void)).pipe(Effect.exit)
      expect(Exit.isFailure(exit)).toBe(true)
      yield* registry.retire("two", "owner", Effect.void)
      const unsettled = yield* registry.unsettled
      expect(unsettled.runtimes).toEqual([])
      expect(unsettled.shutdownFailed).toBe(true)
    }))
})

const probeLayer = (registries: ReadonlyArray<RuntimeRegistry>) =>
  LocalWork.Default.pipe(
    Layer.provideMerge(Layer.mergeAll(ApiActivity.Default, DrainGate.Default, WorkerRegistry.Default, Layer.succeed(RuntimeRegistries, registries)))
  )

describe("the local-work probe reads process memory only", () => {
  const workers = makeRuntimeRegistry("runtimes")
  const agents = makeRuntimeRegistry("agents")

  it.effect("reports every registry's unsettled runtimes, failed shutdowns, workers, activity and requests in flight", () =>
    Effect.gen(function* () {
      const local = yield* LocalWork
      expect(yield* local.probe).toEqual([])

      yield* workers.begin("sandbox", "o")
      yield* agents.begin("bot", "o")
      yield* agents.ready("bot")
      yield* agents.retire("bot", "o", Effect.fail("stuck")).pipe(Effect.exit)
      const registry = yield* WorkerRegistry
      yield* registry.register("outbox")
      yield* registry.register("reset-mail")
      yield* registry.markFailed("reset-mail")
      yield* registry.register("receipts")
      yield* registry.markRunning("receipts")
      yield* registry.markStopping("receipts")
      // Running and cleanly stopped workers owe nothing.
      yield* registry.register("retention")
      yield* registry.markRunning("retention")
      yield* registry.register("purge")
      yield* registry.markStopped("purge")
      yield* Effect.flatMap(ApiActivity, (a) => a.observe(boardKey, 200))
      yield* Effect.flatMap(DrainGate, (g) => g.admit)

      expect(yield* local.probe).toEqual([
        { code: "runtime-initializing", ids: ["runtimes/sandbox"] },
        { code: "runtime-retirement-failed", ids: ["agents/bot"] },
        { code: "runtime-initializing", ids: ["workers/outbox"] },
        { code: "runtime-failed", ids: ["workers/reset-mail"] },
        { code: "runtime-retiring", ids: ["workers/receipts"] },
        { code: "local-api-activity" },
        { code: "requests-in-flight", count: 1 }
      ])

      yield* agents.shutdown(() => Effect.fail("stuck")).pipe(Effect.exit)
      expect(yield* local.probe).toContainEqual({ code: "service-shutdown-failed", ids: ["agents"] })
    }).pipe(Effect.provide(probeLayer([workers, agents]))))
})
