import { HttpApi, HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { deliveryApiId, withHeader } from "@delivery/identity"
import { Effect, Option, Redacted } from "effect"
import { createHash, timingSafeEqual } from "node:crypto"
import type { StackId } from "../Domain.ts"
import { IdleWakeCloudApi } from "./CloudApi.ts"
import { CloudUnavailable } from "./CloudDomain.ts"
import { CloudSettingsTag } from "./CloudConfig.ts"
import { CloudNotFound } from "./CloudDomain.ts"
import { CloudStacks } from "./CloudStacks.ts"
import { ConnectorEvents } from "./ConnectorEvents.ts"
import { ConnectorIntakeRefused, IdleWakeCloudEventsApi } from "./ConnectorEventsApi.ts"

const CloudOnlyApi = HttpApi.make(deliveryApiId).add(IdleWakeCloudApi)

/** Storage and compute failures leave as 503 with Retry-After; nothing changed. */
const edge = <A, E, R>(run: (correlationId: string) => Effect.Effect<A, E, R>) =>
  Effect.flatMap(requestCorrelationId, (correlationId) =>
    run(correlationId).pipe(
      Effect.catchIf(
        (error): error is E & { _tag: "CloudStorageUnavailable" | "ComputeStartFailed" } =>
          typeof error === "object" && error !== null && "_tag" in error &&
          (error._tag === "CloudStorageUnavailable" || error._tag === "ComputeStartFailed"),
        (error) =>
          Effect.zipRight(
            withHeader("retry-after", "1"),
            Effect.fail(new CloudUnavailable({
              reason: error._tag === "ComputeStartFailed" ? "compute-unavailable" : "storage-unavailable",
              correlationId
            }))
          )
      )
    ))

export const IdleWakeCloudHttpLive = HttpApiBuilder.group(CloudOnlyApi, "idleWakeCloud", (handlers) =>
  Effect.gen(function* () {
    const stacks = yield* CloudStacks
    const events = yield* ConnectorEvents
    const stack = (path: { readonly stack: string }) => path.stack as StackId
    return handlers
      .handle("listStacks", () => edge(() => stacks.list()))
      .handle("registerStack", ({ payload }) => edge((id) => stacks.register(payload, id)))
      .handle("getStack", ({ path }) => edge((id) => stacks.get(path.stack, id)))
      .handle("addHost", ({ path, payload }) => edge((id) => stacks.addHost(path.stack, payload.host, id)))
      .handle("removeHost", ({ path }) => edge((id) => stacks.removeHost(path.stack, path.host, id)))
      .handle("sleep", ({ path }) => edge((id) => stacks.sleep(stack(path), id)))
      .handle("wake", ({ path }) => edge((id) => stacks.wake(stack(path), id)))
      .handle("recover", ({ path }) => edge((id) => stacks.recover(stack(path), id)))
      .handle("suspend", ({ path }) => edge((id) => stacks.suspend(stack(path), id)))
      .handle("resume", ({ path }) => edge((id) => stacks.resume(stack(path), id)))
      .handle("archive", ({ path }) => edge((id) => stacks.archive(stack(path), id)))
      .handle("recoveryHold", ({ path, payload }) => edge((id) => stacks.setRecoveryHold(stack(path), payload.hold, id)))
      .handle("admission", () => stacks.admission)
      .handle("connectorEvents", () => edge(() => Effect.map(events.summary, (states) => ({ states }))))
  }))

const EventsOnlyApi = HttpApi.make(deliveryApiId).add(IdleWakeCloudEventsApi)

const digest = (text: string) => createHash("sha256").update(text).digest()

export const IdleWakeCloudEventsHttpLive = HttpApiBuilder.group(EventsOnlyApi, "idleWakeCloudEvents", (handlers) =>
  Effect.gen(function* () {
    const settings = yield* CloudSettingsTag
    const events = yield* ConnectorEvents
    // Only a digest is kept: comparing digests in constant time hides the token's length and content.
    const expected = Option.map(settings.events.token, (token) => digest(Redacted.value(token)))
    return handlers.handle("acceptConnectorEvent", ({ payload }) =>
      edge((correlationId) =>
        Effect.gen(function* () {
          const request = yield* HttpServerRequest.HttpServerRequest
          if (Option.isNone(expected)) {
            return yield* new ConnectorIntakeRefused({ reason: "connector-intake-disabled", correlationId: correlationId as never })
          }
          const bearer = /^Bearer ([\x21-\x7e]{1,512})$/.exec(request.headers["authorization"] ?? "")?.[1]
          if (bearer === undefined || !timingSafeEqual(digest(bearer), expected.value)) {
            return yield* new ConnectorIntakeRefused({ reason: "connector-unauthenticated", correlationId: correlationId as never })
          }
          const accepted = yield* events.accept({
            stack: payload.stack,
            connectorInstance: payload.connectorInstance,
            endpoint: payload.endpoint,
            deliveryId: payload.deliveryId,
            event: payload.event,
            payload: Buffer.from(payload.payload, "base64url"),
            githubSignature: payload.githubSignature
          })
          if (Option.isNone(accepted)) return yield* new CloudNotFound({ reason: "stack-unknown", correlationId: correlationId as never })
          return accepted.value
        })))
  }))
