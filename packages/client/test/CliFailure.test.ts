import { describe, expect, it } from "@effect/vitest"
import { HelpDoc, ValidationError } from "@effect/cli"
import * as Span from "@effect/cli/HelpDoc/Span"
import { Cause, Effect, FiberRef, Option } from "effect"
import { afterEach, beforeEach, vi } from "vitest"
import { classify, classifyHere, ExitCode, report, Reported, settle, UsageError } from "../src/cli/Failure.ts"
import { JsonOutput } from "../src/cli/Output.ts"
import { lastCorrelationId } from "../src/cli/Transport.ts"
import { ProducerGaveUp } from "../src/index.ts"

// How the command line names what went wrong (docs/operations.md, "Command line"): the kind and exit code (0
// success, 1 unexpected, 2 usage, 3 refused, 4 unavailable, 130 interrupted), the stable reason, the status
// the API declares, the correlation id, and the one line (or JSON object) on stderr. Never a schema error's
// or a defect's text.

const CORRELATION = "0123456789abcdef0123456789abcdef"

let stderr: Array<string> = []
beforeEach(() => {
  stderr = []
  vi.spyOn(console, "error").mockImplementation((...args: Array<unknown>) => void stderr.push(args.map(String).join(" ")))
})
afterEach(() => void vi.restoreAllMocks())

const json = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provideService(effect, JsonOutput, true)

describe("classify: the kind, exit code and stable fields of a failure", () => {
  it("a refusal the API declares at 4xx is refused (exit 3) with its reason, that status, its own correlation id and its other scalar members as details", () => {
    // An Error's own text (message, name, stack, cause) and members that are not scalars are not details.
    const error = {
      _tag: "EnvelopeUnprocessable",
      reason: "envelope-invalid",
      correlationId: CORRELATION,
      problem: "missing-member",
      at: "/route",
      nested: { x: 1 },
      message: "m",
      name: "n",
      stack: "s",
      cause: "c"
    }
    expect(classify(error, "ffff")).toEqual({
      kind: "refused",
      exitCode: 3,
      tag: "EnvelopeUnprocessable",
      reason: "envelope-invalid",
      status: 422,
      correlationId: CORRELATION,
      details: { problem: "missing-member", at: "/route" }
    })
    // Without a correlation id of its own, the one of the answer; without other members, no details.
    expect(classify({ _tag: "EnvelopeConflict", reason: "sequence-conflict" }, "c2")).toEqual({
      kind: "refused",
      exitCode: 3,
      tag: "EnvelopeConflict",
      reason: "sequence-conflict",
      status: 409,
      correlationId: "c2",
      details: undefined
    })
    expect(classify({ _tag: "Unauthenticated", reason: "revoked" })).toMatchObject({ kind: "refused", exitCode: 3, status: 401 })
    expect(classify({ _tag: "EnvelopeConflict", reason: "sequence-conflict", retried: false, limit: 3 })).toMatchObject({ details: { retried: false, limit: 3 } })
  })

  it("a declared 429 or 5xx is unavailable (exit 4): SyncRateLimited with its retryAfter, InboxStorageUnavailable, InternalError", () => {
    expect(classify({ _tag: "SyncRateLimited", reason: "sync-rate-limited", correlationId: CORRELATION, retryAfter: 1500 })).toEqual({
      kind: "unavailable",
      exitCode: 4,
      tag: "SyncRateLimited",
      reason: "sync-rate-limited",
      status: 429,
      correlationId: CORRELATION,
      details: { retryAfter: 1500 }
    })
    expect(classify({ _tag: "InboxStorageUnavailable", reason: "storage-unavailable" })).toMatchObject({ kind: "unavailable", exitCode: 4, status: 503 })
    expect(classify({ _tag: "InternalError", reason: "internal-error" })).toMatchObject({ kind: "unavailable", exitCode: 4, status: 500 })
  })

  it("ProducerGaveUp is unavailable (exit 4) with the last error's tag as its reason and the last answer's status; without an answer, no status", () => {
    expect(classify(new ProducerGaveUp({ attempts: 8, last: "ResponseError", status: 502 }), "c1")).toEqual({
      kind: "unavailable",
      exitCode: ExitCode.unavailable,
      tag: "ProducerGaveUp",
      reason: "ResponseError",
      status: 502,
      correlationId: "c1",
      message: "the backend stayed unavailable for every attempt"
    })
    const failure = classify(new ProducerGaveUp({ attempts: 3, last: "RequestError" }))
    expect(failure).toMatchObject({ kind: "unavailable", exitCode: 4, reason: "RequestError" })
    expect(failure.status).toBeUndefined()
  })

  it("no answer (RequestError) is unavailable with the transport's reason and description, or a default message", () => {
    expect(classify({ _tag: "RequestError", reason: "Transport", description: "connection refused" })).toEqual({
      kind: "unavailable",
      exitCode: 4,
      tag: "RequestError",
      reason: "Transport",
      message: "connection refused"
    })
    expect(classify({ _tag: "RequestError", reason: "Transport" })).toMatchObject({ message: "no answer from DELIVERY_URL" })
  })

  it("an answer the API does not declare (ResponseError) is unavailable from 500 up (a proxy's page) and unexpected below, with its status", () => {
    const answered = (status: number | undefined) => classify({ _tag: "ResponseError", response: { status } }, "c3")
    expect(answered(502)).toEqual({ kind: "unavailable", exitCode: 4, tag: "ResponseError", status: 502, correlationId: "c3", message: "an answer the API does not declare" })
    expect(answered(500)).toMatchObject({ kind: "unavailable", exitCode: 4, status: 500 })
    expect(answered(499)).toMatchObject({ kind: "unexpected", exitCode: 1, status: 499 })
    expect(answered(undefined)).toMatchObject({ kind: "unexpected", exitCode: 1, status: undefined })
    expect(classify({ _tag: "ResponseError" })).toMatchObject({ kind: "unexpected", exitCode: 1, status: undefined })
  })

  it("a schema mismatch (ParseError) is unexpected (exit 1) and never quotes its text; EnvelopeInvalid is usage (exit 2) naming the problem and where", () => {
    const parse = classify({ _tag: "ParseError", message: "Expected string, actual \"device_secret\"" }, "c4")
    expect(parse).toEqual({ kind: "unexpected", exitCode: 1, tag: "ParseError", correlationId: "c4", message: "a request or an answer did not match its schema" })
    expect(JSON.stringify(parse)).not.toContain("device_secret")
    expect(classify({ _tag: "EnvelopeInvalid", reason: "envelope-invalid", problem: "unexpected-member", at: "/extra" })).toEqual({
      kind: "usage",
      exitCode: 2,
      tag: "EnvelopeInvalid",
      reason: "envelope-invalid",
      message: "unexpected-member at /extra"
    })
  })

  it("usage: a UsageError's message, a parser's ValidationError as plain text without colour codes", () => {
    expect(classify(new UsageError({ message: "OPERATOR_TOKEN is missing" }))).toEqual({ kind: "usage", exitCode: 2, tag: "UsageError", message: "OPERATOR_TOKEN is missing" })
    const parser = classify(ValidationError.invalidValue(HelpDoc.p(Span.concat(Span.text("Expected an integer for "), Span.code("--limit")))))
    expect(parser).toMatchObject({ kind: "usage", exitCode: 2, message: "Expected an integer for --limit" })
    expect(parser.message).not.toMatch(/\u001b/)
  })

  it("anything else is unexpected (exit 1) by its tag, or 'unknown' without one", () => {
    expect(classify({ _tag: "SomethingNew", reason: "x" })).toEqual({ kind: "unexpected", exitCode: 1, tag: "SomethingNew" })
    expect(classify("a string")).toEqual({ kind: "unexpected", exitCode: 1, tag: "unknown" })
    expect(classify(null)).toEqual({ kind: "unexpected", exitCode: 1, tag: "unknown" })
    expect(classify({ _tag: 7 })).toEqual({ kind: "unexpected", exitCode: 1, tag: "unknown" })
  })
})

describe("report: one line on stderr, or one JSON object with --json", () => {
  it.effect("a refusal's line names the kind, the reason, then the tag, the status, the correlation id and the details", () =>
    Effect.gen(function* () {
      yield* report(classify({ _tag: "EnvelopeUnprocessable", reason: "envelope-invalid", correlationId: CORRELATION, problem: "missing-member", at: "/route" }))
      expect(stderr).toEqual([`refused: envelope-invalid (EnvelopeUnprocessable, HTTP 422, correlation id ${CORRELATION}, problem missing-member, at /route)`])
    }))

  it.effect("without a reason the line names the tag and ends with the message; a usage line is the message alone", () =>
    Effect.gen(function* () {
      yield* report(classify({ _tag: "ParseError" }))
      yield* report(classify({ _tag: "ResponseError", response: { status: 502 } }, "c5"))
      yield* report(classify(new UsageError({ message: "--tenant is missing" })))
      yield* report(classify({ _tag: "Odd" }))
      expect(stderr).toEqual([
        "unexpected: ParseError - a request or an answer did not match its schema",
        "unavailable: ResponseError (HTTP 502, correlation id c5) - an answer the API does not declare",
        "usage: --tenant is missing",
        "unexpected: Odd"
      ])
    }))

  it.effect("with --json the failure is one JSON object of its stable fields", () =>
    Effect.gen(function* () {
      yield* json(report(classify(new ProducerGaveUp({ attempts: 2, last: "InboxStorageUnavailable", status: 503 }), "c6")))
      expect(stderr).toHaveLength(1)
      expect(JSON.parse(stderr[0]!)).toEqual({
        error: "unavailable",
        exitCode: 4,
        _tag: "ProducerGaveUp",
        reason: "InboxStorageUnavailable",
        status: 503,
        correlationId: "c6",
        message: "the backend stayed unavailable for every attempt"
      })
    }))
})

describe("settle: how a command ends", () => {
  it.effect("a failure is reported with the correlation id of the last answer and gives its exit code", () =>
    Effect.gen(function* () {
      yield* FiberRef.set(lastCorrelationId, Option.some("c7"))
      expect(yield* classifyHere({ _tag: "ParseError" })).toMatchObject({ correlationId: "c7" })
      expect(yield* settle(Cause.fail({ _tag: "EnvelopeConflict", reason: "sequence-conflict" }))).toBe(3)
      expect(stderr).toEqual(["refused: sequence-conflict (EnvelopeConflict, HTTP 409, correlation id c7)"])
    }))

  it.effect("Reported gives its exit code without a second report; a parser's error is reported only with --json (the parser printed it)", () =>
    Effect.gen(function* () {
      expect(yield* settle(Cause.fail(new Reported({ exitCode: ExitCode.refused })))).toBe(3)
      const parser = ValidationError.invalidValue(HelpDoc.p("bad --limit"))
      expect(yield* settle(Cause.fail(parser))).toBe(2)
      expect(stderr).toEqual([])
      expect(yield* json(settle(Cause.fail(parser)))).toBe(2)
      expect(JSON.parse(stderr[0]!)).toMatchObject({ error: "usage", exitCode: 2, message: "bad --limit" })
    }))

  it.effect("an interruption is exit 130 without a report; a defect is unexpected (exit 1) named by its tag, its name, or 'defect', never its message", () =>
    Effect.gen(function* () {
      expect(yield* settle(Cause.interrupt(0 as never))).toBe(130)
      expect(stderr).toEqual([])
      expect(yield* settle(Cause.die({ _tag: "Broken", message: "token device_abc" }))).toBe(1)
      expect(yield* settle(Cause.die(new TypeError("token device_abc")))).toBe(1)
      expect(yield* settle(Cause.die(42))).toBe(1)
      expect(stderr).toEqual(["unexpected: Broken", "unexpected: TypeError", "unexpected: defect"])
    }))
})
