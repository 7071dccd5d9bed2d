import { HttpApi, OpenApi } from "@effect/platform"
import { IdentityApi } from "@delivery/identity"
import { HealthApi } from "./HealthApi.ts"

/**
 * The one HttpApi the backend serves. Adding a package's group is one `.add(...)` here plus its handler layer
 * in `Http.ts` (for example `.add(IdentityApi)` and `IdentityHttpLive`).
 */
export class Api extends HttpApi.make("delivery")
  .add(HealthApi)
  .add(IdentityApi)
  .annotate(OpenApi.Title, "Delivery backend")
{}
