import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { OutboxSettings } from "../src/index.ts"

const load = (variables: Readonly<Record<string, string>>) =>
  OutboxSettings.pipe(Effect.provide(OutboxSettings.fromMap(variables)), Effect.either)

describe("OutboxConfig: settings under which no live worker can outlast its lease", () => {
  it.effect("'OUTBOX_LEASE must exceed the cycle timeout': a lease equal to or shorter than OUTBOX_CYCLE_TIMEOUT is refused, naming OUTBOX_LEASE", () =>
    Effect.gen(function*() {
      for (const lease of ["1 minute", "59 seconds"]) {
        const refused = yield* load({ OUTBOX_CYCLE_TIMEOUT: "1 minute", OUTBOX_LEASE: lease })
        expect(refused._tag === "Left" && String(refused.left)).toContain("OUTBOX_LEASE")
      }
      const accepted = yield* load({ OUTBOX_CYCLE_TIMEOUT: "1 minute", OUTBOX_LEASE: "60001 millis" })
      expect(accepted._tag === "Right" && Duration.toMillis(accepted.right.lease)).toBe(60_001)
    }))

  it.effect("the cycle timeout must cover a whole batch of timed-out requests: OUTBOX_REQUEST_TIMEOUT x ceil(OUTBOX_BATCH_SIZE / OUTBOX_CONCURRENCY) + 1s", () =>
    Effect.gen(function*() {
      const base = { OUTBOX_BATCH_SIZE: "100", OUTBOX_CONCURRENCY: "20", OUTBOX_REQUEST_TIMEOUT: "10 seconds", OUTBOX_LEASE: "2 minutes" }
      const refused = yield* load({ ...base, OUTBOX_CYCLE_TIMEOUT: "50999 millis" })
      expect(refused._tag === "Left" && String(refused.left)).toContain("OUTBOX_CYCLE_TIMEOUT")
      expect((yield* load({ ...base, OUTBOX_CYCLE_TIMEOUT: "51 seconds" }))._tag).toBe("Right")
    }))
})
