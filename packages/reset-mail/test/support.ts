import { expect } from "@effect/vitest"
import { Email, Identity, PasswordResets, TenantId } from "@delivery/identity"
import { Mailer } from "@delivery/mail"
import { LoopbackProvider, type RecordedRequest } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { ConfigProvider, Effect, Layer, Schema } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { loadResetDelivery, type WorkerSettings } from "../src/ResetMailConfig.ts"
import { ResetMailRepo } from "../src/ResetMailRepo.ts"
import { ResetMailDelivery, ResetMailSettings } from "../src/ResetMailWorker.ts"
import { ResetRequests } from "../src/ResetRequests.ts"
import { ResetTemplate, ResetTemplateDefault } from "../src/Template.ts"

// The reset-mail worker's test harness: a migrated database of the file's own, a real loopback provider, identity
// for fixtures, the real request path (ResetRequests), and workers built per test from the real configuration
// parser (loadResetDelivery), so a test can run two workers with different settings side by side.

export const TOKEN_KEY = randomBytes(32).toString("base64")
export const MAIL_TOKEN = `mail-${randomBytes(24).toString("base64url")}`

const providerOf = (env: Record<string, string>) => ConfigProvider.fromMap(new Map(Object.entries(env)))

/** Requests run with the same PASSWORD_RESET_TOKEN_KEY as the default worker. */
export const requestEnv = { PASSWORD_RESET_TOKEN_KEY: TOKEN_KEY }

export const SuiteLayer = Layer.mergeAll(
  Identity.Default,
  ResetRequests.Default.pipe(Layer.provide(PasswordResets.Default), Layer.provideMerge(ResetMailRepo.Default)),
  LoopbackProvider.Default
).pipe(
  Layer.provide(Layer.setConfigProvider(providerOf(requestEnv))),
  Layer.provideMerge(TestDatabaseLive)
)

export const workerEnv = (provider: LoopbackProvider): Record<string, string> => ({
  PASSWORD_RESET_DELIVERY: "enabled",
  PASSWORD_RESET_TOKEN_KEY: TOKEN_KEY,
  PASSWORD_RESET_FROM: "no-reply@acme.example",
  PASSWORD_RESET_FROM_NAME: "Acme",
  PASSWORD_RESET_ORIGIN: "https://app.acme.example",
  PASSWORD_RESET_POLL_INTERVAL: "1 second",
  PASSWORD_RESET_STALE_CLAIM: "60 seconds",
  PASSWORD_RESET_RETRY_BASE: "200 millis",
  PASSWORD_RESET_RETRY_CAP: "1500 millis",
  MAIL_PROVIDER_URL: provider.urlFor("/emails"),
  MAIL_PROVIDER_TOKEN: MAIL_TOKEN,
  MAIL_PROVIDER_TIMEOUT: "300 millis"
})

/**
 * A worker (ResetMailDelivery) with the default environment plus `env`, the default template unless `template`
 * is given, and its own PasswordResets reading PASSWORD_RESET_TOKEN_KEY from that environment.
 */
export const workerWith = (
  options: { readonly env?: Record<string, string>; readonly template?: Layer.Layer<ResetTemplate> } = {}
) =>
  Effect.gen(function* () {
    const provider = yield* LoopbackProvider
    const env = { ...workerEnv(provider), ...options.env }
    const loaded = yield* loadResetDelivery(false).pipe(Effect.withConfigProvider(providerOf(env)), Effect.orDie)
    if (loaded.mode !== "enabled") return yield* Effect.dieMessage("worker environment is not enabled")
    const settings: WorkerSettings = loaded.settings
    const layer = ResetMailDelivery.Default.pipe(
      Layer.provide(PasswordResets.Default),
      Layer.provide(Mailer.layerWith(settings.mail)),
      Layer.provide(options.template ?? ResetTemplateDefault),
      Layer.provide(Layer.succeed(ResetMailSettings, settings))
    )
    // The layer is built under the worker's environment (PasswordResets reads its key while it is built).
    const delivery = yield* ResetMailDelivery.pipe(Effect.provide(layer), Effect.withConfigProvider(providerOf(env)))
    return { delivery, settings, layer, env }
  })

/** A tenant with one enabled account (no password: none is needed to ask for a reset). */
export const fixture = Effect.gen(function* () {
  const identity = yield* Identity
  const tenant = TenantId.make(`r-${randomBytes(4).toString("hex")}`)
  yield* identity.createTenant(tenant)
  const email = Schema.decodeSync(Email)(`alice.${tenant}@example.com`)
  const account = yield* identity.createAccount({ tenant, email })
  return { tenant, email, account }
})
export type Fixture = Effect.Effect.Success<typeof fixture>

export interface OutboxRow {
  readonly id: string
  readonly verification_id: string
  readonly tenant_id: string
  readonly state: string
  readonly reason: string | null
  readonly attempt: number
  readonly fingerprint: string | null
  readonly last_error: string | null
  readonly provider_status: number | null
  readonly next_attempt_at: Date
  readonly claimed_at: Date | null
  readonly lease_owner: string | null
}

const outboxColumns = (sql: SqlClient.SqlClient) =>
  sql.literal(`id::text AS id, verification_id::text AS verification_id, tenant_id, state, reason, attempt, fingerprint,
    last_error, provider_status, next_attempt_at, claimed_at, lease_owner`)

export const rowOf = (id: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<OutboxRow>`SELECT ${outboxColumns(sql)} FROM reset_mail_outbox WHERE id = ${id}`.withoutTransform
    return rows[0]!
  }).pipe(Effect.orDie)

/** A reset request through the real request path; returns the outbox row it committed. */
export const requestReset = (fx: Fixture, via?: ResetRequests) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const requests = via ?? (yield* ResetRequests)
    const before = yield* sql<{ readonly id: string }>`
      SELECT id::text AS id FROM reset_mail_outbox WHERE tenant_id = ${fx.tenant}`.withoutTransform
    expect(yield* requests.request({ tenant: fx.tenant, email: fx.email })).toBe(true)
    const after = yield* sql<OutboxRow>`
      SELECT ${outboxColumns(sql)} FROM reset_mail_outbox WHERE tenant_id = ${fx.tenant}`.withoutTransform
    const known = new Set(before.map((r) => r.id))
    const fresh = after.filter((r) => !known.has(r.id))
    expect(fresh).toHaveLength(1)
    return fresh[0]!
  }).pipe(Effect.orDie)

/** Each test starts with an empty outbox (the worker claims any due row) and a provider with no script. */
export const setup = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`DELETE FROM reset_mail_outbox`.pipe(Effect.orDie)
  const provider = yield* LoopbackProvider
  yield* provider.reset
  const fx = yield* fixture.pipe(Effect.orDie)
  return { sql, provider, fx }
})

export const sha256 = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex")

/** The reset token as the mail carries it: `<origin>/reset-password#token=reset_…` in the text part. */
export const tokenOf = (request: RecordedRequest) => {
  const text = (JSON.parse(request.bodyText) as { readonly text: string }).text
  const match = /#token=(reset_[A-Za-z0-9_-]{43})/.exec(text)
  expect(match).not.toBeNull()
  return match![1]!
}
