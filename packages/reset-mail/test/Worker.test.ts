import { Email, Identity, PasswordResets, TenantId } from "@delivery/identity"
import { connect, LoopbackProvider, LoopbackReply, TestDatabase } from "@delivery/testing"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Cause, ConfigProvider, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, Redacted, Schedule, Schema } from "effect"
import { randomBytes } from "node:crypto"
import { ResetMailRepo } from "../src/ResetMailRepo.ts"
import { deliveryLoop, ResetMailDelivery, ResetMailSettings, type TickResult } from "../src/ResetMailWorker.ts"
import { ResetRequests } from "../src/ResetRequests.ts"
import { renderDefault, ResetTemplate, ResetTemplateDefault } from "../src/Template.ts"
import { Mailer } from "@delivery/mail"
import {
  type OutboxRow,
  requestEnv,
  requestReset,
  rowOf,
  setup,
  sha256,
  SuiteLayer,
  tokenOf,
  workerWith
} from "./support.ts"

// Spec 002's password-reset mail worker (ResetMailDelivery.tick) on real PostgreSQL with a real loopback HTTP
// provider; work is created through the real request path (ResetRequests.request). Time is the live clock with
// short durations: retry base 200 ms, cap 1.5 s, mail timeout 300 ms unless a test needs the call held longer.

const outcomeOf = (tick: TickResult) => Option.getOrThrow(tick.attempt).outcome

/** Sleeps until the row's retry is due (its next_attempt_at has passed). */
const untilDue = (row: OutboxRow) =>
  Effect.sleep(Duration.millis(Math.max(0, row.next_attempt_at.getTime() - Date.now()) + 25))

/** Every column of one outbox row, exactly as stored. */
const snapshot = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly row: string }>`SELECT to_jsonb(o)::text AS row FROM reset_mail_outbox o WHERE id = ${id}`.withoutTransform)
    .pipe(Effect.map((rows) => rows[0]?.row), Effect.orDie)

/** Every column of one verification, bytes as hex. */
const verificationSnapshot = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly row: string }>`SELECT to_jsonb(v)::text AS row FROM identity_reset_verifications v WHERE id = ${id}`
      .withoutTransform)
    .pipe(Effect.map((rows) => rows[0]?.row), Effect.orDie)

/** Backdates a claim, as if its owner had claimed it `seconds` ago and stalled since. */
const backdateClaim = (id: string, seconds: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`UPDATE reset_mail_outbox SET claimed_at = now() - make_interval(secs => ${seconds}) WHERE id = ${id}`)
    .pipe(Effect.orDie)

/** ResetRequests with a PASSWORD_RESET_TTL of its own (the request path decides the expiry). */
const requestsWithTtl = (ttl: string) =>
  ResetRequests.pipe(
    Effect.provide(ResetRequests.Default.pipe(Layer.provide(PasswordResets.Default), Layer.provide(ResetMailRepo.Default))),
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({ ...requestEnv, PASSWORD_RESET_TTL: ttl }))))
  )

/** A first attempt answered 503: the row waits for its retry with a fingerprint of what the provider received. */
const failFirstAttempt = (delivery: ResetMailDelivery, row: OutboxRow) =>
  Effect.gen(function* () {
    const provider = yield* LoopbackProvider
    yield* provider.script({ key: row.id, times: 1, reply: LoopbackReply.status(503) })
    expect(outcomeOf(yield* delivery.tick("w1"))).toBe("retry")
    const [first] = yield* provider.requests
    const waiting = yield* rowOf(row.id)
    expect(waiting).toMatchObject({ state: "pending", attempt: 1, last_error: "provider-5xx", fingerprint: sha256(first!.body) })
    return { first: first!, waiting }
  })

/** Spec 002: a changed payload is never sent under the old identity; the retry quarantines without a provider call. */
const expectQuarantinedWithoutSecondSend = (delivery: ResetMailDelivery, row: OutboxRow, fingerprint: string) =>
  Effect.gen(function* () {
    const provider = yield* LoopbackProvider
    expect(outcomeOf(yield* delivery.tick("w1"))).toBe("quarantined")
    expect(yield* rowOf(row.id)).toMatchObject({
      state: "quarantined",
      reason: "verification-invalid",
      attempt: 2,
      fingerprint,
      lease_owner: null
    })
    expect((yield* provider.requests).length).toBe(1)
    // Ended for good: later ticks find nothing to do.
    expect(Option.isNone((yield* delivery.tick("w1")).attempt)).toBe(true)
    expect((yield* provider.requests).length).toBe(1)
  })

/** A stop before any provider I/O (spec 002: "Every attempt checks that the verification exists, ..."). */
const expectStopped = (delivery: ResetMailDelivery, row: OutboxRow, reason: string, requestsBefore: number) =>
  Effect.gen(function* () {
    const provider = yield* LoopbackProvider
    expect(outcomeOf(yield* delivery.tick("w1"))).toBe("stopped")
    expect(yield* rowOf(row.id)).toMatchObject({ state: "stopped", reason, lease_owner: null, provider_status: null })
    expect((yield* provider.requests).length).toBe(requestsBefore)
  })

const v2Template = Layer.succeed(ResetTemplate, {
  render: (input) => {
    const v1 = renderDefault(input)
    return { ...v1, text: v1.text.replace("template v1", "template v2"), html: v1.html.replace("template v1", "template v2") }
  }
})

layer(SuiteLayer, { excludeTestServices: true })("reset-mail worker (spec 002, real PostgreSQL, loopback provider)", (it) => {
  // --- Start and stop -----------------------------------------------------------------------------------------

  it.effect("'Each worker performs one delivery attempt per tick': two due rows, one tick sends one mail and leaves the other row unclaimed", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const a = yield* requestReset(fx)
      const b = yield* requestReset(fx)
      const first = yield* delivery.tick("w1")
      expect(outcomeOf(first)).toBe("delivered")
      expect((yield* provider.requests).length).toBe(1)
      const rows = [yield* rowOf(a.id), yield* rowOf(b.id)]
      expect(rows.map((r) => r.state).sort()).toEqual(["delivered", "pending"])
      const waiting = rows.find((r) => r.state === "pending")!
      expect(waiting).toMatchObject({ attempt: 0, claimed_at: null, fingerprint: null })
      expect(Option.getOrThrow(first.attempt).id).not.toBe(waiting.id)
      // The next tick takes the other row, and then there is nothing left.
      expect(Option.getOrThrow((yield* delivery.tick("w1")).attempt)).toEqual({ id: waiting.id, outcome: "delivered" })
      expect(Option.isNone((yield* delivery.tick("w1")).attempt)).toBe(true)
      expect((yield* provider.requests).map((r) => r.idempotencyKey).sort()).toEqual([a.id, b.id].sort())
    }))

  it.effect("'one delivery attempt per tick, then waits for its poll interval': the running loop sends the second of two due mails only a poll interval after the first", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery, settings } = yield* workerWith({ env: { PASSWORD_RESET_POLL_INTERVAL: "1 second" } })
      yield* requestReset(fx)
      yield* requestReset(fx)
      const loop = yield* deliveryLoop.pipe(
        Effect.provideService(ResetMailDelivery, delivery),
        Effect.provideService(ResetMailSettings, settings),
        Effect.fork
      )
      yield* provider.awaitRequests(1)
      yield* Effect.sleep("300 millis")
      expect((yield* provider.requests).length).toBe(1)
      const [first, second] = yield* provider.awaitRequests(2).pipe(Effect.timeout("5 seconds"))
      yield* Fiber.interrupt(loop)
      expect(second!.receivedAt.getTime() - first!.receivedAt.getTime()).toBeGreaterThanOrEqual(990)
    }))

  // --- Password-reset mail: fingerprint -----------------------------------------------------------------------

  it.effect("'The first attempt stores a SHA256 fingerprint of the rendered payload before provider I/O': while the provider holds the request, the row's fingerprint is already committed and equals sha256 of the bytes received", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith({ env: { MAIL_PROVIDER_TIMEOUT: "10 seconds" } })
      const row = yield* requestReset(fx)
      expect(row.fingerprint).toBeNull()
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      const tick = yield* Effect.fork(delivery.tick("w1"))
      const [held] = yield* provider.awaitRequests(1)
      expect(held!.handling).toBe("hung")
      expect(held!.idempotencyKey).toBe(row.id)
      // Read on another connection while the call is in flight: committed, not merely written in a transaction.
      const during = yield* rowOf(row.id)
      expect(during).toMatchObject({ state: "sending", attempt: 1 })
      expect(during.fingerprint).toBe(sha256(held!.body))
      expect(yield* provider.release(LoopbackReply.status(202))).toBe(1)
      expect(outcomeOf(yield* Fiber.join(tick))).toBe("delivered")
      expect(yield* rowOf(row.id)).toMatchObject({ state: "delivered", provider_status: 202, fingerprint: during.fingerprint })
    }))

  it.effect("'Each retry reconstructs the payload from live verification and account data. A changed fingerprint quarantines the row with verification-invalid': a sender change quarantines the retry without a second send", () =>
    Effect.gen(function* () {
      const { fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      const { first, waiting } = yield* failFirstAttempt(delivery, row)
      const changed = yield* workerWith({ env: { PASSWORD_RESET_FROM: "security@acme.example" } })
      yield* untilDue(waiting)
      yield* expectQuarantinedWithoutSecondSend(changed.delivery, row, sha256(first.body))
    }))

  it.effect("'A changed fingerprint quarantines the row with verification-invalid': an origin change quarantines the retry without a second send", () =>
    Effect.gen(function* () {
      const { fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      const { first, waiting } = yield* failFirstAttempt(delivery, row)
      const changed = yield* workerWith({ env: { PASSWORD_RESET_ORIGIN: "https://id.acme.example" } })
      yield* untilDue(waiting)
      yield* expectQuarantinedWithoutSecondSend(changed.delivery, row, sha256(first.body))
    }))

  it.effect("'A changed fingerprint quarantines the row with verification-invalid': a template change quarantines the retry without a second send", () =>
    Effect.gen(function* () {
      const { fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      const { first, waiting } = yield* failFirstAttempt(delivery, row)
      const changed = yield* workerWith({ template: v2Template })
      yield* untilDue(waiting)
      yield* expectQuarantinedWithoutSecondSend(changed.delivery, row, sha256(first.body))
    }))

  it.effect("'Each retry reconstructs the payload from live verification and account data': a mailbox change (the account's e-mail changed) quarantines the retry with verification-invalid without a second send", () =>
    Effect.gen(function* () {
      const { sql, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      const { first, waiting } = yield* failFirstAttempt(delivery, row)
      expect(JSON.parse(first.bodyText).to).toEqual([fx.email])
      // Fixture: identity has no e-mail change operation yet.
      yield* sql`UPDATE identity_accounts SET email = ${`moved.${fx.tenant}@example.com`}
                 WHERE tenant_id = ${fx.tenant} AND id = ${fx.account}`
      yield* untilDue(waiting)
      // The same worker, same settings and template: only the live account data changed.
      yield* expectQuarantinedWithoutSecondSend(delivery, row, sha256(first.body))
    }))

  // --- Password-reset mail: live checks -----------------------------------------------------------------------

  it.effect("'Every attempt checks that the verification ... remains unexpired': a retry after the verification expired stops the row with verification-expired and sends nothing", () =>
    Effect.gen(function* () {
      const { fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx, yield* requestsWithTtl("700 millis"))
      yield* failFirstAttempt(delivery, row)
      const verification = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql<{ readonly expires_at: Date }>`SELECT expires_at FROM identity_reset_verifications WHERE id = ${row.verification_id}`)
      yield* Effect.sleep(Duration.millis(Math.max(0, verification[0]!.expires_at.getTime() - Date.now()) + 25))
      yield* expectStopped(delivery, row, "verification-expired", 1)
    }))

  it.effect("'Every attempt checks that the verification ... belongs to an enabled account': a retry after the account was disabled stops the row with account-disabled and sends nothing", () =>
    Effect.gen(function* () {
      const { fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      const { waiting } = yield* failFirstAttempt(delivery, row)
      yield* (yield* Identity).setAccountEnabled(fx.tenant, fx.account, false)
      yield* untilDue(waiting)
      yield* expectStopped(delivery, row, "account-disabled", 1)
    }))

  it.effect("'Every attempt checks' the verification live: once the token mailed by the first attempt has completed a reset (consumed), the retry stops with verification-consumed and sends nothing", () =>
    Effect.gen(function* () {
      const { fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      const { first, waiting } = yield* failFirstAttempt(delivery, row)
      const requests = yield* ResetRequests
      yield* requests.complete({
        token: Redacted.make(tokenOf(first)),
        password: Redacted.make("a new and long enough password"),
        correlationId: randomBytes(16).toString("hex")
      })
      yield* untilDue(waiting)
      yield* expectStopped(delivery, row, "verification-consumed", 1)
    }))

  it.effect("'Every attempt checks that the verification exists': a row whose verification is gone stops with verification-missing and sends nothing", () =>
    Effect.gen(function* () {
      const { sql, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      // Impossible through the request path: the verification is removed behind the outbox row's back.
      yield* sql`DELETE FROM identity_reset_verifications WHERE id = ${row.verification_id}`
      yield* expectStopped(delivery, row, "verification-missing", 0)
    }))

  it.effect("a token that does not open under the worker's PASSWORD_RESET_TOKEN_KEY quarantines the row with verification-invalid and sends nothing", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const other = yield* workerWith({ env: { PASSWORD_RESET_TOKEN_KEY: randomBytes(32).toString("base64") } })
      const row = yield* requestReset(fx)
      expect(outcomeOf(yield* other.delivery.tick("w1"))).toBe("quarantined")
      expect(yield* rowOf(row.id)).toMatchObject({ state: "quarantined", reason: "verification-invalid", fingerprint: null })
      expect((yield* provider.requests).length).toBe(0)
    }))

  // --- Provider limits ----------------------------------------------------------------------------------------

  it.effect("'The current mail adapter classifies HTTP 4xx as permanent rejection': a 422 ends the row rejected with provider-4xx and the status, never retried", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      yield* provider.script({ key: row.id, reply: LoopbackReply.status(422, { body: "mailbox unknown: secret detail" }) })
      expect(outcomeOf(yield* delivery.tick("w1"))).toBe("rejected")
      expect(yield* rowOf(row.id)).toMatchObject({
        state: "rejected",
        reason: "provider-4xx",
        provider_status: 422,
        attempt: 1,
        lease_owner: null
      })
      expect(Option.isNone((yield* delivery.tick("w1")).attempt)).toBe(true)
      expect((yield* provider.requests).length).toBe(1)
      expect(yield* snapshot(row.id)).not.toContain("secret detail")
    }))

  it.effect("an account address the mail adapter cannot carry (a quote) ends the row rejected mailbox-invalid without a provider request", () =>
    Effect.gen(function* () {
      const { provider } = yield* setup
      const identity = yield* Identity
      const tenant = TenantId.make(`r-${randomBytes(4).toString("hex")}`)
      yield* identity.createTenant(tenant)
      const email = Schema.decodeSync(Email)(`bo"b.${tenant}@example.com`)
      yield* identity.createAccount({ tenant, email })
      const { delivery } = yield* workerWith()
      const row = yield* requestReset({ tenant, email, account: "unused" as never })
      expect(outcomeOf(yield* delivery.tick("w1"))).toBe("rejected")
      expect(yield* rowOf(row.id)).toMatchObject({ state: "rejected", reason: "mailbox-invalid", lease_owner: null })
      expect((yield* provider.requests).length).toBe(0)
    }))

  it.effect("'Reset timeout ... deliberately differ[s] from receipt retries ... timeout as ambiguous': no answer within MAIL_PROVIDER_TIMEOUT quarantines the row with provider-timeout, never sent again", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      yield* provider.script({ key: row.id, reply: LoopbackReply.hang() })
      const started = Date.now()
      expect(outcomeOf(yield* delivery.tick("w1"))).toBe("quarantined")
      expect(Date.now() - started).toBeGreaterThanOrEqual(290)
      expect(yield* rowOf(row.id)).toMatchObject({
        state: "quarantined",
        reason: "provider-timeout",
        provider_status: null,
        attempt: 1,
        lease_owner: null
      })
      // The timed-out call was aborted, and the row is never offered again.
      yield* provider.awaitAborts(1).pipe(Effect.timeout("2 seconds"))
      expect(Option.isNone((yield* delivery.tick("w1")).attempt)).toBe(true)
      expect((yield* provider.requests).length).toBe(1)
    }))

  it.effect("'other transport failures as temporary': a dropped connection and then a 5xx leave the row pending with last_error and next_attempt_at within the backoff bounds; each retry sends the same Idempotency-Key (the row id) and byte-identical body, then the row is delivered", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      yield* provider.script(
        { key: row.id, times: 1, reply: LoopbackReply.drop() },
        { key: row.id, times: 1, reply: LoopbackReply.status(503) }
      )
      // Retry n waits min(cap, base * 2^(n-1)) minus up to 20 % jitter: base 200 ms, so 160-200 ms, then 320-400 ms.
      const bounds = [[160, 200], [320, 400]] as const
      for (const [n, expected] of [[1, { last_error: "provider-connection-dropped", provider_status: null }], [2, { last_error: "provider-5xx", provider_status: 503 }]] as const) {
        const before = Date.now()
        expect(outcomeOf(yield* delivery.tick("w1"))).toBe("retry")
        const after = Date.now()
        const waiting = yield* rowOf(row.id)
        expect(waiting).toMatchObject({ state: "pending", attempt: n, lease_owner: null, ...expected })
        const [low, high] = bounds[n - 1]!
        expect(waiting.next_attempt_at.getTime()).toBeGreaterThanOrEqual(before + low)
        expect(waiting.next_attempt_at.getTime()).toBeLessThanOrEqual(after + high)
        yield* untilDue(waiting)
      }
      expect(outcomeOf(yield* delivery.tick("w1"))).toBe("delivered")
      expect(yield* rowOf(row.id)).toMatchObject({ state: "delivered", attempt: 3, provider_status: 200, last_error: null })
      const sent = yield* provider.requests
      expect(sent.map((r) => r.idempotencyKey)).toEqual([row.id, row.id, row.id])
      expect(sent.every((r) => Buffer.from(r.body).equals(Buffer.from(sent[0]!.body)))).toBe(true)
      expect((yield* provider.deliveries).length).toBe(1)
    }))

  it.effect("'Retry-After' on a temporary failure is honoured when longer than the backoff, within PASSWORD_RESET_RETRY_CAP", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const honoured = yield* requestReset(fx)
      const capped = yield* requestReset(fx)
      const shorter = yield* requestReset(fx)
      yield* provider.script(
        { key: honoured.id, times: 1, reply: LoopbackReply.status(503, { retryAfter: "1" }) },
        { key: capped.id, times: 1, reply: LoopbackReply.status(503, { retryAfter: "3600" }) },
        { key: shorter.id, times: 1, reply: LoopbackReply.status(503, { retryAfter: "0" }) }
      )
      const windows = new Map<string, { readonly before: number; readonly after: number }>()
      for (let i = 0; i < 3; i++) {
        const before = Date.now()
        const tick = yield* delivery.tick("w1")
        windows.set(Option.getOrThrow(tick.attempt).id, { before, after: Date.now() })
        expect(outcomeOf(tick)).toBe("retry")
      }
      // Retry-After 1 s is longer than the backoff (160-200 ms): honoured. 3600 s: cut to the cap (1.5 s). 0 s: shorter
      // than the backoff, which still applies.
      for (const [row, low, high] of [[honoured, 1_000, 1_000], [capped, 1_500, 1_500], [shorter, 160, 200]] as const) {
        const waiting = yield* rowOf(row.id)
        const { after, before } = windows.get(row.id)!
        expect(waiting).toMatchObject({ state: "pending", last_error: "provider-5xx", provider_status: 503 })
        expect(waiting.next_attempt_at.getTime()).toBeGreaterThanOrEqual(before + low)
        expect(waiting.next_attempt_at.getTime()).toBeLessThanOrEqual(after + high)
      }
      // The backoff alone (at most 200 ms) would have made the first two due by now; only the third is.
      yield* Effect.sleep("300 millis")
      expect(Option.getOrThrow((yield* delivery.tick("w1")).attempt)).toEqual({ id: shorter.id, outcome: "delivered" })
      expect(Option.isNone((yield* delivery.tick("w1")).attempt)).toBe(true)
    }))

  it.effect("'Successful delivery does not extend expiry or consume the verification': the verification row is byte-for-byte the same after a delivered attempt, and its mailed token still completes a reset", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      const before = yield* verificationSnapshot(row.verification_id)
      expect(before).toBeDefined()
      expect(outcomeOf(yield* delivery.tick("w1"))).toBe("delivered")
      expect(yield* verificationSnapshot(row.verification_id)).toBe(before)
      const [mail] = yield* provider.requests
      const requests = yield* ResetRequests
      const done = yield* requests.complete({
        token: Redacted.make(tokenOf(mail!)),
        password: Redacted.make("a new and long enough password"),
        correlationId: randomBytes(16).toString("hex")
      })
      expect(done).toMatchObject({ tenant: fx.tenant, account: fx.account })
    }))

  // --- Stale claims and late owners ---------------------------------------------------------------------------

  it.effect("'Reset polling quarantines claims older than 60 seconds': a claim of 61 s is quarantined stale-claim on the next tick, one of 50 s is left alone; the late owner's transitions fail with LeaseLost and change nothing", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const repo = yield* ResetMailRepo
      yield* requestReset(fx)
      yield* requestReset(fx)
      // Two owners claimed a row each and stalled (a suspended or killed process).
      const old = (yield* repo.claimOne(new Date(), "stalled-old"))!
      const young = (yield* repo.claimOne(new Date(), "stalled-young"))!
      yield* backdateClaim(old.id, 61)
      yield* backdateClaim(young.id, 50)
      const tick = yield* delivery.tick("w1")
      expect(tick).toMatchObject({ quarantinedStale: 1 })
      expect(Option.isNone(tick.attempt)).toBe(true)
      expect(yield* rowOf(old.id)).toMatchObject({ state: "quarantined", reason: "stale-claim", lease_owner: null })
      expect(yield* rowOf(young.id)).toMatchObject({ state: "sending", lease_owner: "stalled-young" })
      const quarantined = yield* snapshot(old.id)
      const at = new Date()
      const refusals = [
        repo.finish(old, { state: "delivered", reason: null, providerStatus: 200, at }),
        repo.retry(old, { nextAttemptAt: at, lastError: "provider-5xx", providerStatus: 503, at }),
        repo.setFingerprint(old, "0".repeat(64), at)
      ]
      for (const late of refusals) {
        const error = yield* Effect.flip(late)
        expect(error).toMatchObject({ _tag: "LeaseLost", id: old.id, attempt: 1 })
      }
      expect(yield* snapshot(old.id)).toBe(quarantined)
      expect((yield* provider.requests).length).toBe(0)
    }))

  it.effect("'Late owners cannot complete or fail a replacement claim': a late owner holding attempt 1 cannot move the row another owner claimed as attempt 2", () =>
    Effect.gen(function* () {
      yield* setup.pipe(Effect.flatMap(({ fx }) => requestReset(fx)))
      const repo = yield* ResetMailRepo
      const first = (yield* repo.claimOne(new Date(), "first"))!
      yield* repo.retry(first, { nextAttemptAt: new Date(Date.now() - 1), lastError: "provider-5xx", providerStatus: 503, at: new Date() })
      const second = (yield* repo.claimOne(new Date(), "second"))!
      expect(second).toMatchObject({ id: first.id, attempt: 2 })
      const held = yield* snapshot(first.id)
      const at = new Date()
      expect(yield* Effect.flip(repo.finish(first, { state: "delivered", reason: null, providerStatus: 200, at }))).toMatchObject({ _tag: "LeaseLost" })
      expect(yield* Effect.flip(repo.retry(first, { nextAttemptAt: at, lastError: "provider-5xx", providerStatus: 503, at }))).toMatchObject({ _tag: "LeaseLost" })
      expect(yield* snapshot(first.id)).toBe(held)
      expect(yield* rowOf(first.id)).toMatchObject({ state: "sending", attempt: 2, lease_owner: "second" })
    }))

  it.effect("a worker whose claim went stale while its provider call was held records nothing when the answer comes: the row stays quarantined stale-claim (LeaseLost, not delivered)", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const slow = yield* workerWith({ env: { MAIL_PROVIDER_TIMEOUT: "10 seconds" } })
      const other = yield* workerWith()
      const row = yield* requestReset(fx)
      yield* provider.script({ key: row.id, times: 1, reply: LoopbackReply.hang() })
      const late = yield* Effect.fork(slow.delivery.tick("late"))
      yield* provider.awaitRequests(1)
      yield* backdateClaim(row.id, 61)
      expect(yield* other.delivery.tick("other")).toMatchObject({ quarantinedStale: 1 })
      const quarantined = yield* snapshot(row.id)
      yield* provider.release(LoopbackReply.status(200))
      expect(outcomeOf(yield* Fiber.join(late))).toBe("lease-lost")
      expect(yield* snapshot(row.id)).toBe(quarantined)
      expect(yield* rowOf(row.id)).toMatchObject({ state: "quarantined", reason: "stale-claim", provider_status: null })
    }))

  // --- Shutdown -----------------------------------------------------------------------------------------------

  it.effect("'Reset interruption aborts the provider call and records a fenced ambiguous-outcome quarantine': interrupting the tick while the provider holds the call quarantines the row provider-interrupted and the provider sees the client abort", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith({ env: { MAIL_PROVIDER_TIMEOUT: "10 seconds" } })
      const row = yield* requestReset(fx)
      yield* provider.script({ key: row.id, times: 1, reply: LoopbackReply.hang() })
      const tick = yield* Effect.fork(delivery.tick("w1"))
      yield* provider.awaitRequests(1)
      const exit = yield* Fiber.interrupt(tick)
      expect(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)).toBe(true)
      // Written before the interruption completed, not later.
      expect(yield* rowOf(row.id)).toMatchObject({
        state: "quarantined",
        reason: "provider-interrupted",
        attempt: 1,
        lease_owner: null
      })
      const [aborted] = yield* provider.awaitAborts(1).pipe(Effect.timeout("2 seconds"))
      expect(aborted!.idempotencyKey).toBe(row.id)
      expect(aborted!.handling).toBe("hung")
    }))

  it.effect("an interruption before the provider call (during the attempt's live read) is not an ambiguous outcome: nothing was sent, so the row is not quarantined but stays eligible, and the next tick sends it", () =>
    Effect.gen(function* () {
      const { sql, provider, fx } = yield* setup
      const { delivery } = yield* workerWith({ env: { MAIL_PROVIDER_TIMEOUT: "10 seconds" } })
      const row = yield* requestReset(fx)
      const other = yield* connect((yield* TestDatabase).url, { maxConnections: 1 })
      const locked = yield* Deferred.make<void>()
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(other.withTransaction(
        other`LOCK TABLE identity_accounts IN ACCESS EXCLUSIVE MODE`.pipe(
          Effect.zipRight(Deferred.succeed(locked, undefined)),
          Effect.zipRight(Deferred.await(release))
        )
      ))
      yield* Deferred.await(locked)
      const tick = yield* Effect.fork(delivery.tick("w1"))
      // The attempt's live read of the verification and account waits on the lock.
      yield* Effect.repeat(
        sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND relation = 'identity_accounts'::regclass`,
        { until: (rows) => rows[0]!.n > 0, schedule: Schedule.spaced("10 millis") }
      )
      expect(yield* rowOf(row.id)).toMatchObject({ state: "sending", attempt: 1 })
      const interrupting = yield* Effect.fork(Fiber.interrupt(tick))
      yield* Effect.sleep("50 millis")
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
      const exit = yield* Fiber.join(interrupting)
      expect(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)).toBe(true)
      expect((yield* provider.requests).length).toBe(0)
      const waiting = yield* rowOf(row.id)
      expect(waiting).toMatchObject({ state: "pending", reason: null, attempt: 1, last_error: "worker-interrupted", lease_owner: null })
      expect(waiting.next_attempt_at.getTime()).toBeLessThanOrEqual(Date.now())
      // The next process (here: the next tick) delivers it under the same identity and the stored fingerprint.
      expect(outcomeOf(yield* delivery.tick("w2"))).toBe("delivered")
      const [mail] = yield* provider.requests
      expect(mail!.idempotencyKey).toBe(row.id)
      expect(yield* rowOf(row.id)).toMatchObject({ state: "delivered", attempt: 2, fingerprint: waiting.fingerprint })
      expect(sha256(mail!.body)).toBe(waiting.fingerprint)
    }).pipe(Effect.scoped))

  it.effect("the interruption quarantine is fenced: a row already quarantined stale-claim by another worker keeps its reason, and the interrupted tick ends cleanly", () =>
    Effect.gen(function* () {
      const { provider, fx } = yield* setup
      const { delivery } = yield* workerWith({ env: { MAIL_PROVIDER_TIMEOUT: "10 seconds" } })
      const other = yield* workerWith()
      const row = yield* requestReset(fx)
      yield* provider.script({ key: row.id, times: 1, reply: LoopbackReply.hang() })
      const tick = yield* Effect.fork(delivery.tick("w1"))
      yield* provider.awaitRequests(1)
      yield* backdateClaim(row.id, 61)
      expect(yield* other.delivery.tick("other")).toMatchObject({ quarantinedStale: 1 })
      const quarantined = yield* snapshot(row.id)
      const exit = yield* Fiber.interrupt(tick)
      expect(Exit.isFailure(exit) && Cause.isInterruptedOnly(exit.cause)).toBe(true)
      expect(yield* snapshot(row.id)).toBe(quarantined)
      expect(yield* rowOf(row.id)).toMatchObject({ reason: "stale-claim" })
    }))

  it.effect("'A database failure during this cleanup produces a nonzero exit': when the interruption quarantine cannot be written, the interrupted tick dies instead of ending as a clean interruption", () =>
    Effect.gen(function* () {
      const { sql, provider, fx } = yield* setup
      const { delivery } = yield* workerWith({ env: { MAIL_PROVIDER_TIMEOUT: "10 seconds" } })
      const row = yield* requestReset(fx)
      yield* provider.script({ key: row.id, times: 1, reply: LoopbackReply.hang() })
      const tick = yield* Effect.fork(delivery.tick("w1"))
      yield* provider.awaitRequests(1)
      yield* sql`ALTER TABLE reset_mail_outbox RENAME TO reset_mail_outbox_away`
      const exit = yield* Fiber.interrupt(tick).pipe(
        Effect.ensuring(sql`ALTER TABLE reset_mail_outbox_away RENAME TO reset_mail_outbox`.pipe(Effect.orDie))
      )
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(yield* rowOf(row.id)).toMatchObject({ state: "sending", attempt: 1 })
      yield* sql`DELETE FROM reset_mail_outbox WHERE id = ${row.id}`
    }))

  it.effect("a database failure before any provider I/O (the live read of the verification fails) puts the row back to pending after backoff with storage-unavailable: nothing was sent, so it is not left to the stale-claim quarantine", () =>
    Effect.gen(function* () {
      const { sql, provider, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      yield* sql`ALTER TABLE identity_reset_verifications RENAME TO identity_reset_verifications_away`
      const before = Date.now()
      const tick = yield* delivery.tick("w1").pipe(
        Effect.ensuring(sql`ALTER TABLE identity_reset_verifications_away RENAME TO identity_reset_verifications`.pipe(Effect.orDie))
      )
      expect(outcomeOf(tick)).toBe("retry")
      const waiting = yield* rowOf(row.id)
      expect(waiting).toMatchObject({ state: "pending", attempt: 1, last_error: "storage-unavailable", lease_owner: null, fingerprint: null })
      // Backoff of the first retry: 160-200 ms (base 200 ms, jitter 0.2), not due at once.
      expect(waiting.next_attempt_at.getTime() - before).toBeGreaterThanOrEqual(150)
      expect((yield* provider.requests).length).toBe(0)
      yield* untilDue(waiting)
      expect(outcomeOf(yield* delivery.tick("w1"))).toBe("delivered")
    }))

  it.effect("a defect in the mail adapter is not swallowed: the row is quarantined provider-interrupted (the call may have gone out) and the tick dies with the defect", () =>
    Effect.gen(function* () {
      const { fx } = yield* setup
      const { env, settings } = yield* workerWith()
      const broken = ResetMailDelivery.Default.pipe(
        Layer.provide(PasswordResets.Default),
        Layer.provide(Layer.succeed(Mailer, Mailer.make({ send: () => Effect.dieMessage("adapter bug") }))),
        Layer.provide(ResetTemplateDefault),
        Layer.provide(Layer.succeed(ResetMailSettings, settings))
      )
      const delivery = yield* ResetMailDelivery.pipe(
        Effect.provide(broken),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
      )
      const row = yield* requestReset(fx)
      const exit = yield* Effect.exit(delivery.tick("w1"))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(yield* rowOf(row.id)).toMatchObject({ state: "quarantined", reason: "provider-interrupted", attempt: 1 })
    }))

  // --- What the outbox holds ----------------------------------------------------------------------------------

  it.effect("'The outbox stores no email address, reset token, or message body' and the verification keeps the token only sealed: no dump of either table holds the address, token, secret or subject in utf8, hex or base64", () =>
    Effect.gen(function* () {
      const { sql, provider, fx } = yield* setup
      const { delivery } = yield* workerWith()
      const row = yield* requestReset(fx)
      expect(outcomeOf(yield* delivery.tick("w1"))).toBe("delivered")
      const [mail] = yield* provider.requests
      const body = JSON.parse(mail!.bodyText) as { readonly subject: string; readonly text: string; readonly to: ReadonlyArray<string> }
      const token = tokenOf(mail!)
      expect(body.to).toEqual([fx.email])
      const secret = token.slice("reset_".length)
      const secretBytes = Buffer.from(secret, "base64url")
      expect(secretBytes.length).toBe(32)
      const forms = (bytes: Buffer) => [bytes.toString("hex"), bytes.toString("base64"), bytes.toString("base64url")]
      const tokenNeedles = [
        token,
        secret,
        ...forms(Buffer.from(token, "utf8")),
        ...forms(Buffer.from(secret, "utf8")),
        ...forms(secretBytes)
      ]

      const outbox = yield* sql<{ readonly dump: string }>`
        SELECT t::text || ' ' || to_jsonb(t)::text AS dump FROM reset_mail_outbox t WHERE id = ${row.id}`.withoutTransform
      expect(outbox).toHaveLength(1)
      const outboxNeedles = [
        fx.email,
        ...forms(Buffer.from(fx.email, "utf8")),
        body.subject,
        body.text.split("\n")[0]!,
        ...tokenNeedles
      ]
      for (const needle of outboxNeedles) expect(outbox[0]!.dump.toLowerCase()).not.toContain(needle.toLowerCase())

      const verifications = yield* sql<{ readonly dump: string }>`
        SELECT t::text || ' ' || to_jsonb(t)::text || ' ' ||
               encode(token_sealed, 'hex') || ' ' || encode(token_sealed, 'base64') || ' ' ||
               encode(token_lookup, 'hex') || ' ' || encode(token_lookup, 'base64') AS dump
        FROM identity_reset_verifications t WHERE id = ${row.verification_id}`.withoutTransform
      expect(verifications).toHaveLength(1)
      // base64 from PostgreSQL wraps lines at 76 characters.
      const dump = verifications[0]!.dump.replaceAll("\n", "")
      for (const needle of tokenNeedles) expect(dump).not.toContain(needle)
      for (const needle of tokenNeedles) expect(dump.toLowerCase()).not.toContain(needle.toLowerCase())
    }))
})
