import { HttpApi, OpenApi } from "@effect/platform"
import { EnvelopeInboxApi } from "@delivery/envelope-inbox"
import { IdentityApi } from "@delivery/identity"
import { OutboxApi, OutboxOperatorApi } from "@delivery/outbox"
import { SignerApi } from "@delivery/signer"
import { HealthApi } from "./HealthApi.ts"

/**
 * The one HttpApi the backend serves. Adding a package's group is one `.add(...)` here plus its handler layer
 * in `Http.ts` (for example `.add(IdentityApi)` and `IdentityHttpLive`).
 */
export class Api extends HttpApi.make("delivery")
  .add(HealthApi)
  .add(IdentityApi)
  .add(EnvelopeInboxApi)
  .add(SignerApi)
  .add(OutboxOperatorApi)
  .add(OutboxApi)
  .annotate(OpenApi.Title, "Delivery backend")
{}
