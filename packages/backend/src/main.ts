import { BunRuntime } from "@effect/platform-bun"
import { Layer } from "effect"
import { withProcessLogging } from "./Logging.ts"
import { BackendWorkers, makeApp } from "./Runtime.ts"

// Composes and launches only. SIGTERM/SIGINT interrupt the launched layer: HTTP drains, workers are joined,
// the pool is disposed; runMain exits 0 unless a finalizer failed (then 1). A failure is reported in LOG_FORMAT.
Layer.launch(makeApp({ workers: BackendWorkers })).pipe(
  withProcessLogging,
  BunRuntime.runMain({ disableErrorReporting: true })
)
