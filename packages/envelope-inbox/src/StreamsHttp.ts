import { HttpApi, HttpApiBuilder } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { CurrentOperator, deliveryApiId, Identity, operatorActor, ProvisioningNotFound } from "@delivery/identity"
import { Effect, Option } from "effect"
import { type CorrelationId, InboxStorageUnavailable, type StreamState } from "./Domain.ts"
import { EnvelopeInbox } from "./EnvelopeInbox.ts"
import { InboxStreamsApi, StreamNotFound, type StreamView } from "./StreamsApi.ts"

const StreamsOnlyApi = HttpApi.make(deliveryApiId).add(InboxStreamsApi)

// The state's ids come from the path, already decoded as the view's branded ids.
const view = (state: StreamState, path: Pick<StreamView, "tenant" | "project" | "producer">): StreamView => ({
  ...path,
  cursor: state.cursor,
  replayFloor: state.replayFloor,
  highSequence: state.highSequence
})

const unavailable = (correlationId: string) => () =>
  Effect.fail(new InboxStorageUnavailable({ reason: "storage-unavailable", correlationId: correlationId as CorrelationId }))

/** Handlers, one call deep into `EnvelopeInbox` (and `Identity` for the tenant check). */
export const InboxStreamsHttpLive = HttpApiBuilder.group(StreamsOnlyApi, "inboxStreams", (handlers) =>
  Effect.gen(function* () {
    const inbox = yield* EnvelopeInbox
    const identity = yield* Identity
    return handlers
      .handle("stream", ({ path }) =>
        Effect.gen(function* () {
          const correlationId = yield* requestCorrelationId
          const found = yield* Effect.catchTag(inbox.stream(path), "StorageFailure", unavailable(correlationId))
          return yield* Option.match(found, {
            onNone: () => Effect.fail(new StreamNotFound({ reason: "stream-not-found", correlationId })),
            onSome: (state) => Effect.succeed(view(state, path))
          })
        }))
      .handle("raiseReplayFloor", ({ path, payload }) =>
        Effect.gen(function* () {
          const correlationId = yield* requestCorrelationId
          const actor = operatorActor(yield* CurrentOperator)
          // A stream is created by its first floor; never for a tenant that does not exist.
          if (!(yield* identity.tenantExists(path.tenant))) {
            return yield* new ProvisioningNotFound({ reason: "tenant-not-found", correlationId })
          }
          const raised = yield* inbox.raiseReplayFloorAs(path, payload.floor, { actor, correlationId }).pipe(
            Effect.catchTag("StorageFailure", unavailable(correlationId))
          )
          yield* Effect.logInfo(`operator stream action: raise replay floor ${raised.outcome}`).pipe(
            Effect.annotateLogs({ tenant: path.tenant, project: path.project, producer: path.producer, actor })
          )
          return {
            stream: view(raised.state, path),
            outcome: raised.outcome === "applied" ? "raised" as const : "unchanged" as const,
            correlationId
          }
        }))
  }))
