import { HttpApiSchema } from "@effect/platform"
import { CorrelationId } from "@delivery/core"
import { Schema } from "effect"

// The refusals the HTTP edge makes itself, before or around the routes (docs/http.md lists them). Each is a
// JSON body with a stable `reason` and the request's correlation id; none quotes anything the client sent.

const base = { correlationId: CorrelationId }

export class BodyTooLarge extends Schema.TaggedError<BodyTooLarge>()(
  "BodyTooLarge",
  { ...base, reason: Schema.Literal("body-too-large"), limit: Schema.Number },
  HttpApiSchema.annotations({ status: 413, description: "The body is larger than MAX_REQUEST_BODY_BYTES (`limit`)" })
) {}

export class PathInvalid extends Schema.TaggedError<PathInvalid>()(
  "PathInvalid",
  { ...base, reason: Schema.Literal("path-invalid") },
  HttpApiSchema.annotations({ status: 400, description: "The path has a `;`, an encoded `/`, `\\`, `;` or `%`, a malformed escape or an empty segment" })
) {}

export class UriTooLong extends Schema.TaggedError<UriTooLong>()(
  "UriTooLong",
  { ...base, reason: Schema.Literal("uri-too-long"), limit: Schema.Number },
  HttpApiSchema.annotations({ status: 414, description: "The path and query are longer than `limit` characters" })
) {}

export class RouteNotFound extends Schema.TaggedError<RouteNotFound>()(
  "RouteNotFound",
  { ...base, reason: Schema.Literal("route-not-found") },
  HttpApiSchema.annotations({ status: 404, description: "No route has this method and path" })
) {}

export class BodyUnreadable extends Schema.TaggedError<BodyUnreadable>()(
  "BodyUnreadable",
  { ...base, reason: Schema.Literal("body-unreadable") },
  HttpApiSchema.annotations({ status: 400, description: "The body broke off before it was complete" })
) {}

export const IssueProblem = Schema.Literal("missing", "unexpected-member", "invalid")
export type IssueProblem = typeof IssueProblem.Type

export const Issue = Schema.Struct({
  /** A JSON pointer into the path parameters, query or body, made of member names the API declares and indexes (`*` for anything else). */
  path: Schema.String,
  problem: IssueProblem
})
export type Issue = typeof Issue.Type

export class RequestInvalid extends Schema.TaggedError<RequestInvalid>()(
  "RequestInvalid",
  { ...base, reason: Schema.Literal("request-invalid"), issues: Schema.Array(Issue).pipe(Schema.maxItems(8)) },
  HttpApiSchema.annotations({ status: 400, description: "A path parameter, query parameter, header or body member does not match the schema" })
) {}

export class InternalError extends Schema.TaggedError<InternalError>()(
  "InternalError",
  { ...base, reason: Schema.Literal("internal-error") },
  HttpApiSchema.annotations({ status: 500, description: "A defect: logged with this correlation id" })
) {}

export class ShuttingDown extends Schema.TaggedError<ShuttingDown>()(
  "ShuttingDown",
  { ...base, reason: Schema.Literal("shutting-down") },
  HttpApiSchema.annotations({ status: 503, description: "The process is stopping: retry on another connection after Retry-After" })
) {}
