import { HelpDoc, ValidationError } from "@effect/cli"
import { Cause, Console, Data, Effect, FiberRef, Option } from "effect"
import type { ProducerGaveUp } from "../Producer.ts"
import { JsonOutput } from "./Output.ts"
import { statusOf } from "./Statuses.ts"
import { lastCorrelationId } from "./Transport.ts"

/** Stable exit codes (docs/operations.md, "Command line"): scripts branch on them. */
export const ExitCode = {
  success: 0,
  unexpected: 1,
  usage: 2,
  refused: 3,
  unavailable: 4,
  interrupted: 130
} as const
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode]

type Kind = "usage" | "refused" | "unavailable" | "unexpected"
const codeOf: Record<Kind, ExitCode> = { usage: 2, refused: 3, unavailable: 4, unexpected: 1 }

/** Bad arguments, a missing or invalid environment variable, an unreadable input file. Never quotes a secret. */
export class UsageError extends Data.TaggedError("UsageError")<{ readonly message: string }> {}

/** Already written to stderr (each refused event of `envelopes send`): only the exit code is left to give. */
// Stryker disable next-line StringLiteral: settle tells it apart by its class, never by this tag
export class Reported extends Data.TaggedError("Reported")<{ readonly exitCode: ExitCode }> {}

export interface Failure {
  readonly kind: Kind
  readonly exitCode: ExitCode
  readonly tag: string
  readonly reason?: string | undefined
  readonly status?: number | undefined
  readonly correlationId?: string | undefined
  readonly message?: string | undefined
  /** The refusal's other members: stable codes and bounds (`detail`, `code`, `minLength`, …), never a payload. */
  readonly details?: Readonly<Record<string, string | number | boolean>> | undefined
}

const field = (error: unknown, name: string): string | undefined =>
  typeof error === "object" && error !== null && name in error && typeof (error as Record<string, unknown>)[name] === "string"
    ? (error as Record<string, string>)[name]
    : undefined

const known = new Set(["_tag", "reason", "correlationId", "message", "name", "stack", "cause"])

const detailsOf = (error: object): Record<string, string | number | boolean> | undefined => {
  const entries = Object.entries(error).filter(([key, value]) =>
    !known.has(key) && (typeof value === "string" || typeof value === "number" || typeof value === "boolean"))
  return entries.length === 0 ? undefined : Object.fromEntries(entries)
}

const ansi = /\u001b\[[0-9;]*m/g

const failure = (kind: Kind, tag: string, details: Omit<Failure, "kind" | "exitCode" | "tag"> = {}): Failure => ({
  kind,
  exitCode: codeOf[kind],
  tag,
  ...details
})

/**
 * What went wrong, by the error's `_tag` and, for the server's refusals, the status the API declares for it.
 * Only stable codes and ids are kept: a schema error's or a defect's text may quote an answer (an issued
 * token), so neither is ever shown.
 */
export const classify = (error: unknown, correlationId?: string): Failure => {
  const tag = field(error, "_tag") ?? "unknown"
  if (ValidationError.isValidationError(error)) {
    return failure("usage", tag, { message: HelpDoc.toAnsiText(error.error).replace(ansi, "").trim() })
  }
  if (error instanceof UsageError) return failure("usage", tag, { message: error.message })
  const status = statusOf(tag)
  if (Option.isSome(status)) {
    const details = {
      reason: field(error, "reason"),
      status: status.value,
      correlationId: field(error, "correlationId") ?? correlationId,
      // A declared `_tag` was read from it, so it is an object.
      details: detailsOf(error as object)
    }
    return failure(status.value === 429 || status.value >= 500 ? "unavailable" : "refused", tag, details)
  }
  switch (tag) {
    case "ProducerGaveUp":
      return failure("unavailable", tag, {
        reason: field(error, "last"),
        status: (error as Partial<ProducerGaveUp>).status,
        correlationId,
        message: "the backend stayed unavailable for every attempt"
      })
    case "RequestError":
      return failure("unavailable", tag, { reason: field(error, "reason"), message: field(error, "description") ?? "no answer from DELIVERY_URL" })
    case "ResponseError": {
      // An answer the API does not declare: a proxy's 502/503/504 page is unavailability, anything else a surprise.
      const code = (error as { response?: { status?: number } }).response?.status
      const kind = (code ?? 0) >= 500 ? "unavailable" : "unexpected"
      return failure(kind, tag, { status: code, correlationId, message: "an answer the API does not declare" })
    }
    case "ParseError":
      return failure("unexpected", tag, { correlationId, message: "a request or an answer did not match its schema" })
    case "EnvelopeInvalid":
      return failure("usage", tag, { reason: field(error, "reason"), message: `${field(error, "problem")} at ${field(error, "at")}` })
    default:
      return failure("unexpected", tag)
  }
}

const line = (f: Failure): string => {
  const details = [
    f.reason === undefined ? undefined : f.tag,
    f.status === undefined ? undefined : `HTTP ${f.status}`,
    f.correlationId === undefined ? undefined : `correlation id ${f.correlationId}`,
    ...Object.entries(f.details ?? {}).map(([key, value]) => `${key} ${value}`)
  ].filter((part) => part !== undefined)
  const head = `${f.kind}: ${f.reason ?? (f.kind === "usage" ? f.message ?? f.tag : f.tag)}`
  const tail = f.kind !== "usage" && f.message !== undefined ? ` - ${f.message}` : ""
  return `${head}${details.length > 0 ? ` (${details.join(", ")})` : ""}${tail}`
}

/** One line on stderr; with `--json` a JSON object instead. */
export const report = (f: Failure) =>
  Effect.flatMap(JsonOutput, (json) =>
    json
      ? Console.error(JSON.stringify({
        error: f.kind,
        exitCode: f.exitCode,
        _tag: f.tag,
        reason: f.reason,
        status: f.status,
        correlationId: f.correlationId,
        message: f.message,
        details: f.details
      }))
      : Console.error(line(f)))

/** The correlation id of the last answer this fiber received, for a failure that does not carry its own. */
export const classifyHere = (error: unknown) =>
  Effect.map(FiberRef.get(lastCorrelationId), (id) => classify(error, Option.getOrUndefined(id)))

/** Reports how the command ended and gives its exit code. */
export const settle = (cause: Cause.Cause<unknown>): Effect.Effect<ExitCode> =>
  Effect.gen(function* () {
    const failed = Cause.failureOption(cause)
    if (Option.isSome(failed)) {
      const error = failed.value
      if (error instanceof Reported) return error.exitCode
      const f = yield* classifyHere(error)
      // The parser has already printed its own message (and the help it points to) on stderr.
      if (!ValidationError.isValidationError(error) || (yield* JsonOutput)) yield* report(f)
      return f.exitCode
    }
    if (Cause.isInterruptedOnly(cause)) return ExitCode.interrupted
    const defect = Option.getOrUndefined(Cause.dieOption(cause))
    yield* report(failure("unexpected", field(defect, "_tag") ?? field(defect, "name") ?? "defect"))
    return ExitCode.unexpected
  })
