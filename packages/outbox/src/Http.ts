import { HttpApi, HttpApiBuilder } from "@effect/platform"
import { CurrentIdentity, CurrentOperator, deliveryApiId, operatorActor, Permission, requirePermission } from "@delivery/identity"
import { Effect, Option } from "effect"
import { ENQUEUE_PERMISSION, OutboxApi, OutboxOperatorApi } from "./Api.ts"
import { DeliveryTargetNotFound, TenantMismatch } from "./Domain.ts"
import { Outbox } from "./Outbox.ts"

// Built against an API with the backend's id holding only these groups; the backend's
// `HttpApi.make("delivery").add(OutboxOperatorApi).add(OutboxApi)` picks the handlers up.
const OutboxOnlyApi = HttpApi.make(deliveryApiId).add(OutboxOperatorApi).add(OutboxApi)

const actor = Effect.map(CurrentOperator, operatorActor)

/** Operator handlers, one call deep into the service. */
export const OutboxOperatorHttpLive = HttpApiBuilder.group(OutboxOnlyApi, "outboxOperator", (handlers) =>
  Effect.gen(function*() {
    const outbox = yield* Outbox
    return handlers
      .handle("registerTarget", ({ path, payload }) =>
        Effect.flatMap(actor, (by) => outbox.registerTarget(path.tenant, path.project, payload.endpoint, by)))
      .handle("target", ({ path }) =>
        Effect.flatMap(outbox.target(path.tenant, path.project), Option.match({
          onNone: () => new DeliveryTargetNotFound({ reason: "delivery-target-not-found", ...path }),
          onSome: Effect.succeed
        })))
      .handle("message", ({ path }) => outbox.message(path.tenant, path.project, path.id))
      .handle("deadLetters", ({ path, urlParams }) => outbox.deadLetters(path.tenant, path.project, urlParams))
      .handle("redrive", ({ path, payload }) =>
        Effect.flatMap(actor, (by) => outbox.redrive(path.tenant, path.project, path.id, by, payload.maxAttempts)))
  }))

const enqueuePermission = Permission.make(ENQUEUE_PERMISSION)

/** Tenant handler: an API key with `outbox:enqueue` may enqueue for its own tenant only. */
export const OutboxHttpLive = HttpApiBuilder.group(OutboxOnlyApi, "outbox", (handlers) =>
  Effect.gen(function*() {
    const outbox = yield* Outbox
    return handlers.handle("enqueue", ({ payload }) =>
      Effect.gen(function*() {
        yield* requirePermission(enqueuePermission)
        const identity = yield* CurrentIdentity
        if (identity.tenant !== payload.envelope.route.tenant) return yield* new TenantMismatch({ reason: "tenant-mismatch" })
        // The payload was decoded by the same closed schema the Signer checks: a refusal there is a bug.
        return yield* Effect.catchTag(outbox.enqueue(payload), "EnvelopeInvalid", Effect.die)
      }))
  }))
