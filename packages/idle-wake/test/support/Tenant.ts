import { runMigrations, WorkerRegistry } from "@delivery/core"
import { Identity } from "@delivery/identity"
import { freshDatabaseClient } from "@delivery/testing"
import { BunContext } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { Clock, Context, Duration, Effect, Layer, Option, Redacted } from "effect"
import { generateKeyPairSync, type KeyObject, randomBytes, randomUUID } from "node:crypto"
import { ApiActivity } from "../../src/ApiActivity.ts"
import { Connectors } from "../../src/Connectors.ts"
import type { SignerKeyId, StackId } from "../../src/Domain.ts"
import { DrainGate } from "../../src/DrainGate.ts"
import type { IdleWakeSettings, TenantSettings } from "../../src/IdleWakeConfig.ts"
import { idleWakeLayer } from "../../src/IdleWakeLive.ts"
import { LocalWork } from "../../src/LocalWork.ts"
import { PendingWork, type PendingWorkProbe } from "../../src/PendingWork.ts"
import {
  ASSERTION_TYPE,
  type Bytes32,
  DRAIN_READ_ACTION,
  type IncomingWakeCapability,
  type Phase,
  signObject
} from "../../src/Protocol.ts"
import { TenantDrain } from "../../src/TenantDrain.ts"

export const STACK = "stack-t" as StackId
export const AUDIENCE = "tenant:stack-t"
export const CLOUD_KEY_ID = "cloud-1"
export const cloud = generateKeyPairSync("ed25519")
export const report = generateKeyPairSync("ed25519")

export const BOTH: IncomingWakeCapability = {
  version: 1,
  profiles: [{ profile: "tenant-api-http-v2", routes: ["api"] }, { profile: "github-broker-events-v1", routes: ["connector-events"] }]
}
export const API_ONLY: IncomingWakeCapability = { version: 1, profiles: [{ profile: "tenant-api-http-v2", routes: ["api"] }] }
export const BROKER_ONLY: IncomingWakeCapability = { version: 1, profiles: [{ profile: "github-broker-events-v1", routes: ["connector-events"] }] }

export const tenantSettings = (overrides: Partial<TenantSettings> = {}): TenantSettings => ({
  stack: STACK,
  audience: AUDIENCE,
  cloudKeys: new Map([[CLOUD_KEY_ID, cloud.publicKey]]),
  reportKeyId: "report-1" as SignerKeyId,
  reportKey: Redacted.make(report.privateKey),
  githubWebhookSecret: Option.none(),
  maxAssertionLifetime: Duration.minutes(5),
  clockSkew: Duration.seconds(30),
  maxHold: Duration.minutes(2),
  ...overrides
})

export const newIdleHold = (): Bytes32 => randomBytes(32).toString("base64url") as Bytes32

export interface AssertionOptions {
  readonly version?: number
  readonly phase?: Phase
  readonly idleHold?: Bytes32
  readonly holdSeconds?: number
  readonly capability?: unknown
  readonly requestId?: string
  readonly stack?: string
  readonly audience?: string
  readonly action?: string
  readonly keyId?: string
  readonly issuedAt?: Date
  readonly expiresAt?: Date
  readonly signWith?: KeyObject
}

/** A drain assertion signed by the cloud key (or `signWith`), valid for two minutes from now by default. */
export const assertion = (options: AssertionOptions = {}) => {
  const issuedAt = options.issuedAt ?? new Date()
  const unsigned = {
    type: ASSERTION_TYPE,
    version: options.version ?? 2,
    action: options.action ?? DRAIN_READ_ACTION,
    stack: options.stack ?? STACK,
    audience: options.audience ?? AUDIENCE,
    requestId: options.requestId ?? randomUUID().replaceAll("-", ""),
    issuedAt: issuedAt.toISOString(),
    expiresAt: (options.expiresAt ?? new Date(issuedAt.getTime() + 120_000)).toISOString(),
    keyId: options.keyId ?? CLOUD_KEY_ID,
    cycle: { idleHold: options.idleHold ?? newIdleHold(), phase: options.phase ?? "initial", holdSeconds: options.holdSeconds ?? 60 },
    ...(options.capability === undefined ? {} : { idleCapabilities: options.capability })
  }
  return signObject(unsigned, options.signWith ?? cloud.privateKey)
}

export const withCapability = (capability: IncomingWakeCapability) => ({ incomingWake: capability })

/** Pending work of the backend's families, switched by the test. */
export class PendingSwitch extends Context.Tag("test/PendingSwitch")<PendingSwitch, { pending: Set<string> }>() {}

/**
 * One tenant process on a database of its own (the key projection reads every key of the database, so tests that
 * count keys need one each): migrated with the real migrations, Identity and the idle-wake layer as the backend
 * composes them, pending work switchable.
 */
export const tenantWorld = (options: {
  readonly tenant?: Option.Option<TenantSettings>
  readonly ingress?: ReadonlyArray<string>
  /** Probes of the test's own, run inside the drain's snapshot after the families' switches. */
  readonly probes?: (sql: SqlClient.SqlClient) => ReadonlyArray<PendingWorkProbe>
} = {}) =>
  Effect.gen(function* () {
    const { db, sql } = yield* freshDatabaseClient({ maxConnections: 4 })
    yield* runMigrations().pipe(Effect.provideService(SqlClient.SqlClient, sql), Effect.provide(BunContext.layer))
    const switches = { pending: new Set<string>() }
    const settings: IdleWakeSettings = { tenant: options.tenant ?? Option.some(tenantSettings()), ingress: options.ingress ?? [] }
    const families = ["outbox", "reset-mail", "receipts", "team-applications"]
    const pendingWork = Layer.succeed(
      PendingWork,
      [
        ...families.map((family) => ({ family, pending: Effect.sync(() => switches.pending.has(family)) })),
        ...(options.probes?.(sql) ?? [])
      ]
    )
    const context = yield* Layer.build(
      idleWakeLayer(settings).pipe(
        Layer.provideMerge(Layer.mergeAll(Identity.Default, WorkerRegistry.Default, pendingWork)),
        Layer.provideMerge(Layer.succeed(SqlClient.SqlClient, sql))
      )
    )
    return {
      db,
      sql,
      switches,
      context,
      drain: Context.get(context, TenantDrain),
      gate: Context.get(context, DrainGate),
      activity: Context.get(context, ApiActivity),
      identity: Context.get(context, Identity),
      connectors: Context.get(context, Connectors),
      localWork: Context.get(context, LocalWork),
      workers: Context.get(context, WorkerRegistry)
    }
  })

export const correlationId = () => randomUUID().replaceAll("-", "") as never

/** A clock standing still at `at` (milliseconds since the epoch); sleeps still take real time. */
export const clockAt = (at: number): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => at,
  unsafeCurrentTimeNanos: () => BigInt(at) * 1_000_000n,
  currentTimeMillis: Effect.succeed(at),
  currentTimeNanos: Effect.succeed(BigInt(at) * 1_000_000n),
  sleep: (duration) =>
    Effect.async<void>((resume) => {
      const timer = setTimeout(() => resume(Effect.void), Duration.toMillis(duration))
      return Effect.sync(() => clearTimeout(timer))
    })
})
