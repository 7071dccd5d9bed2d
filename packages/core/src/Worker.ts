import { Cause, Data, Effect, Exit, Fiber, Layer } from "effect"
import { WorkerRegistry } from "./WorkerRegistry.ts"

/** A worker's interruption cleanup (or the worker itself) failed: shutdown must exit non-zero (spec 002). */
export class WorkerStopError extends Data.TaggedError("WorkerStopError")<{
  readonly worker: string
  readonly message: string
}> {}

/**
 * Forks `loop` as a scoped fiber registered under `name`. When the scope closes the fiber is interrupted and
 * joined; anything but a clean interruption (for example the fenced database write a worker makes when its
 * provider call is aborted) fails the finalizer, so the process exits non-zero. A worker therefore turns a
 * failed cleanup into a defect (`Effect.orDie`) instead of swallowing it.
 */
export interface WorkerOptions {
  /**
   * A failure of the worker (not its interruption) stops the whole process: SIGTERM to itself, so the orderly
   * shutdown runs (HTTP drain, the other workers, the pool), then exits non-zero because this worker failed. For
   * workers whose failure means the durable work cannot be trusted (spec 002: "Database errors and invalid
   * durable envelopes stop the root worker"); a supervisor restarts the process and stale-claim rules recover.
   */
  readonly stopProcessOnFailure?: boolean
}

export const forkWorker = <E, R>(name: string, loop: Effect.Effect<unknown, E, R>, options: WorkerOptions = {}) =>
  Effect.gen(function* () {
    const registry = yield* WorkerRegistry
    yield* registry.register(name)
    const fiber = yield* registry.markRunning(name).pipe(
      Effect.zipRight(loop),
      // A worker that dies while running shows up in /ready; a failure during its interruption is reported
      // by the finalizer below instead.
      Effect.onExit((exit) =>
        Exit.isFailure(exit) && !Cause.isInterrupted(exit.cause)
          ? Effect.zipRight(
            registry.markFailed(name),
            Effect.zipRight(
              Effect.logError(`worker ${name} failed`, exit.cause),
              options.stopProcessOnFailure === true
                ? Effect.zipRight(
                  Effect.logError(`worker ${name} failed: stopping the process`),
                  Effect.sync(() => process.kill(process.pid, "SIGTERM"))
                )
                : Effect.void
            )
          )
          : Effect.void
      ),
      Effect.annotateLogs({ worker: name }),
      Effect.forkScoped
    )
    yield* Effect.logInfo(`worker ${name} started`)

    // Added after forkScoped, so it runs first: interrupt, then join and inspect the exit that forkScoped's own
    // finalizer would discard.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        yield* registry.markStopping(name)
        yield* Effect.logInfo(`shutdown: interrupting worker ${name}`)
        const exit = yield* Fiber.interrupt(fiber)
        if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)) {
          yield* registry.markFailed(name)
          yield* Effect.logError(`shutdown: worker ${name} did not stop cleanly`, exit.cause)
          return yield* Effect.die(new WorkerStopError({ worker: name, message: `worker ${name} did not stop cleanly` }))
        }
        yield* registry.markStopped(name)
        yield* Effect.logInfo(`shutdown: worker ${name} interrupted and joined`)
      })
    )
  })

/** A worker as a layer: what the backend's worker list holds. */
export const workerLayer = <E, R>(name: string, loop: Effect.Effect<unknown, E, R>, options: WorkerOptions = {}) =>
  Layer.scopedDiscard(forkWorker(name, loop, options))
