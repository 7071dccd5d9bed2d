import { CorrelationId } from "@delivery/core"
import { Schema } from "effect"
import { StackId } from "../Domain.ts"

// Spec 001, the cloud side: stacks, their sleep and wake states, and the refusals of the wake proxy and the operator
// routes. Every refusal has a stable reason and the request's correlation id, and quotes nothing the client sent.

/**
 * A stack's state in the cloud. `draining`: a sleep cycle is reading the tenant (still up, still forwarded to).
 * `stopping`: the receipt is stored and compute is being stopped. `stop-uncertain`: the stop could not be confirmed
 * (the receipt is kept for recovery). `asleep`: stopped, waiting for a wake that matches the receipt. `waking`:
 * compute is being started. `suspended`: stopped by an operator, no wake. `archived`: gone for good.
 */
export const StackState = Schema.Literal("awake", "draining", "stopping", "stop-uncertain", "asleep", "waking", "suspended", "archived")
export type StackState = typeof StackState.Type

export const CloudProfile = Schema.Literal("tenant-api-http-v2", "github-broker-events-v1")
export type CloudProfile = typeof CloudProfile.Type

/** Why the wake proxy did not forward a request; each has one status (docs/idle-wake-cloud.md, "Refusals"). */
export const WakeRefusalReason = Schema.Literal(
  "host-unknown",
  "route-not-wakeable",
  "stack-suspended",
  "stack-archived",
  "recovery-hold",
  "wake-key-unknown",
  "source-request-budget",
  "waiting-full",
  "stack-waiting-full",
  "source-waiting-full",
  "source-wake-budget",
  "stack-wake-budget",
  "wake-budget",
  "preparations-full",
  "wake-timeout",
  "wake-failed",
  "upstream-unavailable",
  "upstream-ambiguous",
  "storage-unavailable"
)
export type WakeRefusalReason = typeof WakeRefusalReason.Type

/** The status of each refusal. 429 and 503 always carry `Retry-After`. */
export const REFUSAL_STATUS: Record<WakeRefusalReason, number> = {
  "host-unknown": 421,
  "route-not-wakeable": 503,
  "stack-suspended": 503,
  "stack-archived": 410,
  "recovery-hold": 503,
  "wake-key-unknown": 401,
  "source-request-budget": 429,
  "waiting-full": 503,
  "stack-waiting-full": 503,
  "source-waiting-full": 503,
  "source-wake-budget": 429,
  "stack-wake-budget": 429,
  "wake-budget": 429,
  "preparations-full": 503,
  "wake-timeout": 503,
  "wake-failed": 503,
  "upstream-unavailable": 502,
  "upstream-ambiguous": 502,
  "storage-unavailable": 503
}

/** The proxy's refusal body. Nothing of the request was forwarded or acknowledged. */
export class WakeRefused extends Schema.TaggedError<WakeRefused>()("WakeRefused", {
  reason: WakeRefusalReason,
  correlationId: CorrelationId,
  retryAfter: Schema.optional(Schema.Int)
}) {}

/** Operator routes: no such stack or host. */
export class CloudNotFound extends Schema.TaggedError<CloudNotFound>()("CloudNotFound", {
  reason: Schema.Literal("stack-unknown", "host-unknown"),
  correlationId: CorrelationId
}) {}

/** Operator routes: the change conflicts with the stack's state or with another stack's host. */
export class CloudConflict extends Schema.TaggedError<CloudConflict>()("CloudConflict", {
  reason: Schema.Literal("stack-exists", "host-taken", "stack-state", "stack-archived"),
  state: Schema.optional(StackState),
  correlationId: CorrelationId
}) {}

/** 503: the cloud's database cannot be reached; nothing changed. */
export class CloudUnavailable extends Schema.TaggedError<CloudUnavailable>()("CloudUnavailable", {
  reason: Schema.Literal("storage-unavailable", "compute-unavailable"),
  correlationId: CorrelationId
}) {}

/** A page position the cloud never handed out (the console's keyset lists). */
export class CloudCursorInvalid extends Schema.TaggedError<CloudCursorInvalid>()("CloudCursorInvalid", {
  reason: Schema.Literal("cursor-invalid")
}) {}

/** Database failures inside the cloud side; mapped to `CloudUnavailable` or the proxy's 503 at the edge. */
export class CloudStorageUnavailable extends Schema.TaggedError<CloudStorageUnavailable>()("CloudStorageUnavailable", {
  operation: Schema.String,
  sqlstate: Schema.String
}) {}

export { StackId }
