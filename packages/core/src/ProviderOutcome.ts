import { Cause, Effect, Schema } from "effect"
import { dual } from "effect/Function"
import { AmbiguousCode, DeliveredCode, RejectedCode, TemporaryCode } from "./ErrorCodes.ts"

// ---------------------------------------------------------------------------
// Outcome: the four classes every service maps to its own rule.

const status = Schema.optionalWith(Schema.Int, { exact: true })
const retryAfter = Schema.optionalWith(Schema.String, { exact: true })

/** 2xx: the provider acknowledged the request; not proof that it reached an inbox. */
export class Delivered extends Schema.TaggedClass<Delivered>()("Delivered", {
  code: DeliveredCode,
  status: Schema.Int,
  retryAfter
}) {}

/** 4xx or a redirect: permanent, retrying the same request cannot help. */
export class Rejected extends Schema.TaggedClass<Rejected>()("Rejected", {
  code: RejectedCode,
  status: Schema.Int,
  retryAfter
}) {}

/** The request may have been received and we stopped waiting: a timeout, or our own interruption after sending. */
export class Ambiguous extends Schema.TaggedClass<Ambiguous>()("Ambiguous", {
  code: AmbiguousCode,
  status,
  retryAfter
}) {}

/**
 * 5xx or a transport failure (refused, never connected, dropped mid-exchange); does not prove the
 * provider received nothing (spec 002), so callers still send a stable Idempotency-Key.
 */
export class Temporary extends Schema.TaggedClass<Temporary>()("Temporary", {
  code: TemporaryCode,
  status,
  retryAfter
}) {}

export const ProviderOutcome = Schema.Union(Delivered, Rejected, Ambiguous, Temporary)
export type ProviderOutcome = typeof ProviderOutcome.Type

// ---------------------------------------------------------------------------
// Classification: a status or a transport failure to its outcome.

// The fields are valid by construction (a status the response carried, a code from the closed set, a checked
// Retry-After), so the constructors skip their validation: on every delivery it cost more than the rest of this.
// Stryker disable next-line ObjectLiteral,BooleanLiteral: validating fields that are valid by construction changes only the CPU spent
const unchecked = { disableValidation: true } as const

export const classifyStatus = (code: number, extra: { retryAfter?: string } = {}): ProviderOutcome => {
  const fields = { status: code, ...extra }
  if (code >= 200 && code < 300) return new Delivered({ code: "provider-2xx", ...fields }, unchecked)
  if (code >= 300 && code < 400) return new Rejected({ code: "provider-redirect", ...fields }, unchecked)
  if (code >= 400 && code < 500) return new Rejected({ code: "provider-4xx", ...fields }, unchecked)
  if (code >= 500 && code < 600) return new Temporary({ code: "provider-5xx", ...fields }, unchecked)
  return new Temporary({ code: "provider-unexpected-status", ...fields }, unchecked)
}

const errorCodes = (cause: unknown): ReadonlyArray<string> => {
  // Stryker disable next-line ArrayDeclaration: the codes only feed lookups in the sets of known codes below; an extra entry in none of them changes no classification
  const codes: Array<string> = []
  let current: unknown = cause
  for (let depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
    const code = (current as { code?: unknown }).code
    // Stryker disable next-line ConditionalExpression: every known code is a string, so pushing a non-string code as well matches nothing more
    if (typeof code === "string") codes.push(code)
    current = (current as { cause?: unknown }).cause
  }
  return codes
}

// Bun reports ECONNREFUSED / ECONNRESET (older Bun: ConnectionRefused /
// ConnectionClosed); Node's undici nests the errno under `cause`.
const REFUSED = new Set(["ECONNREFUSED", "ConnectionRefused"])
// DNS, routing and TLS failures all happen before a request byte is written.
const NEVER_CONNECTED = new Set([
  "ENOTFOUND",
  "EAI_AGAIN",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "ENETDOWN",
  "EADDRNOTAVAIL",
  "FailedToOpenSocket",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "CERT_HAS_EXPIRED",
  "ERR_TLS_CERT_ALTNAME_INVALID"
])
const DROPPED = new Set(["ECONNRESET", "ConnectionClosed", "EPIPE", "UND_ERR_SOCKET", "ECONNABORTED"])

/**
 * Transport failures are all temporary (spec 002 "Provider limits": only a timeout is ambiguous); the
 * code still says which kind, for diagnostics.
 */
export const classifyTransportError = (cause: unknown): ProviderOutcome => {
  const codes = errorCodes(cause)
  if (codes.some((c) => REFUSED.has(c))) return new Temporary({ code: "provider-connection-refused" })
  if (codes.some((c) => NEVER_CONNECTED.has(c))) return new Temporary({ code: "provider-connection-failed" })
  if (codes.some((c) => DROPPED.has(c))) return new Temporary({ code: "provider-connection-dropped" })
  return new Temporary({ code: "provider-transport-error" })
}

// ---------------------------------------------------------------------------
// Interruption as an outcome.

/**
 * Runs `record` with an `Ambiguous` outcome when `self` is interrupted (for
 * example at shutdown): the fiber stays interrupted, the aborted call gets
 * recorded by the caller's own rule.
 */
export const onInterrupted: {
  <R2>(
    record: (outcome: Ambiguous) => Effect.Effect<void, never, R2>
  ): <E, R>(self: Effect.Effect<ProviderOutcome, E, R>) => Effect.Effect<ProviderOutcome, E, R | R2>
  <E, R, R2>(
    self: Effect.Effect<ProviderOutcome, E, R>,
    record: (outcome: Ambiguous) => Effect.Effect<void, never, R2>
  ): Effect.Effect<ProviderOutcome, E, R | R2>
} = dual(
  2,
  <E, R, R2>(
    self: Effect.Effect<ProviderOutcome, E, R>,
    record: (outcome: Ambiguous) => Effect.Effect<void, never, R2>
  ): Effect.Effect<ProviderOutcome, E, R | R2> =>
    Effect.onInterrupt(self, () => record(new Ambiguous({ code: "provider-interrupted" })))
)

/**
 * Turns an interruption of `self` into an `Ambiguous` value. This only sees
 * interruptions that do not also interrupt the caller (a joined child fiber,
 * a race); an interrupted caller has nobody to hand a value to, so it should
 * use `onInterrupted` instead.
 */
export const interruptionAsAmbiguous = <E, R>(
  self: Effect.Effect<ProviderOutcome, E, R>
): Effect.Effect<ProviderOutcome, E, R> =>
  Effect.catchAllCause(self, (cause) =>
    Cause.isInterruptedOnly(cause)
      ? Effect.succeed<ProviderOutcome>(new Ambiguous({ code: "provider-interrupted" }))
      : Effect.failCause(cause))
