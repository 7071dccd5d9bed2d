import { Effect } from "effect"

/**
 * The requests a listener has taken and not yet answered, and a wait until there are none: what a draining listener
 * needs. Plain counting, called from Bun's `fetch` callbacks outside any fiber.
 */
export interface InFlight {
  readonly enter: () => void
  readonly leave: () => void
  readonly count: () => number
  /** Resumes once nothing is in flight (at once when nothing is); interruptible. */
  readonly idle: Effect.Effect<void>
}

export const makeInFlight = (): InFlight => {
  let count = 0
  let onIdle: (() => void) | undefined
  return {
    enter: () => {
      count += 1
    },
    leave: () => {
      count -= 1
      if (count === 0) onIdle?.()
    },
    count: () => count,
    idle: Effect.async<void>((resume) => {
      if (count === 0) return resume(Effect.void)
      onIdle = () => resume(Effect.void)
      return Effect.sync(() => {
        onIdle = undefined
      })
    })
  }
}
