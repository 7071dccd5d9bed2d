import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Authentication } from "./Authentication.ts"
import { VerifiedIdentity } from "./Domain.ts"

/**
 * The identity group. Every endpoint here sits behind `Authentication`, so each
 * one also answers 401 (Unauthenticated), 429 (IdentityRateLimited) and 503
 * (IdentityStorageUnavailable) as the middleware declares.
 */
export class IdentityApi extends HttpApiGroup.make("identity")
  .add(
    HttpApiEndpoint.get("whoami", "/api/whoami")
      .addSuccess(VerifiedIdentity)
      .annotate(OpenApi.Summary, "The verified identity of the bearer credential")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Identity")
{}
