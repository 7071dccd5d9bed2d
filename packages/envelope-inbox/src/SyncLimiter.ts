import { recordLimiterRefusal } from "@delivery/core"
import { RateLimiter } from "@effect/experimental"
import type { VerifiedIdentity } from "@delivery/identity"
import { Data, Duration, Effect } from "effect"
import { SyncLimitConfig } from "./InboxConfig.ts"

/** The limit refused this submission; `retryAfter` is in milliseconds. Never leaves the package. */
export class SyncLimitExceeded extends Data.TaggedError("SyncLimitExceeded")<{ readonly retryAfter: number }> {}

/** The limiter's store could not be reached: refuse rather than admit without a limit. */
export class SyncLimitUnavailable extends Data.TaggedError("SyncLimitUnavailable")<{}> {}

/**
 * Spec 000: "keyed only by verified tenant/account/device plus the sync-ingest purpose". Ids follow the
 * identity pattern (no `:`), so the key is unambiguous. An API key has no device; its key id stands in, and
 * a sign-in session is counted per account, so that a refused non-device caller is limited too before its
 * refusal costs an audit row.
 */
export const syncKey = (identity: VerifiedIdentity): string =>
  identity._tag === "Device"
    ? `sync-ingest:${identity.tenant}:${identity.account}:${identity.device}`
    : identity._tag === "ApiKey"
    ? `sync-ingest:${identity.tenant}:${identity.account}:api-key:${identity.keyId}`
    : `sync-ingest:${identity.tenant}:${identity.account}:session`

/**
 * The configured sync limiter (`SYNC_INGEST_LIMIT` per `SYNC_INGEST_WINDOW`, fixed window). It runs
 * after authentication and before any route, key, signature or database work. Its store is left open:
 * `SyncLimiterLive` counts in process memory; many processes share one store (e.g. Redis).
 */
export class SyncLimiter extends Effect.Service<SyncLimiter>()("@delivery/envelope-inbox/SyncLimiter", {
  effect: Effect.gen(function* () {
    const limiter = yield* RateLimiter.RateLimiter
    const { limit, window } = yield* SyncLimitConfig

    const admit = Effect.fn("SyncLimiter.admit")(function* (identity: VerifiedIdentity) {
      yield* limiter.consume({ key: syncKey(identity), limit, window, algorithm: "fixed-window", onExceeded: "fail" }).pipe(
        Effect.catchAll((error): Effect.Effect<never, SyncLimitExceeded | SyncLimitUnavailable> =>
          error.reason === "Exceeded"
            ? Effect.zipRight(
              recordLimiterRefusal("sync-ingest"),
              Effect.fail(new SyncLimitExceeded({ retryAfter: Duration.toMillis(error.retryAfter) }))
            )
            : Effect.fail(new SyncLimitUnavailable())
        )
      )
    })

    return { admit } as const
  }),
  dependencies: [RateLimiter.layer]
}) {}

