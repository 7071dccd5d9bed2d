import { Context, Data, type Effect } from "effect"
import type { StackId } from "../Domain.ts"

// Spec 001, cloud side: a stack's compute is started and stopped through this port only. The local implementation
// (LocalCompute.ts) starts and stops a real tenant backend process; a hosting provider implements the same four
// operations against its own API (docs/idle-wake-cloud.md, "Compute provider").

/** Where a started stack listens: an absolute http(s) base URL without path, query, fragment or credentials. */
export interface ComputeTarget {
  readonly upstream: string
}

/** The provider could not start the stack (nothing is known to be running), with a stable code. */
export class ComputeStartFailed extends Data.TaggedError("ComputeStartFailed")<{
  readonly stack: StackId
  readonly code: "compute-unknown-stack" | "compute-start-failed" | "compute-exited"
}> {}

/**
 * How a stop ended. `Stopped`: the compute is known to be down (also when it already was). `Uncertain`: the
 * provider could not confirm it within its bound (the cloud keeps the receipt and recovers later). `Failed`: the
 * provider knows the compute is still running and did not stop it (a known sleep abort).
 */
export type StopOutcome =
  | { readonly _tag: "Stopped" }
  | { readonly _tag: "Uncertain"; readonly code: string }
  | { readonly _tag: "Failed"; readonly code: string }

export type ComputeStatus = "running" | "stopped" | "unknown"

export interface ComputeProviderShape {
  /**
   * Prepares and starts the stack's compute when it is not running, and answers where it listens; idempotent (a
   * running stack answers at once). Returning does not mean ready: the caller waits for `readiness`. May take long;
   * the caller bounds it and keeps it coalesced until it settles.
   */
  readonly prepare: (stack: StackId) => Effect.Effect<ComputeTarget, ComputeStartFailed>
  /** Whether the started compute is ready for traffic (the tenant's `/ready` answers 200). One bounded probe. */
  readonly readiness: (stack: StackId, target: ComputeTarget) => Effect.Effect<boolean>
  /** Stops the stack's compute, bounded by the provider's own stop timeout; never fails, see `StopOutcome`. */
  readonly stop: (stack: StackId) => Effect.Effect<StopOutcome>
  /** What the provider knows now, for recovery after an uncertain stop or a restart of the cloud. */
  readonly status: (stack: StackId) => Effect.Effect<ComputeStatus>
}

export class ComputeProvider extends Context.Tag("@delivery/idle-wake/ComputeProvider")<ComputeProvider, ComputeProviderShape>() {}
