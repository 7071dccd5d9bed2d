import { SqlError } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Option, ParseResult, Schema } from "effect"
import { isConnectionLoss, type StorageFault, storageErrors } from "../src/Storage.ts"

const lost = () => new SqlError.SqlError({ message: "connection lost", cause: Object.assign(new Error("down"), { code: "08006" }) })
const unavailable = storageErrors("submit", (fault: StorageFault) => ({ _tag: "Unavailable" as const, ...fault }))

describe("storage faults", () => {
  it("a database that cannot be reached is a connection loss (class 08, shutdown, too many connections, socket errors, no code); a refused statement is not", () => {
    for (const code of ["08000", "08003", "08006", "08001", "57P01", "57P02", "57P03", "53300", "ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "unknown"]) {
      expect([code, isConnectionLoss(code)]).toEqual([code, true])
    }
    for (const code of ["42P01", "42501", "23505", "40001", "40P01", "57014", "53100", "22P02", "XX000", "P0001", "e", "Econnrefused"]) {
      expect([code, isConnectionLoss(code)]).toEqual([code, false])
    }
  })
})

describe("storageErrors", () => {
  it.effect("a failed statement and a transaction that died with its SqlError (a COMMIT whose answer was lost) are the same typed failure, with the operation and the SQLSTATE and never the driver's message", () =>
    Effect.gen(function*() {
      expect(yield* Effect.flip(unavailable(Effect.fail(lost())))).toEqual({ _tag: "Unavailable", operation: "submit", sqlstate: "08006" })
      expect(yield* Effect.flip(unavailable(Effect.die(lost())))).toEqual({ _tag: "Unavailable", operation: "submit", sqlstate: "08006" })
      const noCode = new SqlError.SqlError({ message: "socket closed", cause: new Error("closed") })
      expect(yield* Effect.flip(unavailable(Effect.die(noCode)))).toEqual({ _tag: "Unavailable", operation: "submit", sqlstate: "unknown" })
    }))

  it.effect("a row that does not decode dies, any other defect stays a defect, and any other error passes through", () =>
    Effect.gen(function*() {
      const parse = yield* Effect.flip(Schema.decodeUnknown(Schema.Number)("x"))
      const died = (exit: Exit.Exit<unknown, unknown>) => Exit.isFailure(exit) ? Option.getOrUndefined(Cause.dieOption(exit.cause)) : undefined
      expect(ParseResult.isParseError(died(yield* Effect.exit(unavailable(Effect.fail(parse)))))).toBe(true)
      const bug = new Error("bug")
      expect(died(yield* Effect.exit(unavailable(Effect.die(bug))))).toBe(bug)
      expect(yield* Effect.flip(unavailable(Effect.fail({ _tag: "Refused" as const })))).toEqual({ _tag: "Refused" })
    }))
})
