import { CorrelationId } from "@delivery/core"
import { Schema } from "effect"

// Refusals of the connector writers: a stable reason and the request's correlation id, never a value that was sent.
// A refusal changes nothing and has no audit row.

/** 404: the row the change names does not exist. */
export class ConnectorNotFound extends Schema.TaggedError<ConnectorNotFound>()("ConnectorNotFound", {
  reason: Schema.Literal("connection-not-found", "registration-not-found", "endpoint-not-found"),
  correlationId: CorrelationId
}) {}

/** 409: the change contradicts the state it would apply to. */
export class ConnectorConflict extends Schema.TaggedError<ConnectorConflict>()("ConnectorConflict", {
  reason: Schema.Literal(
    /** A retired instance id never comes back: the cloud's queue may still hold events addressed to it. */
    "instance-retired",
    /** An endpoint binds the enrolled instance; none is enrolled. */
    "instance-missing",
    "connection-exists",
    "connection-removed",
    "connection-not-broker",
    /** A connection is removed only once its endpoints are removed. */
    "connection-has-endpoints",
    "registration-exists",
    /** The registration is of another connection, tenant or connection-event owner. */
    "registration-foreign",
    /** An endpoint needs a completed registration with an installation. */
    "registration-unsettled",
    /** The registration already completed (with another installation) or failed. */
    "registration-settled",
    "endpoint-exists",
    "channel-exists",
    "endpoint-archived",
    /** Another holder's lease on the endpoint has not expired. */
    "endpoint-leased"
  ),
  correlationId: CorrelationId
}) {}
