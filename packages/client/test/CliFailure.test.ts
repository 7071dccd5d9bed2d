import { describe, expect, it } from "@effect/vitest"
import { classify, ExitCode } from "../src/cli/Failure.ts"
import { ProducerGaveUp } from "../src/index.ts"

// How the command line names a producer that gave up (docs/operations.md, "Command line": exit 4, unavailable).

describe("the command line's classification of a producer that gave up", () => {
  it("ProducerGaveUp is unavailable (exit 4) with the last error's tag as its reason and the last answer's status", () => {
    expect(classify(new ProducerGaveUp({ attempts: 8, last: "ResponseError", status: 502 }), "c1")).toEqual({
      kind: "unavailable",
      exitCode: ExitCode.unavailable,
      tag: "ProducerGaveUp",
      reason: "ResponseError",
      status: 502,
      correlationId: "c1",
      message: "the backend stayed unavailable for every attempt"
    })
  })

  it("without an answer (no connection), ProducerGaveUp carries no status", () => {
    const failure = classify(new ProducerGaveUp({ attempts: 3, last: "RequestError" }))
    expect(failure).toMatchObject({ kind: "unavailable", exitCode: 4, reason: "RequestError" })
    expect(failure.status).toBeUndefined()
  })
})
