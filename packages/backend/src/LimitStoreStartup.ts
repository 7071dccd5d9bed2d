import { LimitStoreInfo, LimitStoreLive } from "@delivery/core"
import { Effect, Layer } from "effect"

/**
 * Builds the process's limit store before any service (core's `LimitStoreLive`: the same instance every package's
 * limits count in) and says at start-up which one it is. With REDIS_URL a Redis that does not answer stops start-up
 * here, before a worker or the listener starts.
 */
export const LimitStoreStartupLive = Layer.effectDiscard(
  Effect.flatMap(LimitStoreInfo, (info) =>
    info.kind === "redis"
      ? Effect.logInfo(`limit store: redis at ${info.target}; every rate limit and budget is shared by the processes using it`)
      : Effect.logInfo("limit store: memory; every rate limit and budget is counted by this process alone (set REDIS_URL to share them)"))
).pipe(Layer.provideMerge(LimitStoreLive))
