import { HttpApiMiddleware, HttpApiSchema, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Effect, Schema } from "effect"
import {
  IdentityRateLimited,
  IdentityStorageUnavailable,
  type Permission,
  PermissionDenied,
  Unauthenticated,
  type VerifiedIdentity
} from "./Domain.ts"

/** The caller, as the Authentication middleware verified it for this request. */
export class CurrentIdentity extends Context.Tag("@delivery/identity/CurrentIdentity")<
  CurrentIdentity,
  VerifiedIdentity
>() {}

/**
 * A note that the code around a whole request may provide (one fresh note per request): the Authentication
 * middleware writes the identity it verified into it. Idle wake's local API activity reads it once the answer is
 * known (spec 001: a successful key authentication followed by a successful response), without a second lookup.
 */
export class AuthenticatedRequest extends Context.Tag("@delivery/identity/AuthenticatedRequest")<
  AuthenticatedRequest,
  { identity: VerifiedIdentity | undefined }
>() {}

// The domain errors know nothing about HTTP; their statuses are declared here, where
// they become the middleware's (and so every protected endpoint's) error responses.
export const AuthenticationFailure = Schema.Union(
  Unauthenticated.annotations(HttpApiSchema.annotations({ status: 401 })),
  IdentityRateLimited.annotations(HttpApiSchema.annotations({ status: 429 })),
  IdentityStorageUnavailable.annotations(HttpApiSchema.annotations({ status: 503 }))
)

/**
 * Bearer authentication for board/agent API keys and device credentials.
 * Its implementation (`AuthenticationLive`) applies the peer-keyed identity limit
 * before any hashing or database work, then `Identity.authenticate`.
 * 401 responses carry `WWW-Authenticate: Bearer`, 429 responses `Retry-After`.
 */
export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("@delivery/identity/Authentication", {
  failure: AuthenticationFailure,
  provides: CurrentIdentity,
  security: {
    bearer: HttpApiSecurity.bearer.pipe(
      HttpApiSecurity.annotate(
        OpenApi.Description,
        "An opaque API key (`board_…`, `agent_…`), device credential (`device_…`) or sign-in session (`session_…`)."
      )
    )
  }
}) {}

/**
 * For handlers behind `Authentication`: only API keys carry permissions, so a
 * device identity never passes. Declare `PermissionDenied` on the endpoint (403).
 */
export const requirePermission = (permission: Permission) =>
  Effect.flatMap(CurrentIdentity, (identity) =>
    identity._tag === "ApiKey" && identity.permissions.includes(permission)
      ? Effect.void
      : Effect.fail(new PermissionDenied({ permission })))
