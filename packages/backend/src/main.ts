import { BunRuntime } from "@effect/platform-bun"
import { Effect, Layer } from "effect"
import { loadConfig } from "./Config.ts"
import { withProcessLogging } from "./Logging.ts"
import { BackendWorkers, makeApp } from "./Runtime.ts"
import { stopWithSupervisor, supervise, WORKER_INDEX } from "./Supervisor.ts"

// Composes and launches only. SIGTERM/SIGINT interrupt the launched layer: HTTP drains, workers are joined,
// the pool is disposed; runMain exits 0 unless a finalizer failed (then 1). A failure is reported in LOG_FORMAT.
// With WORKERS above 1 this process only supervises that many copies of itself on one port (docs/scaling.md).
const main = Effect.flatMap(loadConfig, (config) =>
  config.workers > 1 && process.env[WORKER_INDEX] === undefined
    ? supervise({ count: config.workers, drainMs: config.shutdownDrainMs, argv: process.argv.slice(1), env: process.env })
    : Effect.zipRight(stopWithSupervisor, Layer.launch(makeApp({ workers: BackendWorkers }))).pipe(
      // A supervised process's lines say which one it is.
      (launched) => process.env[WORKER_INDEX] === undefined ? launched : Effect.annotateLogs(launched, "process", process.env[WORKER_INDEX])
    ))

main.pipe(
  withProcessLogging,
  BunRuntime.runMain({ disableErrorReporting: true })
)
