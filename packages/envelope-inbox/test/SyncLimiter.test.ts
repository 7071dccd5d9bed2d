import { expect, layer } from "@effect/vitest"
import { RateLimiter } from "@effect/experimental"
import { SqlCounter } from "@delivery/testing"
import { AccountId, ApiKeyId, type VerifiedIdentity } from "@delivery/identity"
import { ConfigProvider, Context, Duration, Effect, Layer, TestClock, TestContext } from "effect"
import { EnvelopeInbox, RefusalAudit, SyncLimiter } from "../src/index.ts"
import { InboxRepo } from "../src/InboxRepo.ts"
import { auditOf, generousEnv, newCorrelationId, producer, type Producer, ServicesLive } from "./support/Harness.ts"

/**
 * An inbox of its own with SYNC_INGEST_LIMIT `limit` per minute, built inside the test (under its TestClock,
 * so the limiter's window follows the clock) on the given limiter store.
 */
const inboxWith = (limit: number, store: Layer.Layer<RateLimiter.RateLimiterStore> = RateLimiter.layerStoreMemory) =>
  EnvelopeInbox.DefaultWithoutDependencies.pipe(
    Layer.provide(RefusalAudit.Default),
    Layer.provide(SyncLimiter.Default),
    Layer.provide(InboxRepo.Default),
    Layer.provide(store),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({
      ...generousEnv,
      SYNC_INGEST_LIMIT: String(limit),
      SYNC_INGEST_WINDOW: "1 minute"
    })))))
  )

const submit = (context: Context.Context<EnvelopeInbox>, identity: VerifiedIdentity, envelope: Record<string, unknown>) =>
  Effect.flatMap(EnvelopeInbox, (inbox) =>
    inbox.receive({ identity, correlationId: newCorrelationId(), body: new TextEncoder().encode(JSON.stringify(envelope)) })).pipe(
      Effect.provide(context),
      Effect.match({ onFailure: (e) => ({ outcome: e.reason, retryAfter: "retryAfter" in e ? e.retryAfter : undefined }), onSuccess: (a) => ({ outcome: a.outcome, retryAfter: undefined }) })
    )

const device = (p: Producer) => ({ _tag: "Device", tenant: p.tenant, account: p.account, device: "d-1" }) as VerifiedIdentity

const apiKey = (p: Producer, keyId: string, account: string = p.account) =>
  ({ _tag: "ApiKey", tenant: p.tenant, account: AccountId.make(account), keyId: ApiKeyId.make(keyId), kind: "agent", permissions: [] }) as unknown as VerifiedIdentity

layer(ServicesLive(), { excludeTestServices: true })("spec 000: the configured sync limiter", (it) => {
  it.effect("SYNC_INGEST_LIMIT per SYNC_INGEST_WINDOW is a fixed window: once spent, submissions are refused until the window is over (Retry-After says when), not as tokens trickle back", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
          const context = yield* Layer.build(inboxWith(2))
          expect(yield* submit(context, device(p), p.envelope({ sequence: 1 }))).toEqual({ outcome: "accepted", retryAfter: undefined })
          expect(yield* submit(context, device(p), p.envelope({ sequence: 2 }))).toEqual({ outcome: "accepted", retryAfter: undefined })
          // Half the window and a second on: a token bucket would have one token back; the window still holds.
          yield* TestClock.adjust(Duration.seconds(31))
          expect(yield* submit(context, device(p), p.envelope({ sequence: 3 }))).toEqual({ outcome: "sync-rate-limited", retryAfter: 29_000 })
          yield* TestClock.adjust(Duration.seconds(29))
          expect(yield* submit(context, device(p), p.envelope({ sequence: 3 }))).toEqual({ outcome: "accepted", retryAfter: undefined })
        }).pipe(Effect.provide(TestContext.TestContext))
      )
    }))

  it.effect("the limiter is keyed only by the verified identity: an API key (no device) is limited by its own key id, so another API key of the account, or of another account, keeps its budget", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      yield* Effect.scoped(
        Effect.gen(function* () {
          const context = yield* Layer.build(inboxWith(1))
          const envelope = p.envelope({ sequence: 1 })
          const outcomes = []
          for (const identity of [apiKey(p, "key-a"), apiKey(p, "key-a"), apiKey(p, "key-b"), apiKey(p, "key-c", "another-account")]) {
            outcomes.push((yield* submit(context, identity, envelope)).outcome)
          }
          expect(outcomes).toEqual(["device-credential-required", "sync-rate-limited", "device-credential-required", "device-credential-required"])
        })
      )
      // An API key has no device: its refusals are audited with device NULL.
      expect((yield* auditOf(p.tenant)).map((row) => [row.account, row.device, row.reason])).toEqual([
        [p.account, null, "device-credential-required"],
        [p.account, null, "device-credential-required"],
        ["another-account", null, "device-credential-required"],
        // The window of key-a's one rate-limited refusal, written by RefusalAudit when its scope closed.
        [p.account, null, "sync-rate-limited"]
      ])
    }))

  it.effect("If the limiter's store fails, the request is refused (503 storage-unavailable), never admitted without a limit, and costs no database work", () =>
    Effect.gen(function* () {
      const p = yield* producer()
      const failing = Layer.succeed(RateLimiter.RateLimiterStore, RateLimiter.RateLimiterStore.of({
        fixedWindow: () => Effect.fail(new RateLimiter.RateLimitStoreError({ message: "store unreachable" })),
        tokenBucket: () => Effect.dieMessage("the sync limiter is a fixed window")
      }))
      const counter = yield* SqlCounter
      yield* Effect.scoped(
        Effect.gen(function* () {
          const context = yield* Layer.build(inboxWith(1000, failing))
          const correlationId = newCorrelationId()
          const before = yield* counter.count
          const refused = yield* Effect.flip(Effect.flatMap(EnvelopeInbox, (inbox) =>
            inbox.receive({ identity: device(p), correlationId, body: new TextEncoder().encode(JSON.stringify(p.envelope({ sequence: 1 }))) })
          ).pipe(Effect.provide(context)))
          expect(refused).toEqual(expect.objectContaining({ _tag: "InboxStorageUnavailable", reason: "storage-unavailable", correlationId }))
          expect((yield* counter.count) - before).toBe(0)
        })
      )
      expect(yield* auditOf(p.tenant)).toEqual([])
    }))
})
