import { workerLayer } from "@delivery/core"
import { Duration, Effect, Layer } from "effect"
import { systemActor } from "./KeyManagement.ts"
import { Signer } from "./Signer.ts"
import { purgeIntervalConfig } from "./SignerConfig.ts"

export const PURGE_WORKER = "signer-purge-revoked"

/**
 * One sweep: deletes the revoked keys whose replay window has passed (with their audit rows). A
 * failed sweep (the database is away) is logged and waits for the next tick: the keys it left stay
 * revoked, so nothing verifies with them meanwhile, and a later sweep removes them.
 */
export const purgeRevokedTick = Effect.gen(function* () {
  const signer = yield* Signer
  const by = yield* systemActor("signer-purge")
  const purged = yield* signer.purgeRevoked(by)
  if (purged.length > 0) {
    yield* Effect.logInfo(`purged ${purged.length} revoked signing key(s) past their replay window`).pipe(
      Effect.annotateLogs({ correlationId: by.correlationId })
    )
  }
}).pipe(
  Effect.catchTag("SignerStorageUnavailable", (error) =>
    Effect.logWarning("signing-key purge failed; retrying at the next tick").pipe(
      Effect.annotateLogs({ operation: error.operation })
    ))
)

/** Tick, then wait the interval (also after a failure), forever. Any number of processes may run it: claims SKIP LOCKED. */
export const purgeRevokedLoop = (interval: Duration.DurationInput) =>
  Effect.forever(Effect.zipRight(purgeRevokedTick, Effect.sleep(interval)))

/** The worker with an interval chosen by the caller (the backend passes its validated configuration). */
export const signerPurgeWorker = (interval: Duration.DurationInput) => workerLayer(PURGE_WORKER, purgeRevokedLoop(interval))

/** The worker reading `SIGNER_PURGE_INTERVAL` itself. */
export const SignerPurgeWorkerLive = Layer.unwrapEffect(Effect.map(purgeIntervalConfig, signerPurgeWorker))
