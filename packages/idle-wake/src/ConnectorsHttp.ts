import { HttpApi, HttpApiBuilder } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { CurrentOperator, deliveryApiId, operatorActor } from "@delivery/identity"
import { Effect } from "effect"
import type { ChannelRow, ConnectionRow, EndpointRow, InstanceRow, RegistrationRow } from "./ConnectorBindings.ts"
import { type ConnectorActor, Connectors } from "./Connectors.ts"
import { IdleWakeConnectorsApi } from "./ConnectorsApi.ts"
import { storageUnavailable } from "./Domain.ts"

const ConnectorsOnlyApi = HttpApi.make(deliveryApiId).add(IdleWakeConnectorsApi)

/** The operator and the request's correlation id: what the audit row records and the answer repeats. */
const attribution = Effect.all({
  actor: Effect.map(CurrentOperator, operatorActor),
  correlationId: requestCorrelationId
}) satisfies Effect.Effect<ConnectorActor, never, CurrentOperator>

const instanceView = (row: InstanceRow) => ({
  id: row.id,
  generation: row.generation,
  state: row.state,
  enrolledAt: row.enrolledAt,
  retiredAt: row.retiredAt
})

const connectionView = (row: ConnectionRow) => ({
  id: row.id,
  tenant: row.tenantId,
  kind: row.kind,
  owner: row.owner,
  removedAt: row.removedAt,
  createdAt: row.createdAt
})

const registrationView = (row: RegistrationRow) => ({
  id: row.id,
  tenant: row.tenantId,
  connection: row.connectionId,
  owner: row.owner,
  appId: row.appId,
  installationId: row.installationId,
  state: row.state,
  completedAt: row.completedAt,
  createdAt: row.createdAt
})

const channelView = (row: ChannelRow) => ({
  id: row.id,
  tenant: row.tenantId,
  transport: row.transport,
  endpoint: row.endpointId,
  enabled: row.enabled,
  archivedAt: row.archivedAt,
  createdAt: row.createdAt
})

const endpointView = (row: EndpointRow) => ({
  id: row.id,
  tenant: row.tenantId,
  transport: row.transport,
  connectorInstance: row.connectorInstanceId,
  connection: row.connectionId,
  registration: row.registrationId,
  channel: row.channelConnectionId,
  generation: row.generation,
  archivedAt: row.archivedAt,
  archivedGeneration: row.archivedGeneration,
  createdAt: row.createdAt
})

/** Runs `change` as the operator and logs it with its attribution; refusals too (they change nothing). */
const asOperator = <A extends { readonly outcome: string }, E extends { readonly _tag: string }, R>(
  action: string,
  change: (by: ConnectorActor) => Effect.Effect<A, E, R>
) =>
  Effect.gen(function* () {
    const by = yield* attribution
    return yield* change(by).pipe(
      Effect.tap((result) => Effect.logInfo(`operator connector change: ${action} ${result.outcome}`)),
      Effect.tapError((error) =>
        Effect.logInfo(`operator connector change refused: ${action}`).pipe(
          Effect.annotateLogs({ refusal: "reason" in error ? String(error.reason) : error._tag })
        )),
      Effect.annotateLogs({ actor: by.actor }),
      Effect.map((result) => ({ ...result, correlationId: by.correlationId })),
      Effect.catchTags(storageUnavailable)
    )
  })

/** Handlers, one call deep into `Connectors`. Requires `OperatorAuthenticationLive` (from identity) and `Connectors`. */
export const IdleWakeConnectorsHttpLive = HttpApiBuilder.group(ConnectorsOnlyApi, "idleWakeConnectors", (handlers) =>
  Effect.gen(function* () {
    const connectors = yield* Connectors
    return handlers
      .handle("enrollInstance", ({ payload }) =>
        asOperator("enroll instance", (by) =>
          Effect.map(connectors.enrollInstance(payload.id, by), (result) => ({
            outcome: result.outcome,
            instance: instanceView(result.instance),
            retired: result.retired.map(instanceView)
          }))))
      .handle("addConnection", ({ payload }) =>
        asOperator("add connection", (by) =>
          Effect.map(connectors.addConnection(payload, by), (result) => ({
            outcome: result.outcome,
            connection: connectionView(result.connection)
          }))))
      .handle("removeConnection", ({ path }) =>
        asOperator("remove connection", (by) =>
          Effect.map(connectors.removeConnection(path.id, by), (result) => ({
            outcome: result.outcome,
            connection: connectionView(result.connection)
          }))))
      .handle("startRegistration", ({ path, payload }) =>
        asOperator("start registration", (by) =>
          Effect.map(connectors.startBotRegistration({ id: payload.id, connection: path.id, appId: payload.appId }, by), (result) => ({
            outcome: result.outcome,
            registration: registrationView(result.registration)
          }))))
      .handle("completeRegistration", ({ path, payload }) =>
        asOperator("complete registration", (by) =>
          Effect.map(connectors.completeBotRegistration({ id: path.id, installationId: payload.installationId }, by), (result) => ({
            outcome: result.outcome,
            registration: registrationView(result.registration)
          }))))
      .handle("addEndpoint", ({ payload }) =>
        asOperator("add endpoint", (by) =>
          Effect.map(connectors.addEndpoint(payload, by), (result) => ({
            outcome: result.outcome,
            endpoint: endpointView(result.endpoint),
            channel: result.channel === null ? null : channelView(result.channel)
          }))))
      .handle("removeEndpoint", ({ path }) =>
        asOperator("remove endpoint", (by) =>
          Effect.map(connectors.removeEndpoint(path.id, by), (result) => ({
            outcome: result.outcome,
            endpoint: endpointView(result.endpoint),
            channel: result.channel === null ? null : channelView(result.channel),
            releasedLeases: result.releasedLeases
          }))))
      .handle("state", () => connectors.state.pipe(Effect.catchTags(storageUnavailable)))
  }))
