import { describe, expect, it } from "@effect/vitest"
import { isConnectionLoss } from "../src/Storage.ts"

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
