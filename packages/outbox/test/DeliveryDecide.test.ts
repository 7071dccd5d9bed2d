import { describe, expect, it } from "@effect/vitest"
import { ProviderHttp } from "@delivery/core"
import { Effect, TestClock } from "effect"
import { decide } from "../src/Delivery.ts"
import { NotSent, OutboxSettings } from "../src/index.ts"

const settings = OutboxSettings.pipe(Effect.provide(OutboxSettings.fromMap({
  OUTBOX_BACKOFF_BASE: "1 second", OUTBOX_BACKOFF_CAP: "1 minute", OUTBOX_BACKOFF_JITTER: "0", OUTBOX_RETRY_AFTER_MAX: "30 seconds"
})))
const start = Date.parse("2030-01-01T00:00:00Z")
const second = { attempt: 2, attempt_ceiling: 3 }
const last = { attempt: 3, attempt_ceiling: 3 }

describe("outcome decisions (spec 000: delivered, retry, dead letter)", () => {
  it.effect("a 2xx is delivered, on any attempt, the last one included", () =>
    Effect.gen(function*() {
      const s = yield* settings
      const ok = new ProviderHttp.Delivered({ code: "provider-2xx", status: 204 })
      expect(yield* decide(ok, second, s)).toEqual({ _tag: "Delivered" })
      expect(yield* decide(ok, last, s)).toEqual({ _tag: "Delivered" })
    }))

  it.effect("a 4xx is a dead letter at once (rejected, with its code) before the ceiling; a 429 is retried after its Retry-After; a failure on the last attempt is attempts-exhausted with the last code", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(start)
      const s = yield* settings
      expect(yield* decide(new ProviderHttp.Rejected({ code: "provider-4xx", status: 410 }), second, s))
        .toEqual({ _tag: "Dead", reason: "rejected", code: "provider-4xx" })
      expect(yield* decide(new ProviderHttp.Rejected({ code: "provider-4xx", status: 429, retryAfter: "5" }), second, s))
        .toEqual({ _tag: "Retry", code: "provider-429", dueAt: new Date(start + 5_000) })
      expect(yield* decide(new ProviderHttp.Temporary({ code: "provider-5xx", status: 502 }), second, s))
        .toEqual({ _tag: "Retry", code: "provider-5xx", dueAt: new Date(start + 2_000) })
      expect(yield* decide(new NotSent({ code: "target-missing" }), second, s))
        .toEqual({ _tag: "Retry", code: "target-missing", dueAt: new Date(start + 2_000) })
      expect(yield* decide(new ProviderHttp.Ambiguous({ code: "provider-timeout" }), last, s))
        .toEqual({ _tag: "Dead", reason: "attempts-exhausted", code: "provider-timeout" })
    }))
})
