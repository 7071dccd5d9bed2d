import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Fiber, Option, Scope, type Tracer } from "effect"
import { makeBatcher } from "../src/index.ts"

// Lets forked submitters reach the batcher before the test goes on.
const settle = Effect.repeatN(Effect.yieldNow(), 20)

/**
 * A batcher over a recorded run: every batch's items are kept, and each run waits for its own gate when `held`
 * (so a test decides when a batch ends). Results are the items doubled.
 */
const recorder = (options: { concurrency: number; maxItems?: number; weight?: { of: (n: number) => number; max: number }; held?: boolean }) =>
  Effect.gen(function* () {
    const batches: Array<ReadonlyArray<number>> = []
    const gates: Array<Deferred.Deferred<void>> = []
    let running = 0
    let mostRunning = 0
    const submit = yield* makeBatcher({
      span: "test.batch",
      concurrency: options.concurrency,
      maxItems: options.maxItems ?? 100,
      ...(options.weight === undefined ? {} : { weight: options.weight }),
      run: (items: ReadonlyArray<number>) =>
        Effect.gen(function* () {
          batches.push(items)
          running++
          mostRunning = Math.max(mostRunning, running)
          const gate = yield* Deferred.make<void>()
          gates.push(gate)
          if (options.held === true) yield* Deferred.await(gate)
          running--
          return items.map((n) => n * 2)
        })
    })
    const release = (batch: number) => Deferred.succeed(gates[batch]!, undefined)
    // Ends the first `count` batches one after the other, letting the next one start after each.
    const releaseInTurn = (count: number) =>
      Effect.forEach(Array.from({ length: count }, (_, i) => i), (i) => Effect.zipRight(release(i), settle), { discard: true })
    return { submit, batches, release, releaseInTurn, mostRunning: () => mostRunning }
  })

/** A service of the batcher's maker, as a repository's layer sees every service of the backend. */
class MakerService extends Context.Tag("test/MakerService")<MakerService, { readonly name: string }>() {}

describe("Batcher", () => {
  it.scoped("a batch runs in no service of the batcher's maker: only its own span is in its context", () =>
    Effect.gen(function* () {
      const submit = yield* makeBatcher({
        span: "test.batch",
        concurrency: 1,
        maxItems: 10,
        run: (items: ReadonlyArray<number>) =>
          Effect.map(Effect.context<never>(), (context) => items.map(() => [...context.unsafeMap.keys()].sort()))
      }).pipe(Effect.provideService(MakerService, { name: "maker" }))
      expect(yield* submit(1)).toEqual(["effect/ParentSpan"])
    }))

  it.scoped("an item submitted while a run is free runs at once, alone, and answers its own result", () =>
    Effect.gen(function* () {
      const { submit, batches } = yield* recorder({ concurrency: 2 })
      expect(yield* submit(21)).toBe(42)
      expect(yield* submit(5)).toBe(10)
      expect(batches).toEqual([[21], [5]])
    }))

  it.scoped("items submitted while every run is busy gather into one batch, run when a run ends; each gets its own result", () =>
    Effect.gen(function* () {
      const { submit, batches, release } = yield* recorder({ concurrency: 1, held: true })
      const first = yield* Effect.fork(submit(1))
      yield* settle
      const rest = yield* Effect.fork(Effect.all([2, 3, 4, 5].map(submit), { concurrency: "unbounded" }))
      yield* settle
      expect(batches).toEqual([[1]])
      yield* release(0)
      expect(yield* Fiber.join(first)).toBe(2)
      yield* settle
      expect(batches).toEqual([[1], [2, 3, 4, 5]])
      yield* release(1)
      expect(yield* Fiber.join(rest)).toEqual([4, 6, 8, 10])
    }))

  it.scoped("items submitted in one turn of the scheduler go in one batch", () =>
    Effect.gen(function* () {
      const { submit, batches } = yield* recorder({ concurrency: 2 })
      expect(yield* Effect.all([1, 2, 3].map(submit), { concurrency: "unbounded" })).toEqual([2, 4, 6])
      expect(batches).toEqual([[1, 2, 3]])
    }))

  it.scoped("never more than `concurrency` batches run at once", () =>
    Effect.gen(function* () {
      const { submit, batches, release, mostRunning } = yield* recorder({ concurrency: 2, held: true })
      const one = yield* Effect.fork(submit(1))
      yield* settle
      const two = yield* Effect.fork(submit(2))
      yield* settle
      const rest = yield* Effect.fork(Effect.all([3, 4, 5, 6].map(submit), { concurrency: "unbounded" }))
      yield* settle
      expect(batches).toEqual([[1], [2]])
      yield* release(0)
      yield* settle
      expect(batches).toEqual([[1], [2], [3, 4, 5, 6]])
      yield* release(1)
      yield* release(2)
      expect([yield* Fiber.join(one), yield* Fiber.join(two), ...(yield* Fiber.join(rest))]).toEqual([2, 4, 6, 8, 10, 12])
      expect(mostRunning()).toBe(2)
    }))

  it.scoped("a batch carries at most maxItems items; the rest wait in the next batches, in order", () =>
    Effect.gen(function* () {
      const { submit, batches, releaseInTurn } = yield* recorder({ concurrency: 1, maxItems: 2, held: true })
      const all = yield* Effect.fork(Effect.all([1, 2, 3, 4, 5, 6].map(submit), { concurrency: "unbounded" }))
      yield* settle
      yield* releaseInTurn(3)
      expect(yield* Fiber.join(all)).toEqual([2, 4, 6, 8, 10, 12])
      expect(batches).toEqual([[1, 2], [3, 4], [5, 6]])
    }))

  it.scoped("a batch stops at its weight; an item heavier than the most a batch carries runs alone", () =>
    Effect.gen(function* () {
      const { submit, batches, releaseInTurn } = yield* recorder({ concurrency: 1, weight: { of: (n) => n, max: 10 }, held: true })
      const all = yield* Effect.fork(Effect.all([1, 4, 5, 2, 30, 3].map(submit), { concurrency: "unbounded" }))
      yield* settle
      yield* releaseInTurn(4)
      expect(yield* Fiber.join(all)).toEqual([2, 8, 10, 4, 60, 6])
      expect(batches).toEqual([[1, 4, 5], [2], [30], [3]])
    }))

  it.scoped("a failed run is the failure of every item of its batch and of no other batch", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const submit = yield* makeBatcher({
        span: "test.batch",
        concurrency: 1,
        maxItems: 100,
        run: (items: ReadonlyArray<number>) =>
          Effect.zipRight(
            Deferred.await(gate),
            items.includes(13) ? Effect.fail(`unlucky batch of ${items.length}` as const) : Effect.succeed(items)
          )
      })
      const first = yield* Effect.fork(Effect.exit(submit(1)))
      yield* settle
      const second = yield* Effect.fork(Effect.all([12, 13, 14].map((n) => Effect.exit(submit(n))), { concurrency: "unbounded" }))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(first)).toEqual(Exit.succeed(1))
      expect(yield* Fiber.join(second)).toEqual([1, 2, 3].map(() => Exit.fail("unlucky batch of 3")))
    }))

  it.scoped("with retryAlone, a failed batch of several is run again one item at a time: only the item that fails alone fails", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const runs: Array<ReadonlyArray<number>> = []
      const submit = yield* makeBatcher({
        span: "test.batch",
        concurrency: 1,
        maxItems: 100,
        retryAlone: true,
        run: (items: ReadonlyArray<number>) =>
          Effect.zipRight(
            Effect.zipRight(Effect.sync(() => runs.push(items)), Deferred.await(gate)),
            items.includes(13) ? Effect.fail(`unlucky batch of ${items.length}` as const) : Effect.succeed(items)
          )
      })
      const first = yield* Effect.fork(submit(1))
      yield* settle
      const second = yield* Effect.fork(Effect.all([12, 13, 14].map((n) => Effect.exit(submit(n))), { concurrency: "unbounded" }))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(first)).toBe(1)
      expect(yield* Fiber.join(second)).toEqual([Exit.succeed(12), Exit.fail("unlucky batch of 1"), Exit.succeed(14)])
      expect(runs).toEqual([[1], [12, 13, 14], [12], [13], [14]])
    }))

  it.scoped("a run that answers fewer results than items is a defect, not a wrong answer", () =>
    Effect.gen(function* () {
      const submit = yield* makeBatcher({ span: "test.batch", concurrency: 1, maxItems: 10, run: (items: ReadonlyArray<number>) => Effect.succeed(items.slice(1)) })
      const exit = yield* Effect.exit(submit(7))
      expect(Exit.isFailure(exit) && !Exit.isInterrupted(exit) && exit.cause._tag === "Die").toBe(true)
    }))

  it.scoped("each batch runs in a root span of its own, linked to the span of every submitter, with the batch's size", () =>
    Effect.gen(function* () {
      const seen: Array<{ name: string; parent: boolean; links: Array<string>; size: unknown }> = []
      const gate = yield* Deferred.make<void>()
      const submit = yield* makeBatcher({
        span: "test.batch",
        concurrency: 1,
        maxItems: 10,
        run: (items: ReadonlyArray<number>) =>
          Effect.gen(function* () {
            const span = yield* Effect.currentSpan
            seen.push({
              name: span.name,
              parent: Option.isSome(span.parent),
              links: span.links.map((link) => (link.span as Tracer.Span).name),
              size: span.attributes.get("batch.size")
            })
            yield* Deferred.await(gate)
            return items
          })
      })
      const inRequest = (n: number) => Effect.withSpan(submit(n), `request-${n}`)
      const first = yield* Effect.fork(inRequest(1))
      yield* settle
      const rest = yield* Effect.fork(Effect.all([inRequest(2), inRequest(3), submit(4)], { concurrency: "unbounded" }))
      yield* settle
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      yield* Fiber.join(rest)
      expect(seen).toEqual([
        { name: "test.batch", parent: false, links: ["request-1"], size: 1 },
        // An item submitted outside any span adds no link.
        { name: "test.batch", parent: false, links: ["request-2", "request-3"], size: 3 }
      ])
    }))

  it.effect("when its scope closes, a running batch and the batches still waiting end interrupted, and no submitter waits", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const { submit } = yield* Scope.extend(recorder({ concurrency: 1, held: true }), scope)
      const running = yield* Effect.fork(submit(1))
      yield* settle
      const waiting = yield* Effect.fork(submit(2))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      expect(Exit.isInterrupted(yield* Fiber.await(running))).toBe(true)
      expect(Exit.isInterrupted(yield* Fiber.await(waiting))).toBe(true)
      expect(Exit.isInterrupted(yield* Effect.exit(submit(3)))).toBe(true)
    }))
})
