import { Duration, Effect, Option } from "effect"

export type Admission =
  | { readonly _tag: "Admitted" }
  | { readonly _tag: "Draining"; readonly retryAfterSeconds: number }

const ADMITTED: Admission = { _tag: "Admitted" }

/**
 * The idle hold and the requests in flight, in one piece of process memory so that "is the stack draining?" and
 * "one more request is in flight" are decided together: a request admitted an instant before a final drain read
 * takes the hold is always counted by that read (`requests-in-flight`), and a request arriving after it is always
 * refused (503 `tenant-draining` with `Retry-After`, spec 001: "an active-route race with tenant drain returns its
 * real 503 and Retry-After"). The hold ends when its time is up (monotonic clock), or when a signed release or a
 * final read that found blockers ends it.
 */
export class DrainGate extends Effect.Service<DrainGate>()("@delivery/idle-wake/DrainGate", {
  sync: () => {
    let hold: { readonly idleHold: string; readonly until: bigint } | undefined
    let inFlight = 0

    const remainingAt = (now: bigint): bigint | undefined =>
      hold !== undefined && hold.until > now ? hold.until - now : undefined

    return {
      /** Counts the request as in flight, or refuses it while the hold lasts. Pair every admission with `leave`. */
      admit: Effect.clockWith((clock) =>
        Effect.sync((): Admission => {
          const remaining = remainingAt(clock.unsafeCurrentTimeNanos())
          if (remaining === undefined) {
            inFlight += 1
            return ADMITTED
          }
          return { _tag: "Draining", retryAfterSeconds: Math.max(1, Math.ceil(Number(remaining) / 1e9)) }
        })),
      leave: Effect.sync(() => {
        inFlight -= 1
      }),
      /** Takes (or renews) the hold for this cycle's idle hold; from now on new requests are refused. */
      take: (idleHold: string, duration: Duration.Duration) =>
        Effect.clockWith((clock) =>
          Effect.sync(() => {
            hold = { idleHold, until: clock.unsafeCurrentTimeNanos() + BigInt(Duration.toMillis(duration)) * 1_000_000n }
          })),
      /** Ends the hold if it is this idle hold's and still running; true when it did. */
      release: (idleHold: string) =>
        Effect.clockWith((clock) =>
          Effect.sync(() => {
            const running = hold !== undefined && hold.idleHold === idleHold && remainingAt(clock.unsafeCurrentTimeNanos()) !== undefined
            if (hold !== undefined && hold.idleHold === idleHold) hold = undefined
            return running
          })),
      inFlight: Effect.sync(() => inFlight),
      /** The running hold's idle hold and what is left of it. */
      current: Effect.clockWith((clock) =>
        Effect.sync(() => {
          const remaining = remainingAt(clock.unsafeCurrentTimeNanos())
          return remaining === undefined || hold === undefined
            ? Option.none()
            : Option.some({ idleHold: hold.idleHold, remaining: Duration.nanos(remaining) })
        }))
    } as const
  }
}) {}
