import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Email, OperatorAuthentication, PasswordRefused, passwordMaxLength, passwordMinLength, TenantId } from "@delivery/identity"
import { Schema } from "effect"
import { EndedState } from "./ResetMailRepo.ts"

const correlationId = Schema.String.annotations({ description: "the request's x-correlation-id" })

export const ResetRequest = Schema.Struct({ tenant: TenantId, email: Email }).annotations({
  identifier: "ResetRequest",
  parseOptions: { onExcessProperty: "error" }
})

/** The one answer to every well-formed reset request, whether or not the address has an account. */
export const ResetRequestAccepted = Schema.Struct({
  status: Schema.Literal("accepted"),
  message: Schema.String
}).annotations({ identifier: "ResetRequestAccepted" })

export const acceptedAnswer = {
  status: "accepted",
  message: "If an enabled account has this address, a reset mail is on its way."
} as const

// No length bounds in the schema (the edge's body limit bounds the request): a bound here answered 400
// `request-invalid` where the route promises 422 `password-too-long` (checked before the token) and, for an
// overlong token, the one 400 `reset-invalid`. Both checks look at the length first, before any other work.
export const ResetCompletion = Schema.Struct({
  /** Never logged. */
  token: Schema.Redacted(Schema.String).annotations({
    description: "`reset_…` from the mail's link; anything else is 400 `reset-invalid`"
  }),
  /** Never logged, stored only as an argon2id hash. */
  password: Schema.Redacted(Schema.String).annotations({
    description: `${passwordMinLength} to ${passwordMaxLength} characters, else 422 (checked before the token)`
  })
}).annotations({ identifier: "ResetCompletion", parseOptions: { onExcessProperty: "error" } })

export const ResetCompleted = Schema.Struct({ status: Schema.Literal("completed") }).annotations({ identifier: "ResetCompleted" })

/** Every reason a token cannot complete a reset (unknown, malformed, expired, used, disabled account): one answer. */
export class ResetRefused extends Schema.TaggedError<ResetRefused>()("ResetRefused", {
  reason: Schema.Literal("reset-invalid"),
  correlationId
}) {}

export class ResetRateLimited extends Schema.TaggedError<ResetRateLimited>()("ResetRateLimited", {
  reason: Schema.Literal("rate-limited"),
  retryAfterSeconds: Schema.Number,
  correlationId
}) {}

export class ResetUnavailable extends Schema.TaggedError<ResetUnavailable>()("ResetUnavailable", {
  /** `password-reset-unavailable`: PASSWORD_RESET_TOKEN_KEY is not set in this process. */
  reason: Schema.Literal("password-reset-unavailable", "storage-unavailable"),
  correlationId
}) {}

/**
 * Password reset for anyone, no bearer: rate-limited per source (PASSWORD_RESET_SOURCE_LIMIT) and, for requests,
 * per address (PASSWORD_RESET_ADDRESS_LIMIT), 429 with `Retry-After`.
 */
export class PasswordResetApi extends HttpApiGroup.make("passwordReset")
  .add(
    HttpApiEndpoint.post("requestReset", "/api/password-resets")
      .setPayload(ResetRequest)
      .addSuccess(ResetRequestAccepted, { status: 202 })
      .addError(ResetRateLimited, { status: 429 })
      .addError(ResetUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Ask for a password-reset mail")
      .annotate(
        OpenApi.Description,
        "Always 202 with the same body, in the same time (PASSWORD_RESET_RESPONSE_FLOOR_MS), whether or not the address has an enabled account. For one that has, the verification and the delivery row commit before the answer; the mail is sent by the reset-mail worker, never by this request."
      )
  )
  .add(
    HttpApiEndpoint.post("completeReset", "/api/password-resets/complete")
      .setPayload(ResetCompletion)
      .addSuccess(ResetCompleted)
      .addError(ResetRefused, { status: 400 })
      .addError(PasswordRefused, { status: 422 })
      .addError(ResetRateLimited, { status: 429 })
      .addError(ResetUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Set a new password with the token from a reset mail")
      .annotate(
        OpenApi.Description,
        "Sets the password, ends every live reset token and every session of the account, audited (`password-reset`), in one transaction. 400 `reset-invalid` for any token that cannot do that; 422 when the password is outside 12-1024 characters (checked first, before the token)."
      )
  )
  .annotate(OpenApi.Title, "Password reset")
{}

export const StateCount = Schema.Struct({
  state: Schema.Literal("pending", "sending", "delivered", "rejected", "quarantined", "stopped"),
  reason: Schema.NullOr(Schema.String),
  count: Schema.Number
}).annotations({ identifier: "ResetMailStateCount" })

export const ResetMailSummary = Schema.Struct({ counts: Schema.Array(StateCount) }).annotations({
  identifier: "ResetMailSummary"
})

export const EndedRow = Schema.Struct({
  id: Schema.String,
  tenant: Schema.String,
  state: EndedState,
  reason: Schema.String,
  attempt: Schema.Number,
  providerStatus: Schema.NullOr(Schema.Number),
  createdAt: Schema.Date,
  updatedAt: Schema.Date
}).annotations({ identifier: "ResetMailEndedRow" })

export const EndedPage = Schema.Struct({
  rows: Schema.Array(EndedRow),
  /** Pass as `after` for the next page; null on the last page. */
  next: Schema.NullOr(Schema.String)
}).annotations({ identifier: "ResetMailEndedPage" })

const UUID = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/))

export const EndedQuery = Schema.Struct({
  state: EndedState,
  reason: Schema.optional(Schema.String.pipe(Schema.pattern(/^[a-z0-9-]{1,64}$/))),
  tenant: Schema.optional(TenantId),
  after: Schema.optional(UUID),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))
})

/**
 * What happened to reset mail, for operators: counts by state and reason, and the rows that ended without
 * delivery (ids, tenant, reason, attempts; never an address or a token). A quarantined or rejected reset is not
 * sent again; the user's new request is the remedy (docs/reset-mail.md).
 */
export class ResetMailOperatorApi extends HttpApiGroup.make("resetMailOperator")
  .add(
    HttpApiEndpoint.get("summary", "/operator/reset-mail/summary")
      .addSuccess(ResetMailSummary)
      .annotate(OpenApi.Summary, "Reset-mail rows counted by state and reason")
  )
  .add(
    HttpApiEndpoint.get("ended", "/operator/reset-mail/ended")
      .setUrlParams(EndedQuery)
      .addSuccess(EndedPage)
      .annotate(OpenApi.Summary, "Rejected, quarantined or stopped reset-mail rows, by reason, at most 100 per page")
  )
  .addError(ResetUnavailable, { status: 503 })
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Reset mail (operator)")
{}
