import { BunRuntime } from "@effect/platform-bun"
import { Layer } from "effect"
import { BackendWorkers, makeApp } from "./Runtime.ts"

// Composes and launches only. SIGTERM/SIGINT interrupt the launched layer: HTTP drains, workers are joined,
// the pool is disposed; runMain exits 0 unless a finalizer failed (then 1).
Layer.launch(makeApp({ workers: BackendWorkers })).pipe(BunRuntime.runMain)
