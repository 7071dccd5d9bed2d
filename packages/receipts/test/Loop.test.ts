import { describe, expect, it } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, Option } from "effect"
import { ReceiptsStorageUnavailable } from "../src/Domain.ts"
import { InvalidDurableEnvelope, receiptLoop, ReceiptWork, ReceiptWorkSettings, type TickResult } from "../src/ReceiptWork.ts"
import { defaultTiming } from "./support/Work.ts"

// The root worker's loop (docs/receipts.md, "The worker"): a tick that fails because the database cannot be reached
// at all is waited out; any other failed tick stops the loop, and with it the process. The ticks here are scripted
// (each tick's own rules are tested on real PostgreSQL in Work.test.ts and Rules.test.ts): this is the loop's rule.

const idle: TickResult = { recovered: 0, attempt: Option.none() }

/** Runs the loop over ticks that end as `script` says, one entry per tick; returns how it ended and the ticks run. */
const loopOver = (script: ReadonlyArray<ReceiptsStorageUnavailable | InvalidDurableEnvelope | "idle">) =>
  Effect.gen(function* () {
    let ticks = 0
    const work = ReceiptWork.make({
      tick: () => {
        const next = script[ticks++]
        // The tick's declared error leaves out the invalid durable envelope it stops with (its cause is passed on as is).
        return next === undefined ? Effect.never : next === "idle" ? Effect.succeed(idle) : Effect.fail(next as ReceiptsStorageUnavailable)
      },
      runInline: () => Effect.void
    })
    const exit = yield* receiptLoop.pipe(
      Effect.provideService(ReceiptWork, work),
      Effect.provideService(ReceiptWorkSettings, { timing: { ...defaultTiming, pollInterval: Duration.millis(1) }, provider: Option.none() }),
      Effect.timeout("2 seconds"),
      Effect.exit
    )
    return { failure: Exit.isFailure(exit) ? Cause.failureOption(exit.cause) : Option.none(), ticks }
  })

const unavailable = (sqlstate: string) => new ReceiptsStorageUnavailable({ operation: "claim", sqlstate })

describe("the receipt worker's loop", () => {
  it.live("a database it cannot reach (connection refused or cut, class 08, a shutdown 57P01) is waited out: the loop goes on to the next tick", () =>
    Effect.gen(function* () {
      const { failure, ticks } = yield* loopOver([unavailable("08006"), "idle", unavailable("ECONNREFUSED"), unavailable("57P01"), unavailable("42P01")])
      expect(ticks).toBe(5)
      expect(failure).toEqual(Option.some(unavailable("42P01")))
    }))

  it.live("an invalid durable envelope stops the loop at once", () =>
    Effect.gen(function* () {
      const broken = new InvalidDurableEnvelope({ effect: "e1" })
      const { failure, ticks } = yield* loopOver([broken, "idle"])
      expect(ticks).toBe(1)
      expect(failure).toEqual(Option.some(broken))
    }))

  it.live("any other database error stops the loop at once: an undefined table, a permission, a constraint", () =>
    Effect.gen(function* () {
      for (const sqlstate of ["42P01", "42501", "23505"]) {
        const { failure, ticks } = yield* loopOver([unavailable(sqlstate), "idle"])
        expect(ticks).toBe(1)
        expect(failure).toEqual(Option.some(unavailable(sqlstate)))
      }
    }))
})
