import { HttpApi, OpenApi } from "@effect/platform"
import { EnvelopeInboxApi, InboxStreamsApi } from "@delivery/envelope-inbox"
import { IdentityApi, ProvisioningApi, SessionsApi } from "@delivery/identity"
import { OutboxApi, OutboxOperatorApi } from "@delivery/outbox"
import { PasswordResetApi, ResetMailOperatorApi } from "@delivery/reset-mail"
import { ReceiptsApi, ReceiptsOperatorApi } from "@delivery/receipts"
import { SignerApi } from "@delivery/signer"
import { IdleWakeApi, IdleWakeConnectorsApi, IdleWakeOperatorApi, TenantDraining } from "@delivery/idle-wake"
import { TeamApplicationsApi, TeamApplicationsOperatorApi } from "@delivery/team-applications"
import { HealthApi } from "./HealthApi.ts"
import { withEdgeErrors } from "./EdgeErrors.ts"
import { withoutDecodeError } from "./RequestInvalid.ts"

/**
 * The one HttpApi the backend serves. Adding a package's group is one `.add(...)` here plus its handler layer
 * in `Http.ts` (for example `.add(IdentityApi)` and `IdentityHttpLive`).
 */
export class Api extends withEdgeErrors(HttpApi.make("delivery")
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
  .add(IdleWakeConnectorsApi))
  // Idle wake's gate answers it before routing while the idle hold lasts (docs/idle-wake.md).
  .addError(TenantDraining, { status: 503 })
  .annotate(OpenApi.Title, "Delivery backend")
  .annotate(OpenApi.Transform, withoutDecodeError)
{}
