import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { AccountId, Email, IdentityRateLimited, IdentityStorageUnavailable, TenantId, Unauthenticated } from "./Domain.ts"

export const SignIn = Schema.Struct({
  tenant: TenantId,
  email: Email,
  /** Never logged; checked against the stored argon2id hash. */
  password: Schema.Redacted(Schema.String.pipe(Schema.maxLength(1024)))
}).annotations({ identifier: "SignIn", parseOptions: { onExcessProperty: "error" } })

export const SessionIssued = Schema.Struct({
  tenant: TenantId,
  account: AccountId,
  /** `session_…`: a bearer for the tenant routes, in this answer only. */
  token: Schema.Redacted(Schema.String).annotations({ description: "the session bearer token: returned in this answer only" }),
  expiresAt: Schema.Date
}).annotations({ identifier: "SessionIssued" })

/**
 * Password sign-in. No bearer: the peer-keyed identity limit runs first (429 with `Retry-After`), then the
 * password check. A wrong password and an unknown address are the same 401 `unknown`, answered in similar
 * time; 401 `disabled` only after the right password.
 */
export class SessionsApi extends HttpApiGroup.make("sessions")
  .add(
    HttpApiEndpoint.post("signIn", "/api/sessions")
      .setPayload(SignIn)
      .addSuccess(SessionIssued, { status: 201 })
      .addError(Unauthenticated, { status: 401 })
      .addError(IdentityRateLimited, { status: 429 })
      .addError(IdentityStorageUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Sign in with e-mail and password: a short-lived session bearer (IDENTITY_SESSION_TTL)")
  )
  .annotate(OpenApi.Title, "Sessions")
{}
