import { Data, Deferred, Duration, Effect, Exit, Fiber, FiberId, Schedule } from "effect"

/** Set in the environment of each process a supervisor starts (0..WORKERS-1). */
export const WORKER_INDEX = "WORKER_INDEX"

interface Listening {
  readonly kind: "listening"
}

/** A supervised process tells its supervisor that its listener is open (a no-op in a process started alone). */
export const announceListening = Effect.sync(() => {
  if (process.env[WORKER_INDEX] !== undefined) process.send?.({ kind: "listening" } satisfies Listening)
})

/** Start-up failures are the same in every process: one of them stops the supervisor with its code. */
/**
 * A supervised process whose supervisor is gone (killed with SIGKILL, so it could not pass SIGTERM on) stops itself
 * the clean way, with SIGTERM, instead of serving on alone: it notices within a second that it was re-parented.
 */
export const stopWithSupervisor = Effect.sync(() => {
  if (process.env[WORKER_INDEX] === undefined) return
  const supervisor = process.ppid
  setInterval(() => {
    if (process.ppid !== supervisor) process.kill(process.pid, "SIGTERM")
  }, 1_000).unref()
})

export class WorkerStartFailed extends Data.TaggedError("WorkerStartFailed")<{ readonly message: string }> {
  constructor(index: number, exitCode: number) {
    super({ message: `backend process ${index} exited with code ${exitCode} before it listened; stopping the others` })
    this.stack = `${this.name}: ${this.message}`
  }
}

export class WorkersStopFailed extends Data.TaggedError("WorkersStopFailed")<{ readonly message: string }> {
  constructor(codes: ReadonlyArray<number | null>) {
    super({ message: `backend processes did not all stop cleanly (exit codes ${codes.map((code) => code ?? "killed").join(", ")})` })
    this.stack = `${this.name}: ${this.message}`
  }
}

export interface SupervisorOptions {
  readonly count: number
  /** SHUTDOWN_DRAIN_MS: each process drains within it; past it and a margin, the supervisor kills what is left. */
  readonly drainMs: number
  readonly argv: ReadonlyArray<string>
  readonly env: Readonly<Record<string, string | undefined>>
}

// A process that crashed after it listened is started again, after 1 s doubling to 30 s while it keeps crashing
// soon after starting; one that stayed up for a minute starts the count again.
const RESTART_DELAY = Schedule.exponential(Duration.seconds(1)).pipe(Schedule.upTo(Duration.seconds(30)))
const STABLE_AFTER = Duration.minutes(1)
const STOP_MARGIN = Duration.seconds(15)

/**
 * WORKERS=N: N backend processes on one port (SO_REUSEPORT), each with its own pool and workers. The supervisor
 * holds no listener and no database connection. SIGTERM (the interruption of this effect) is passed to every process;
 * the supervisor exits 0 only when all of them exited 0. A process that fails before it listens stops all of them
 * (start-up failures are the same in every process); one that exits later is started again.
 */
export const supervise = (options: SupervisorOptions) =>
  Effect.gen(function* () {
    const everyoneListening = yield* Deferred.make<void>()
    let listening = 0
    const exitCodes: Array<number | null> = []
    // Added first, so it runs last: after every process was stopped by SIGTERM, the supervisor exits 0 only if each
    // of them did (a start-up failure has already failed the supervisor with its own reason).
    yield* Effect.addFinalizer((exit) =>
      Exit.isInterrupted(exit) && !exitCodes.every((code) => code === 0) ? Effect.die(new WorkersStopFailed(exitCodes)) : Effect.void)

    const runOnce = (index: number) =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          const announced = Deferred.unsafeMake<void>(FiberId.none)
          const child = Bun.spawn([process.execPath, ...options.argv], {
            stdio: ["ignore", "inherit", "inherit"],
            env: { ...options.env, [WORKER_INDEX]: String(index) },
            ipc(message: unknown) {
              if (typeof message === "object" && message !== null && (message as Listening).kind === "listening") {
                Deferred.unsafeDone(announced, Exit.void)
              }
            }
          })
          return { child, announced }
        }),
        ({ announced, child }) =>
          Effect.gen(function* () {
            const startedAt = Date.now()
            const exited = Effect.promise(() => child.exited)
            const first = yield* Effect.raceFirst(Effect.map(Deferred.await(announced), () => "listening" as const), exited)
            if (first !== "listening") return { listened: false, code: first, startedAt }
            listening += 1
            yield* Effect.logInfo(`backend process ${index} listening (pid ${child.pid})`)
            if (listening === options.count) yield* Deferred.succeed(everyoneListening, undefined)
            const code = yield* exited
            listening -= 1
            return { listened: true, code, startedAt }
          }),
        // SIGTERM, then wait: each process drains its own requests and joins its own workers.
        ({ child }) =>
          Effect.gen(function* () {
            if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM")
            const code = yield* Effect.promise(() => child.exited).pipe(
              Effect.timeoutTo({
                duration: Duration.sum(Duration.millis(options.drainMs), STOP_MARGIN),
                onSuccess: (code) => code,
                onTimeout: () => {
                  child.kill("SIGKILL")
                  return null
                }
              })
            )
            exitCodes[index] = code
          })
      )

    const keepRunning = (index: number): Effect.Effect<never, WorkerStartFailed> =>
      Effect.gen(function* () {
        let delays = RESTART_DELAY
        let driver = yield* Schedule.driver(delays)
        while (true) {
          const run = yield* runOnce(index)
          if (!run.listened) return yield* Effect.fail(new WorkerStartFailed(index, run.code))
          if (Date.now() - run.startedAt >= Duration.toMillis(STABLE_AFTER)) {
            delays = RESTART_DELAY
            driver = yield* Schedule.driver(delays)
          }
          const wait = yield* Effect.orElseSucceed(driver.next(undefined), () => Duration.seconds(30))
          yield* Effect.logWarning(`backend process ${index} exited with code ${run.code}; starting it again in ${Duration.format(wait)}`)
          yield* Effect.sleep(wait)
        }
      })

    yield* Effect.logInfo(`starting ${options.count} backend processes on one port`)
    const all = yield* Effect.forkScoped(
      Effect.forEach(Array.from({ length: options.count }, (_, index) => index), keepRunning, {
        concurrency: "unbounded",
        discard: true
      })
    )
    yield* Effect.raceFirst(
      Effect.zipRight(Deferred.await(everyoneListening), Effect.logInfo(`all ${options.count} backend processes listening`)),
      Fiber.join(all)
    )
    return yield* Fiber.join(all)
  }).pipe(Effect.scoped)
