import { expect } from "@effect/vitest"
import { PasswordResets } from "@delivery/identity"
import { SqlClient } from "@effect/sql"
import { ConfigProvider, Effect, Layer, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { OPERATOR_TOKEN } from "./Backend.ts"
import { type Answer, call } from "./Http.ts"

// Fixtures and reads for the password-reset route tests (PasswordReset.test.ts): accounts made over the operator
// routes, the committed rows read back with SQL, and the sealed token opened in-process with the backend's key.

export const op = { token: OPERATOR_TOKEN }
export const TOKEN_KEY = randomBytes(32).toString("base64")
export const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`
export const newPassword = (prefix = "pw") => `${prefix}-${randomBytes(12).toString("base64url")}`

/** PasswordResets in the test process, under the backend's PASSWORD_RESET_TOKEN_KEY: it opens sealed tokens. */
export const ResetsInProcess = PasswordResets.Default.pipe(
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["PASSWORD_RESET_TOKEN_KEY", TOKEN_KEY]]))))
)

export const tenant = (port: number) =>
  Effect.gen(function* () {
    const id = unique("pr")
    expect((yield* call(port, "POST", "/operator/tenants", { ...op, body: { id } })).status).toBe(201)
    return id
  })

export const account = (port: number, tenantId: string, password: string, email = `${unique("user")}@example.com`) =>
  Effect.gen(function* () {
    const created = yield* call(port, "POST", `/operator/tenants/${tenantId}/accounts`, { ...op, body: { email, password } })
    expect(created.status).toBe(201)
    return { tenant: tenantId, email, account: created.json.account.id as string, password }
  })

export const disable = (port: number, tenantId: string, accountId: string) =>
  Effect.gen(function* () {
    expect((yield* call(port, "POST", `/operator/tenants/${tenantId}/accounts/${accountId}/disable`, op)).status).toBe(200)
  })

export const requestReset = (port: number, body: unknown, headers: Record<string, string> = {}) =>
  call(port, "POST", "/api/password-resets", { body, headers })

export const completeReset = (port: number, token: string, password: string, headers: Record<string, string> = {}) =>
  call(port, "POST", "/api/password-resets/complete", { body: { token, password }, headers })

export const signIn = (port: number, who: { readonly tenant: string; readonly email: string }, password: string) =>
  call(port, "POST", "/api/sessions", { body: { tenant: who.tenant, email: who.email, password } })

export interface Verification {
  readonly id: string
  readonly account_id: string
  readonly consumed_at: Date | null
  readonly expires_at: Date
}

export const verificationsOf = (tenantId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<Verification>`
      SELECT id::text AS id, account_id, consumed_at, expires_at FROM identity_reset_verifications
      WHERE tenant_id = ${tenantId} ORDER BY created_at, id`.withoutTransform)

/** Every column of the tenant's reset-mail rows, as JSON text (to look for an address or token anywhere in it). */
export const outboxOf = (tenantId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly id: string; readonly verification_id: string; readonly state: string; readonly attempt: number; readonly json: string }>`
      SELECT id::text AS id, verification_id::text AS verification_id, state, attempt, to_jsonb(o)::text AS json
      FROM reset_mail_outbox o WHERE tenant_id = ${tenantId} ORDER BY created_at, id`.withoutTransform)

export const passwordHashOf = (tenantId: string, accountId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly password_hash: string | null }>`
      SELECT password_hash FROM identity_accounts WHERE tenant_id = ${tenantId} AND id = ${accountId}`.withoutTransform).pipe(
      Effect.map((rows) => rows[0]?.password_hash ?? null)
    )

export const auditOf = (tenantId: string, action = "password-reset") =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly subject: string; readonly outcome: string; readonly actor: string; readonly correlation_id: string }>`
      SELECT subject, outcome, actor, correlation_id FROM identity_audit
      WHERE tenant = ${tenantId} AND action = ${action} ORDER BY audit_id`.withoutTransform)

export const sessionsOf = (tenantId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly lookup_id: string; readonly revoked_at: Date | null }>`
      SELECT lookup_id, revoked_at FROM identity_sessions WHERE tenant_id = ${tenantId} ORDER BY created_at`.withoutTransform)

/** Everything a reset could change for a tenant: compared before and after a refused request. */
export const resetStateOf = (tenantId: string, accountIds: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const hashes: Array<string | null> = []
    for (const id of accountIds) hashes.push(yield* passwordHashOf(tenantId, id))
    return {
      hashes,
      verifications: yield* verificationsOf(tenantId),
      outbox: (yield* outboxOf(tenantId)).map((row) => row.json),
      audit: yield* auditOf(tenantId),
      sessions: yield* sessionsOf(tenantId)
    }
  })

/** The token of a live verification, opened from its sealed column with the backend's key. */
export const tokenOf = (verificationId: string) =>
  Effect.gen(function* () {
    const resets = yield* PasswordResets
    const context = yield* resets.mailContext(verificationId).pipe(Effect.orDie)
    if (context._tag !== "Live") return yield* Effect.dieMessage(`verification ${verificationId} is ${context._tag}`)
    return Redacted.value(context.token)
  })

/** The documented refusal shape: status, `_tag`, `reason`, the correlation id in body and header, nothing else. */
export const expectRefusal = (answer: Answer, status: number, tag: string, reason: string) => {
  expect({ status: answer.status, tag: answer.json?._tag, reason: answer.json?.reason }).toEqual({ status, tag, reason })
  expect(answer.headers["x-correlation-id"]).toMatch(/^[0-9a-f]{32}$/)
  expect(answer.json.correlationId).toBe(answer.headers["x-correlation-id"])
}

export const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}
