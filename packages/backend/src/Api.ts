import { HttpApi, OpenApi } from "@effect/platform"
import { JsonBodyRefused } from "@delivery/core"
import { EnvelopeInboxApi, InboxStreamsApi } from "@delivery/envelope-inbox"
import { IdentityApi, ProvisioningApi, SessionsApi } from "@delivery/identity"
import { OutboxApi, OutboxOperatorApi } from "@delivery/outbox"
import { PasswordResetApi, ResetMailOperatorApi } from "@delivery/reset-mail"
import { ReceiptsApi, ReceiptsOperatorApi } from "@delivery/receipts"
import { SignerApi } from "@delivery/signer"
import { IdleWakeApi, IdleWakeConnectorsApi, IdleWakeOperatorApi, TenantDraining } from "@delivery/idle-wake"
import { TeamApplicationsApi, TeamApplicationsOperatorApi } from "@delivery/team-applications"
import { HealthApi } from "./HealthApi.ts"
import { BodyTooLarge, BodyUnreadable, InternalError, PathInvalid, RequestInvalid, ShuttingDown, UriTooLong } from "./Refusals.ts"
import { withoutDecodeError } from "./RequestInvalid.ts"

/**
 * The one HttpApi the backend serves. Adding a package's group is one `.add(...)` here plus its handler layer
 * in `Http.ts` (for example `.add(IdentityApi)` and `IdentityHttpLive`).
 */
export class Api extends HttpApi.make("delivery")
  .add(HealthApi)
  .add(IdentityApi)
  .add(SessionsApi)
  .add(PasswordResetApi)
  .add(ProvisioningApi)
  .add(EnvelopeInboxApi)
  .add(InboxStreamsApi)
  .add(SignerApi)
  .add(OutboxOperatorApi)
  .add(OutboxApi)
  .add(ResetMailOperatorApi)
  .add(ReceiptsApi)
  .add(ReceiptsOperatorApi)
  .add(TeamApplicationsApi)
  .add(TeamApplicationsOperatorApi)
  .add(IdleWakeApi)
  .add(IdleWakeOperatorApi)
  .add(IdleWakeConnectorsApi)
  // What the HTTP edge may answer on any route (docs/http.md): listed once here, so every route documents them.
  .addError(RequestInvalid, { status: 400 })
  .addError(PathInvalid, { status: 400 })
  .addError(BodyUnreadable, { status: 400 })
  .addError(BodyTooLarge, { status: 413 })
  .addError(UriTooLong, { status: 414 })
  .addError(JsonBodyRefused, { status: 422 })
  .addError(InternalError, { status: 500 })
  .addError(ShuttingDown, { status: 503 })
  // Idle wake's gate answers it before routing while the idle hold lasts (docs/idle-wake.md).
  .addError(TenantDraining, { status: 503 })
  .annotate(OpenApi.Title, "Delivery backend")
  .annotate(OpenApi.Transform, withoutDecodeError)
{}
