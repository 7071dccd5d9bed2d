import { HttpApi, HttpApiBuilder } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { deliveryApiId, withHeader } from "@delivery/identity"
import { Effect } from "effect"
import { IdleWakeApi, IdleWakeOperatorApi } from "./Api.ts"
import { IdleWakeUnavailable, storageUnavailable } from "./Domain.ts"
import { ConnectorEventInbox } from "./ConnectorEventInbox.ts"
import { TenantDrain } from "./TenantDrain.ts"

const IdleWakeOnlyApi = HttpApi.make(deliveryApiId).add(IdleWakeApi).add(IdleWakeOperatorApi)

// Nothing was recorded or taken when storage failed: the same read (with a new request id) may come again soon.
const retrySoon = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.tapError(effect, (error) =>
    error instanceof IdleWakeUnavailable && error.reason === "storage-unavailable" ? withHeader("retry-after", "1") : Effect.void)

export const IdleWakeHttpLive = HttpApiBuilder.group(IdleWakeOnlyApi, "idleWake", (handlers) =>
  Effect.gen(function* () {
    const drain = yield* TenantDrain
    const events = yield* ConnectorEventInbox
    return handlers
      .handle("drainRead", ({ payload }) =>
        Effect.flatMap(requestCorrelationId, (correlationId) => drain.read(payload, correlationId)).pipe(retrySoon))
      .handle("connectorEvent", ({ payload }) =>
        Effect.flatMap(requestCorrelationId, (correlationId) => events.receive(payload, correlationId)).pipe(
          Effect.tapError((error) => (error._tag === "TenantDraining" ? withHeader("retry-after", String(error.retryAfter)) : Effect.void)),
          retrySoon
        ))
  }))

export const IdleWakeOperatorHttpLive = HttpApiBuilder.group(IdleWakeOnlyApi, "idleWakeOperator", (handlers) =>
  Effect.gen(function* () {
    const drain = yield* TenantDrain
    return handlers.handle("status", () =>
      drain.status().pipe(
        Effect.catchTags(storageUnavailable),
        retrySoon
      ))
  }))
