import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { OperatorAuthentication } from "@delivery/identity"
import { Schema } from "effect"
import {
  AssertionForbidden,
  AssertionInvalid,
  AssertionReplayed,
  AssertionUnauthenticated,
  ConnectorEventRefused,
  ConnectorEventUnauthenticated,
  IdleWakeUnavailable,
  StackId,
  TenantDraining
} from "./Domain.ts"
import { ConnectorEventReceipt } from "./ConnectorEventProtocol.ts"
import { Blocker, DrainReport, HoldState } from "./Protocol.ts"

/** Decoded by the service, not by the framework, so that every way of being wrong has its own stable reason. */
export const DrainAssertionBody = Schema.Unknown.annotations({
  identifier: "DrainAssertionBody",
  description: "A drain assertion signed by the cloud control signer (docs/idle-wake.md, \"Drain assertion\")"
})

const drainReadDescription = `The cloud control signer's drain read (spec 001, docs/idle-wake.md). The body is a signed
drain assertion; the answer is this stack's signed drain report (version 1 or 2, or 3 with the incoming proof when a
version 2 read carries \`idleCapabilities.incomingWake\`). Checks in order: shape and version (422), the signer's key and
signature (401), stack, action and audience (403), expiry (401), the one-use request id (409; recorded durably before
anything is read), the capability's closed shape (422). A \`final\` read takes the idle hold (new requests get 503
\`tenant-draining\` with Retry-After) and keeps it only when it reports idle. No bearer credential, query or header is
read: nothing but the signed assertion can ask for the capability.`

/** The tenant side of idle wake: authenticated by the assertion's signature alone, not by any bearer credential. */
export class IdleWakeApi extends HttpApiGroup.make("idleWake")
  .add(
    HttpApiEndpoint.post("drainRead", "/idle-wake/v1/drain-reads")
      .setPayload(DrainAssertionBody)
      .addSuccess(DrainReport)
      .addError(AssertionUnauthenticated, { status: 401 })
      .addError(AssertionForbidden, { status: 403 })
      .addError(AssertionReplayed, { status: 409 })
      .addError(AssertionInvalid, { status: 422 })
      .addError(IdleWakeUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Answer a signed drain read with this stack's signed drain report")
      .annotate(OpenApi.Description, drainReadDescription)
  )
  .add(
    HttpApiEndpoint.post("connectorEvent", "/idle-wake/v1/connector-events")
      .setPayload(DrainAssertionBody)
      .addSuccess(ConnectorEventReceipt)
      .addError(ConnectorEventUnauthenticated, { status: 401 })
      .addError(ConnectorEventRefused, { status: 422 })
      .addError(IdleWakeUnavailable, { status: 503 })
      .addError(TenantDraining, { status: 503 })
      .annotate(OpenApi.Summary, "Record a connector event the cloud delivers (github-broker-events-v1)")
      .annotate(
        OpenApi.Description,
        `The body is an \`idle-wake/connector-event\` signed by the cloud control signer (docs/idle-wake-cloud.md). Checks in
order: shape (422 \`event-malformed\`), the signer's key and signature, stack and audience (401), GitHub's
X-Hub-Signature-256 over the payload with IDLE_WAKE_GITHUB_WEBHOOK_SECRET (422; 503 \`github-secret-unset\` without it),
the idle hold (503 \`tenant-draining\`), then the endpoint's current authorization (422
\`event-endpoint-unauthorized\`) and the receipt in one transaction. 200 \`recorded\` or \`duplicate\` acknowledges the
delivery.`
      )
  )
  .annotate(OpenApi.Title, "Idle wake")
{}

export const IdleStatus = Schema.Struct({
  configured: Schema.Boolean,
  stack: Schema.NullOr(StackId),
  /** What a version 1/2 read (no capability) would report. */
  conservative: Schema.Array(Blocker),
  /** What a version 3 read asking for both profiles would report. */
  withCapability: Schema.Array(Blocker),
  hold: HoldState
}).annotations({ identifier: "IdleStatus" })

export class IdleWakeOperatorApi extends HttpApiGroup.make("idleWakeOperator")
  .add(
    HttpApiEndpoint.get("status", "/operator/idle-wake/status")
      .addSuccess(IdleStatus)
      .addError(IdleWakeUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "What a drain read would report now (takes no hold, records nothing)")
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Idle wake (operator)")
{}
