import type { VerifiedIdentity } from "@delivery/identity"
import { Clock, Duration, Effect, Option } from "effect"

/** Spec 001: "retains ten minutes of local API activity". */
export const API_ACTIVITY_HOLD = Duration.minutes(10)

const HOLD_NANOS = BigInt(Duration.toMillis(API_ACTIVITY_HOLD)) * 1_000_000n

/** Only what counts: a current board or agent key (not a device, a session or an operator) and a 2xx answer. */
export const extendsActivity = (identity: VerifiedIdentity | undefined, status: number): boolean =>
  identity !== undefined && identity._tag === "ApiKey" && status >= 200 && status < 300

/**
 * The local API activity hold (spec 001): a successful current board or agent key authentication followed by a
 * successful response holds local API activity for ten minutes, measured on the monotonic clock (Effect's
 * `Clock.currentTimeNanos`, process.hrtime underneath; `TestClock` in tests); further success extends it.
 * Rejections, expiry, revoked membership, failed requests and drain refusals never reach `extend`. It is one number
 * in process memory: no timer, SQL, renewal or network work, and the local-work probe reads it.
 */
export class ApiActivity extends Effect.Service<ApiActivity>()("@delivery/idle-wake/ApiActivity", {
  sync: () => {
    let deadline: bigint | undefined
    return {
      /** The request's outcome: extends the hold only for what `extendsActivity` admits. */
      observe: (identity: VerifiedIdentity | undefined, status: number) =>
        extendsActivity(identity, status)
          ? Effect.clockWith((clock) =>
            Effect.sync(() => {
              const until = clock.unsafeCurrentTimeNanos() + HOLD_NANOS
              if (deadline === undefined || until > deadline) deadline = until
            }))
          : Effect.void,
      /** How much of the hold is left, if any. */
      remaining: Effect.map(Clock.currentTimeNanos, (now) =>
        deadline !== undefined && deadline > now ? Option.some(Duration.nanos(deadline - now)) : Option.none())
    } as const
  }
}) {}
