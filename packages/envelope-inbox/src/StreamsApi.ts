import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { IdentityStorageUnavailable, OperatorAuthentication, ProvisioningNotFound } from "@delivery/identity"
import { ProducerId, ProjectId, TenantId } from "@delivery/signer"
import { Schema } from "effect"
import { InboxStorageUnavailable } from "./Domain.ts"

/** A stream's position as an operator sees it (docs/controlplane-inbound.md, "Streams"). */
export const StreamView = Schema.Struct({
  tenant: TenantId,
  project: ProjectId,
  producer: ProducerId,
  /** Every sequence 1..cursor is retained or closed by the floor. */
  cursor: Schema.Number,
  /** Sequences 1..replayFloor are closed: only duplicates of retained identities are acknowledged. */
  replayFloor: Schema.Number,
  /** The highest retained sequence; above the cursor there are gaps. */
  highSequence: Schema.Number
}).annotations({ identifier: "Stream" })
export type StreamView = typeof StreamView.Type

export class StreamNotFound extends Schema.TaggedError<StreamNotFound>()("StreamNotFound", {
  reason: Schema.Literal("stream-not-found"),
  correlationId: Schema.String
}) {}

export const RaiseReplayFloor = Schema.Struct({
  floor: Schema.Int.pipe(Schema.between(0, Number.MAX_SAFE_INTEGER)).annotations({
    description: "close sequences 1..floor; a floor at or below the current one changes nothing"
  })
}).annotations({ identifier: "RaiseReplayFloor", parseOptions: { onExcessProperty: "error" }, examples: [{ floor: 120 }] })

export const ReplayFloorRaised = Schema.Struct({
  stream: StreamView,
  /** `unchanged`: the floor was already at or above the requested one (a floor is never lowered). */
  outcome: Schema.Literal("raised", "unchanged"),
  correlationId: Schema.String
}).annotations({ identifier: "ReplayFloorRaised" })

const StreamPath = Schema.Struct({ tenant: TenantId, project: ProjectId, producer: ProducerId })
const stream = "/operator/tenants/:tenant/streams/:project/:producer"

/**
 * Inbound streams for operators: read a stream's cursor and floor, raise its floor (spec 000: an operator
 * writes off sequences that will never arrive). Behind `OperatorAuthentication` (401, 403, 429, 503).
 */
export class InboxStreamsApi extends HttpApiGroup.make("inboxStreams")
  .add(
    HttpApiEndpoint.get("stream", stream)
      .setPath(StreamPath)
      .addSuccess(StreamView)
      .addError(StreamNotFound, { status: 404 })
      .annotate(OpenApi.Summary, "An inbound stream's cursor, replay floor and highest retained sequence")
  )
  .add(
    HttpApiEndpoint.post("raiseReplayFloor", `${stream}/replay-floor`)
      .setPath(StreamPath)
      .setPayload(RaiseReplayFloor)
      .addSuccess(ReplayFloorRaised)
      .addError(ProvisioningNotFound, { status: 404 })
      .annotate(OpenApi.Summary, "Raise a stream's replay floor (never lowered)")
      .annotate(
        OpenApi.Description,
        "Closes sequences 1..floor and moves the cursor over them and the retained run above; creates the stream when the producer has sent nothing yet. 404 `tenant-not-found` for an unknown tenant. Audited: the change and its `inbox_stream_audit` row (also for `unchanged`) commit in one transaction."
      )
  )
  .addError(InboxStorageUnavailable, { status: 503 })
  .addError(IdentityStorageUnavailable, { status: 503 })
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Inbound streams (operator)")
{}
