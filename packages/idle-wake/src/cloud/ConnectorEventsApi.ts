import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { CorrelationId } from "@delivery/core"
import { Schema } from "effect"
import { DeliveryId, EventName, GithubSignature, PayloadText } from "../ConnectorEventProtocol.ts"
import { ConnectorId, StackId } from "../Domain.ts"
import { CloudNotFound, CloudUnavailable } from "./CloudDomain.ts"

const closed = { parseOptions: { onExcessProperty: "error" } } as const

/** What the GitHub broker posts: one GitHub webhook delivery for one stack's connector endpoint. */
export const ConnectorEventIntake = Schema.Struct({
  stack: StackId,
  connectorInstance: ConnectorId,
  endpoint: ConnectorId,
  /** GitHub's X-GitHub-Delivery: a repeat of it is the same event. */
  deliveryId: DeliveryId,
  /** GitHub's X-GitHub-Event. */
  event: EventName,
  /** The raw webhook body, unpadded base64url. */
  payload: PayloadText,
  /** GitHub's X-Hub-Signature-256 as received; the tenant verifies it on delivery. */
  githubSignature: GithubSignature
}).annotations({ ...closed, identifier: "ConnectorEventIntake" })

export const ConnectorEventAccepted = Schema.Struct({
  outcome: Schema.Literal("queued", "duplicate"),
  eventId: Schema.String
}).annotations({ identifier: "ConnectorEventAccepted" })

/** 401 (no or wrong broker token) or 403 (intake disabled: IDLE_WAKE_CONNECTOR_TOKEN unset). */
export class ConnectorIntakeRefused extends Schema.TaggedError<ConnectorIntakeRefused>()("ConnectorIntakeRefused", {
  reason: Schema.Literal("connector-unauthenticated", "connector-intake-disabled"),
  correlationId: CorrelationId
}, HttpApiSchema.annotations({ status: 401 })) {}

/**
 * The broker's intake of GitHub connector events (github-broker-events-v1), on the cloud's API port. The answer, 202,
 * only says the event is committed to the durable queue: delivery is settled by the stack's acknowledgement.
 */
export class IdleWakeCloudEventsApi extends HttpApiGroup.make("idleWakeCloudEvents")
  .add(
    HttpApiEndpoint.post("acceptConnectorEvent", "/cloud/v1/connector-events")
      .setPayload(ConnectorEventIntake)
      .addSuccess(ConnectorEventAccepted, { status: 202 })
      .addError(ConnectorIntakeRefused)
      .addError(CloudNotFound, { status: 404 })
      .addError(CloudUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Queue a GitHub connector event for a stack (committed before 202; a repeated delivery id is a duplicate)")
      .annotate(
        OpenApi.Description,
        "Bearer IDLE_WAKE_CONNECTOR_TOKEN (401 `connector-unauthenticated`; `connector-intake-disabled` when unset). 404 `stack-unknown` for an unknown or archived stack. The queue delivers it to the stack, waking it when its receipt binds the event's connector instance (docs/idle-wake-cloud.md)."
      )
  )
  .annotate(OpenApi.Title, "Idle wake, cloud: connector events")
{}
