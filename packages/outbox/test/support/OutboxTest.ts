import { RateLimiter } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { KeyId, KeySource, privateKeyFromSeed, ProjectId, RawPublicKey, rawPublicKey, Signer, TenantId } from "@delivery/signer"
import { LoopbackProvider } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect, Layer } from "effect"
import {
  type EnqueueRequest,
  HttpSenderLive,
  Outbox,
  OutboxDelivery,
  type OutboxSender,
  OutboxSettings,
  type Settings,
  type SignRequest
} from "../../src/index.ts"

/** Deterministic Ed25519 seeds, so the fixture process and the tests hold the same keys. */
export const seedOf = (n: number) => new Uint8Array(Array.from({ length: 32 }, (_, i) => (n * 37 + i) & 0xff))
export const publicKeyOf = (n: number) => RawPublicKey.make(rawPublicKey(privateKeyFromSeed(seedOf(n))))

/** Every tenant a suite uses signs with seed 1 under key id `k1` (and seed 2 under `k2`, for rotation). */
export const TENANTS = ["acme", "beta", "gamma", "crash", "stale", "rate-a", "rate-b", "rotated"] as const
export const KeySourceLive = KeySource.layerMemory(
  TENANTS.flatMap((tenant) => [
    { tenant: TenantId.make(tenant), keyId: KeyId.make("k1"), seed: seedOf(1) },
    { tenant: TenantId.make(tenant), keyId: KeyId.make("k2"), seed: seedOf(2) }
  ])
)

/** Fast, valid settings for tests: small timeouts so a hang or drop resolves in well under a second. */
export const fastSettings: Readonly<Record<string, string>> = {
  OUTBOX_BATCH_SIZE: "100",
  OUTBOX_CONCURRENCY: "100",
  OUTBOX_REQUEST_TIMEOUT: "400 millis",
  OUTBOX_CYCLE_TIMEOUT: "2 seconds",
  OUTBOX_LEASE: "3 seconds",
  OUTBOX_POLL_INTERVAL: "50 millis",
  OUTBOX_BACKOFF_BASE: "1 second",
  OUTBOX_BACKOFF_CAP: "1 minute",
  OUTBOX_BACKOFF_JITTER: "0"
}

/**
 * An OutboxDelivery of its own (own rate store, own settings): a second "worker". `tweak` may bend
 * the validated settings, to stand in for a process whose timers could not run (SIGSTOP); `store`
 * replaces the in-memory rate store (one that fails, for instance).
 */
export const deliveryWith = (
  sender: Layer.Layer<OutboxSender> | "http",
  variables: Readonly<Record<string, string>> = {},
  options: {
    readonly tweak?: (settings: Settings) => Settings
    readonly sql?: SqlClient.SqlClient
    readonly store?: Layer.Layer<RateLimiter.RateLimiterStore>
  } = {}
) =>
  Effect.gen(function*() {
    const senderLayer = sender === "http"
      ? HttpSenderLive.pipe(Layer.provide(KeySourceLive), Layer.provide(Layer.succeed(Signer, yield* Signer)))
      : sender
    const settings = yield* OutboxSettings.pipe(Effect.provide(OutboxSettings.fromMap({ ...fastSettings, ...variables })))
    return yield* OutboxDelivery.pipe(
      Effect.provide(
        OutboxDelivery.Default.pipe(
          Layer.provide(senderLayer),
          Layer.provide(options.store ?? RateLimiter.layerStoreMemory),
          Layer.provideMerge(Layer.succeed(OutboxSettings, options.tweak ? options.tweak(settings) : settings)),
          Layer.provide(Layer.succeed(SqlClient.SqlClient, options.sql ?? (yield* SqlClient.SqlClient)))
        )
      )
    )
  })

/** Signer, Outbox, a loopback receiver and a migrated database of the suite's own. */
export const SuiteLayer = Outbox.Default.pipe(
  Layer.provideMerge(Signer.Default),
  Layer.provide(KeySourceLive),
  Layer.provide(OutboxSettings.fromMap(fastSettings)),
  Layer.provideMerge(LoopbackProvider.Default),
  Layer.provideMerge(TestDatabaseLive)
)

/** Each test starts from empty outbox tables: the worker's tick is not tenant-scoped. */
export const resetOutbox = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`TRUNCATE outbox_audit, outbox_messages, outbox_envelopes, outbox_targets`)

/** Registers the tenant's signing key (seed 1, `k1`) once, and its delivery target. */
export const setupTenant = (tenant: string, project: string, endpoint: string) =>
  Effect.gen(function*() {
    const signer = yield* Signer
    const keys = yield* signer.keys(TenantId.make(tenant))
    if (keys.length === 0) yield* signer.registerKey(TenantId.make(tenant), KeyId.make("k1"), publicKeyOf(1))
    const outbox = yield* Outbox
    return yield* outbox.registerTarget(TenantId.make(tenant), ProjectId.make(project), endpoint, "operator:test")
  })

let counter = 0

/** An enqueue request; `n` makes the event id and idempotency key unique. */
export const request = (
  tenant: string,
  project: string,
  options: { readonly key?: string; readonly title?: string; readonly maxAttempts?: number } = {}
): EnqueueRequest => {
  counter += 1
  const envelope = {
    type: "controlplane/v1",
    route: { tenant, project, producer: "scheduler" },
    eventId: `evt-${String(counter).padStart(12, "0")}-${tenant}`.slice(0, 64),
    idempotencyKey: options.key ?? `task-${counter}:proposal:1`,
    sequence: counter,
    createdAt: "2025-01-15T09:30:00.123Z",
    schemaVersion: 1,
    metadata: { kind: "task.proposed", subject: `task-${counter}`, attributes: { title: options.title ?? "Réviser" } }
  } as unknown as SignRequest
  return options.maxAttempts === undefined ? { envelope } : { envelope, maxAttempts: options.maxAttempts }
}

/** The row as the database holds it (snake_case columns). */
export const rowOf = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{
        state: string
        attempt: number
        attempt_ceiling: number
        due_at: Date | null
        last_error: string | null
        dead_reason: string | null
        lease_owner: string | null
      }>`SELECT state, attempt, attempt_ceiling, due_at, last_error, dead_reason, lease_owner FROM outbox_messages WHERE id = ${id}`,
      (rows) => rows[0]!
    ))
