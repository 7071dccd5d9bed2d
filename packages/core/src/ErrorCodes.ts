import { Schema } from "effect"

// Rows and logs keep these codes instead of provider bodies or raw messages,
// so the sets are closed: adding a code is a deliberate, reviewed change.

export const EndpointErrorCode = Schema.Literal(
  "endpoint-invalid-url",
  "endpoint-unsupported-scheme",
  "endpoint-insecure-scheme",
  "endpoint-has-credentials",
  "endpoint-has-query",
  "endpoint-has-fragment"
)
export type EndpointErrorCode = typeof EndpointErrorCode.Type

export const DeliveredCode = Schema.Literal("provider-2xx")
export type DeliveredCode = typeof DeliveredCode.Type

export const RejectedCode = Schema.Literal("provider-4xx", "provider-redirect")
export type RejectedCode = typeof RejectedCode.Type

// Spec 002 "Provider limits": a timeout is ambiguous, other transport failures are temporary. Our own
// interruption of a call already sent stays ambiguous (DESIGN).
export const AmbiguousCode = Schema.Literal(
  "provider-timeout",
  "provider-interrupted"
)
export type AmbiguousCode = typeof AmbiguousCode.Type

export const TemporaryCode = Schema.Literal(
  "provider-5xx",
  "provider-unexpected-status",
  "provider-connection-refused",
  "provider-connection-failed",
  "provider-connection-dropped",
  "provider-transport-error"
)
export type TemporaryCode = typeof TemporaryCode.Type

export const ProviderOutcomeCode = Schema.Union(DeliveredCode, RejectedCode, AmbiguousCode, TemporaryCode)
export type ProviderOutcomeCode = typeof ProviderOutcomeCode.Type

export const CanonicalErrorCode = Schema.Literal(
  "canonical-undefined",
  "canonical-function",
  "canonical-symbol",
  "canonical-bigint",
  "canonical-non-finite-number",
  "canonical-lone-surrogate",
  "canonical-non-plain-object",
  "canonical-cycle"
)
export type CanonicalErrorCode = typeof CanonicalErrorCode.Type
