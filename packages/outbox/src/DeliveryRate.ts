import { RateLimiter } from "@effect/experimental"
import { Duration, Effect } from "effect"

/** What a tenant's window gave: `granted` tokens, and for how long it is empty when nothing is left. */
export interface WindowGrant {
  readonly granted: number
  /** Set when the window has no token left after this grant: the time until it resets. */
  readonly exhaustedFor: Duration.Duration | undefined
}

// Another process sharing the store may take the tokens we just learnt about; a few rounds settle it.
const ROUNDS = 3

/**
 * Takes up to `wanted` tokens from a fixed window, as many as it has left: a tenant with 2 tokens
 * and 4 due rows gets 2, not 0. `RateLimiter.consume` cannot grant part of a request (a refusal
 * reports `remaining: 0` whatever is left), so this speaks to the `RateLimiterStore` port with the
 * same arithmetic as `consume`'s fixed window (`refillRate = window / limit`, key as given). Per the
 * port's contract (memory and Redis stores alike), a refused `fixedWindow` takes nothing and returns
 * the count it would have reached, so `limit - (count - asked)` tokens are left, and exactly that
 * many are asked for next.
 */
export const takeUpTo = (
  store: RateLimiter.RateLimiterStore["Type"],
  options: { readonly key: string; readonly limit: number; readonly window: Duration.Duration; readonly wanted: number }
): Effect.Effect<WindowGrant, RateLimiter.RateLimiterError> =>
  Effect.gen(function*() {
    const { key, limit } = options
    const refillRate = Duration.unsafeDivide(options.window, limit)
    let ask = Math.min(options.wanted, limit)
    let resetAfter = Duration.zero
    for (let round = 0; round < ROUNDS && ask > 0; round++) {
      const [count, ttl] = yield* store.fixedWindow({ key, tokens: ask, refillRate, limit })
      resetAfter = Duration.millis(Math.max(1, ttl))
      if (count <= limit) return { granted: ask, exhaustedFor: count === limit ? resetAfter : undefined }
      ask = Math.min(ask, limit - (count - ask))
    }
    return { granted: 0, exhaustedFor: resetAfter }
  })
