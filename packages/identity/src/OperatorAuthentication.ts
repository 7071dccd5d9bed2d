import { HttpApiMiddleware, HttpApiSchema, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Schema } from "effect"
import { IdentityRateLimited, IdentityStorageUnavailable, Unauthenticated } from "./Domain.ts"

/**
 * Who passed operator authentication. Closed (unknown members refused) and deliberately small: today
 * the only operator credential is the one in the environment; an operator-scoped key would add a
 * second `via` here rather than reuse a tenant's `VerifiedIdentity`.
 */
export const OperatorIdentity = Schema.Struct({
  kind: Schema.Literal("operator"),
  via: Schema.Literal("environment")
}).annotations({ parseOptions: { onExcessProperty: "error" }, identifier: "OperatorIdentity" })
export type OperatorIdentity = typeof OperatorIdentity.Type

/** The audit actor of an operator, e.g. `operator:environment`: names the credential, never holds it. */
export const operatorActor = (operator: OperatorIdentity): string => `${operator.kind}:${operator.via}`

export class CurrentOperator extends Context.Tag("@delivery/identity/CurrentOperator")<
  CurrentOperator,
  OperatorIdentity
>() {}

/** `OPERATOR_TOKEN` is not set: operator routes are switched off, whatever the request carries. */
export class OperatorAccessDisabled extends Schema.TaggedError<OperatorAccessDisabled>()("OperatorAccessDisabled", {
  reason: Schema.Literal("operator-routes-disabled")
}) {}

export const OperatorAuthenticationFailure = Schema.Union(
  Unauthenticated.annotations(HttpApiSchema.annotations({ status: 401 })),
  OperatorAccessDisabled.annotations(HttpApiSchema.annotations({ status: 403 })),
  IdentityRateLimited.annotations(HttpApiSchema.annotations({ status: 429 })),
  IdentityStorageUnavailable.annotations(HttpApiSchema.annotations({ status: 503 }))
)

/**
 * Bearer authentication for operator routes (key registration and rotation, later delivery targets
 * and dead letters). Its implementation (`OperatorAuthenticationLive`) applies the same peer-keyed
 * limit as `Authentication` first, then compares SHA-256 digests in constant time. Refusals: 401
 * with `WWW-Authenticate: Bearer`, 403 when operator routes are disabled, 429 with `Retry-After`.
 * The security scheme has its own name, so the OpenAPI document tells operator and tenant bearers apart.
 */
export class OperatorAuthentication extends HttpApiMiddleware.Tag<OperatorAuthentication>()(
  "@delivery/identity/OperatorAuthentication",
  {
    failure: OperatorAuthenticationFailure,
    provides: CurrentOperator,
    security: {
      operatorBearer: HttpApiSecurity.bearer.pipe(
        HttpApiSecurity.annotate(OpenApi.Description, "The operator token configured as `OPERATOR_TOKEN`.")
      )
    }
  }
) {}
