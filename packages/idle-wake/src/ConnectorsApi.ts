import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { CorrelationId } from "@delivery/core"
import { AccountId, OperatorAuthentication, TenantId } from "@delivery/identity"
import { Schema } from "effect"
import { ConnectionKind } from "./ConnectorBindings.ts"
import { ConnectorConflict, ConnectorNotFound } from "./ConnectorErrors.ts"
import { ConnectorId, IdleWakeUnavailable } from "./Domain.ts"
import { Blocker } from "./Protocol.ts"

// The operator's writers of the GitHub connector state (spec 001, github-broker-events-v1). Views carry ids, states
// and times, never a credential reference.

const closed = { parseOptions: { onExcessProperty: "error" } } as const

/** A GitHub app or installation id: a positive integer (stored as bigint). */
const GithubId = Schema.Int.pipe(Schema.between(1, Number.MAX_SAFE_INTEGER))

export const EnrollInstance = Schema.Struct({ id: ConnectorId }).annotations({ ...closed, identifier: "EnrollConnectorInstance" })

export const AddConnection = Schema.Struct({
  id: ConnectorId,
  tenant: TenantId,
  kind: ConnectionKind,
  /** The original connection-event owner: the account the connection's events belong to. */
  owner: AccountId
}).annotations({ ...closed, identifier: "AddGithubConnection" })

export const StartRegistration = Schema.Struct({ id: ConnectorId, appId: GithubId })
  .annotations({ ...closed, identifier: "StartGithubBotRegistration" })

export const CompleteRegistration = Schema.Struct({ installationId: GithubId })
  .annotations({ ...closed, identifier: "CompleteGithubBotRegistration" })

export const AddEndpoint = Schema.Struct({
  id: ConnectorId,
  /** The id of the paired channel connection, created with the endpoint. */
  channel: ConnectorId,
  connection: ConnectorId,
  registration: ConnectorId
}).annotations({ ...closed, identifier: "AddGithubEndpoint" })

export const InstanceView = Schema.Struct({
  id: Schema.String,
  generation: Schema.Int,
  state: Schema.String,
  enrolledAt: Schema.Date,
  retiredAt: Schema.NullOr(Schema.Date)
}).annotations({ identifier: "ConnectorInstanceView" })

export const ConnectionView = Schema.Struct({
  id: Schema.String,
  tenant: Schema.String,
  kind: Schema.String,
  owner: Schema.String,
  removedAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date
}).annotations({ identifier: "GithubConnectionView" })

export const RegistrationView = Schema.Struct({
  id: Schema.String,
  tenant: Schema.String,
  connection: Schema.String,
  owner: Schema.String,
  /** Decimal text: the column is a bigint. */
  appId: Schema.String,
  installationId: Schema.NullOr(Schema.String),
  state: Schema.String,
  completedAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date
}).annotations({ identifier: "GithubBotRegistrationView" })

export const ChannelView = Schema.Struct({
  id: Schema.String,
  tenant: Schema.String,
  transport: Schema.String,
  endpoint: Schema.NullOr(Schema.String),
  enabled: Schema.Boolean,
  archivedAt: Schema.NullOr(Schema.Date),
  createdAt: Schema.Date
}).annotations({ identifier: "ChannelConnectionView" })

export const EndpointView = Schema.Struct({
  id: Schema.String,
  tenant: Schema.String,
  transport: Schema.String,
  connectorInstance: Schema.String,
  connection: Schema.String,
  registration: Schema.NullOr(Schema.String),
  channel: Schema.String,
  generation: Schema.Int,
  archivedAt: Schema.NullOr(Schema.Date),
  archivedGeneration: Schema.NullOr(Schema.Int),
  createdAt: Schema.Date
}).annotations({ identifier: "GithubEndpointView" })

/** What a change did; `correlationId` is the one on its audit rows (and the `x-correlation-id` header). */
const change = <O extends ReadonlyArray<string>, F extends Schema.Struct.Fields>(identifier: string, outcomes: O, fields: F) =>
  Schema.Struct({ outcome: Schema.Literal(...outcomes), ...fields, correlationId: CorrelationId }).annotations({ identifier })

const enrollment = { instance: InstanceView, retired: Schema.Array(InstanceView) }
export const InstanceEnrolled = change("ConnectorInstanceEnrolled", ["enrolled"], enrollment)
export const InstanceUnchanged = change("ConnectorInstanceUnchanged", ["unchanged"], enrollment)
export const ConnectionAdded = change("GithubConnectionAdded", ["added"], { connection: ConnectionView })
export const ConnectionUnchanged = change("GithubConnectionUnchanged", ["unchanged"], { connection: ConnectionView })
export const ConnectionRemoved = change("GithubConnectionRemoved", ["removed", "unchanged"], { connection: ConnectionView })
export const RegistrationStarted = change("GithubBotRegistrationStarted", ["started"], { registration: RegistrationView })
export const RegistrationUnchanged = change("GithubBotRegistrationUnchanged", ["unchanged"], { registration: RegistrationView })
export const RegistrationCompleted = change("GithubBotRegistrationCompleted", ["completed", "unchanged"], { registration: RegistrationView })
const endpointFields = { endpoint: EndpointView, channel: Schema.NullOr(ChannelView) }
export const EndpointAdded = change("GithubEndpointAdded", ["added"], endpointFields)
export const EndpointUnchanged = change("GithubEndpointUnchanged", ["unchanged"], endpointFields)
export const EndpointRemoved = change("GithubEndpointRemoved", ["removed", "unchanged"], {
  ...endpointFields,
  releasedLeases: Schema.Int
})

export const ConnectorStateView = Schema.Struct({
  counts: Schema.Struct({
    instances: Schema.Int,
    connections: Schema.Int,
    registrations: Schema.Int,
    channels: Schema.Int,
    endpoints: Schema.Int,
    leases: Schema.Int,
    audit: Schema.Int
  }),
  /** Whether connector state alone makes the github-broker-events transport active (configuration not counted). */
  active: Schema.Boolean,
  /** The github-broker-events-v1 blockers of the current state; empty: the proof would be made. */
  blockers: Schema.Array(Blocker)
}).annotations({ identifier: "IdleWakeConnectorState" })

const IdPath = Schema.Struct({ id: ConnectorId })

const base = "/operator/idle-wake/connectors"
const audited = "The change and its `idle_wake_connector_audit` row commit in one transaction; a refusal writes nothing."

/**
 * The GitHub connector state behind the github-broker-events-v1 proof. Behind `OperatorAuthentication` (401, 403 when
 * operator routes are disabled, 429, 503). 201 created, 200 unchanged (an idempotent repeat writes nothing), 404 an
 * unknown row, 409 a change the current state refuses.
 */
export class IdleWakeConnectorsApi extends HttpApiGroup.make("idleWakeConnectors")
  .add(
    HttpApiEndpoint.post("enrollInstance", `${base}/instances`)
      .setPayload(EnrollInstance)
      .addSuccess(InstanceEnrolled, { status: 201 })
      .addSuccess(InstanceUnchanged)
      .addError(ConnectorConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Enroll the connector instance; the one enrolled before is retired")
      .annotate(OpenApi.Description, `200 when the id is already the enrolled one; 409 \`instance-retired\` for a retired id (it never comes back). ${audited}`)
  )
  .add(
    HttpApiEndpoint.post("addConnection", `${base}/connections`)
      .setPayload(AddConnection)
      .addSuccess(ConnectionAdded, { status: 201 })
      .addSuccess(ConnectionUnchanged)
      .addError(ConnectorConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Add a GitHub connection (broker, or personal MCP: always blocked, spec 001)")
      .annotate(OpenApi.Description, `409 \`connection-exists\` when the id is taken with other content or was removed. ${audited}`)
  )
  .add(
    HttpApiEndpoint.del("removeConnection", `${base}/connections/:id`)
      .setPath(IdPath)
      .addSuccess(ConnectionRemoved)
      .addError(ConnectorNotFound, { status: 404 })
      .addError(ConnectorConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Remove a GitHub connection once its endpoints are removed")
      .annotate(OpenApi.Description, `409 \`connection-has-endpoints\` while an endpoint is bound to it. ${audited}`)
  )
  .add(
    HttpApiEndpoint.post("startRegistration", `${base}/connections/:id/registrations`)
      .setPath(IdPath)
      .setPayload(StartRegistration)
      .addSuccess(RegistrationStarted, { status: 201 })
      .addSuccess(RegistrationUnchanged)
      .addError(ConnectorNotFound, { status: 404 })
      .addError(ConnectorConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Start a GitHub bot registration of a broker connection (tenant and owner are the connection's)")
      .annotate(OpenApi.Description, `Until it completes or fails, the connection's setup is unfinished and blocks sleep. ${audited}`)
  )
  .add(
    HttpApiEndpoint.post("completeRegistration", `${base}/registrations/:id/complete`)
      .setPath(IdPath)
      .setPayload(CompleteRegistration)
      .addSuccess(RegistrationCompleted)
      .addError(ConnectorNotFound, { status: 404 })
      .addError(ConnectorConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Complete a GitHub bot registration with its installation id")
      .annotate(OpenApi.Description, `409 \`registration-settled\` when it completed with another installation or failed. ${audited}`)
  )
  .add(
    HttpApiEndpoint.post("addEndpoint", `${base}/endpoints`)
      .setPayload(AddEndpoint)
      .addSuccess(EndpointAdded, { status: 201 })
      .addSuccess(EndpointUnchanged)
      .addError(ConnectorNotFound, { status: 404 })
      .addError(ConnectorConflict, { status: 409 })
      .annotate(OpenApi.Summary, "Add a GitHub endpoint and its paired channel connection, bound to the enrolled instance")
      .annotate(
        OpenApi.Description,
        `Needs the enrolled instance (409 \`instance-missing\`), a present broker connection and a completed registration of it (409 \`registration-unsettled\`, \`registration-foreign\`). ${audited}`
      )
  )
  .add(
    HttpApiEndpoint.del("removeEndpoint", `${base}/endpoints/:id`)
      .setPath(IdPath)
      .addSuccess(EndpointRemoved)
      .addError(ConnectorNotFound, { status: 404 })
      .annotate(OpenApi.Summary, "Remove a GitHub endpoint: the removal writer whose result is retained history (spec 001)")
      .annotate(
        OpenApi.Description,
        `Archives the endpoint with its timestamp and generation and clears its credential reference, archives and disables its channel connection and clears that reference, releases the endpoint's leases. Removing an archived endpoint is \`unchanged\`. ${audited}`
      )
  )
  .add(
    HttpApiEndpoint.get("state", `${base}/state`)
      .addSuccess(ConnectorStateView)
      .annotate(OpenApi.Summary, "Row counts and the github-broker-events-v1 blockers of the current connector state (no proof)")
  )
  .addError(IdleWakeUnavailable, { status: 503 })
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Idle wake connectors (operator)")
{}
