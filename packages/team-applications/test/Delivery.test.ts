import { PersistedQueue } from "@effect/experimental"
import { Backoff, Canonical, ProviderHttp } from "@delivery/core"
import { fingerprint, Mailer, MailMessage } from "@delivery/mail"
import { CountingSqlLive, logProbe, LoopbackProvider, LoopbackReply, outcomesCounted, SqlCounter } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Cause, Context, Duration, Effect, Either, Exit, Fiber, Layer, Option, Redacted, Schema } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { cleanupLoop, deliveryLoop, DeliverySettings, makeDeliver, notificationHooks } from "../src/Delivery.ts"
import { type SubmitApplication, SubmitApplication as SubmitApplicationSchema } from "../src/Domain.ts"
import { QUEUE_NAME } from "../src/Domain.ts"
import * as EffectQueueStore from "../src/EffectQueueStore.ts"
import { renderNotifications } from "../src/Notifications.ts"
import { makeNotificationQueue, NotificationQueue, requestSha256, type Submitter, TeamApplications, TeamApplicationsSender } from "../src/TeamApplications.ts"
import type { DeliveryTiming } from "../src/TeamApplicationsConfig.ts"
import { TeamApplicationsRepo } from "../src/TeamApplicationsRepo.ts"

// Spec 002, "Team application notifications", in the package: submissions through TeamApplications.submit and
// attempts through the PersistedQueue over the project's store with the outbox hooks, on real PostgreSQL and a
// real loopback provider. Every test has its own tenant; the queue is shared, so each test drains what it made.

const SuiteLayer = Layer.mergeAll(LoopbackProvider.Default).pipe(Layer.provideMerge(TestDatabaseLive))

const MAIL_TOKEN = `mail-${randomBytes(24).toString("base64url")}`
const SENDER = { address: "teams@club.example", name: "Club" }

const timing: DeliveryTiming = {
  staleMs: 600,
  pollInterval: Duration.millis(20),
  maxAttempts: 3,
  retryBase: Duration.millis(100),
  retryCap: Duration.millis(100)
}

/** Submissions and attempts for one process: its own store (worker id, leases), queue, mailer and settings. */
const processFor = (options: {
  readonly timing?: Partial<DeliveryTiming>
  readonly refreshInterval?: Duration.DurationInput
  readonly sender?: Option.Option<typeof SENDER>
  readonly mailTimeout?: Duration.DurationInput
} = {}) =>
  Effect.gen(function* () {
    const provider = yield* LoopbackProvider
    const t = { ...timing, ...options.timing }
    const store = EffectQueueStore.layer({
      leaseDuration: Duration.millis(t.staleMs),
      pollInterval: t.pollInterval,
      backoff: Backoff.make({ base: t.retryBase, cap: t.retryCap, jitter: 0 }),
      hooks: { [QUEUE_NAME]: notificationHooks },
      ...(options.refreshInterval === undefined ? {} : { refreshInterval: options.refreshInterval })
    })
    const mail = Mailer.layerWith({
      endpoint: Either.getOrThrow(ProviderHttp.ProviderEndpoint.parse(provider.urlFor("/emails"))),
      token: Redacted.make(MAIL_TOKEN),
      timeout: Duration.decode(options.mailTimeout ?? "2 seconds")
    })
    const shared = Layer.mergeAll(
      Layer.effect(NotificationQueue, makeNotificationQueue).pipe(Layer.provide(PersistedQueue.layer)),
      Layer.succeed(TeamApplicationsSender, options.sender ?? Option.some(SENDER)),
      Layer.succeed(DeliverySettings, t),
      TeamApplicationsRepo.Default,
      mail
    ).pipe(Layer.provideMerge(store))
    // The process's one client: its statements are counted and can be made to fail (SqlCounter).
    const context = yield* Layer.build(TeamApplications.Default.pipe(Layer.provideMerge(shared), Layer.provideMerge(CountingSqlLive)))
    const queue = Context.get(context, NotificationQueue)
    const deliver = yield* Effect.provide(makeDeliver, context)
    /** One attempt, as the worker's tick makes it; its failure is recorded by the queue and returned here. */
    const attempt = Effect.exit(queue.take(deliver, { maxAttempts: t.maxAttempts }))
    return { applications: Context.get(context, TeamApplications), queue, attempt, context, timing: t, sql: Context.get(context, SqlCounter) }
  })

const counted = (outcome: string) => outcomesCounted("team-applications", outcome)

const tenantId = () => `t-${randomBytes(4).toString("hex")}`
const by = (tenant: string): Submitter => ({ tenant, account: "acct-1", actor: "api-key:k1", correlationId: randomBytes(16).toString("hex") })

const submission = (overrides: Partial<SubmitApplication> = {}): SubmitApplication => ({
  commandId: `cmd-${randomBytes(6).toString("hex")}`,
  team: { slug: "rowing", name: "Rowing Club", email: "board@rowing.example" },
  applicant: { name: "Alex Applicant", email: "alex@applicant.example" },
  message: "I row on weekends.\nCan I join?",
  ...overrides
})

type Proc = Effect.Effect.Success<ReturnType<typeof processFor>>

const submit = (proc: Proc, tenant: string, command = submission()) =>
  Effect.map(proc.applications.submit(command, by(tenant)).pipe(Effect.orDie), (result) => ({ ...result, command }))

const within = <A, E, R>(effect: Effect.Effect<A, E, R>, limit: Duration.DurationInput = "10 seconds") =>
  Effect.timeoutFail(effect, { duration: limit, onTimeout: () => new Error("test wait timed out") })

const until = <R>(check: Effect.Effect<boolean, unknown, R>, limit: Duration.DurationInput = "10 seconds") =>
  within(Effect.gen(function* () {
    while (!(yield* check)) yield* Effect.sleep("20 millis")
  }), limit)

interface StateRow {
  readonly effect_id: string
  readonly audience: string
  readonly state: string
  readonly attempts: number
  readonly failures: number
  readonly last_error: string | null
  readonly has_next: boolean
}

const statesOf = (applicationId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<StateRow>`SELECT effect_id::text AS effect_id, audience, state, attempts, failures, last_error, next_attempt_at IS NOT NULL AS has_next
                  FROM team_application_delivery_state WHERE application_id = ${applicationId} ORDER BY audience`.withoutTransform)

const outboxOf = (applicationId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly effect_id: string; readonly audience: string; readonly envelope: string; readonly envelope_sha256: string; readonly outcome: string | null; readonly outcome_attempt: number | null }>`
      SELECT effect_id::text AS effect_id, audience, envelope, envelope_sha256, outcome, outcome_attempt
      FROM team_application_outbox WHERE application_id = ${applicationId} ORDER BY audience`.withoutTransform)

const queueRowsOf = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly id: string; readonly element: string; readonly attempts: number; readonly completed: boolean; readonly exhausted: boolean }>`
      SELECT id, element, attempts, completed, exhausted FROM effect_queue WHERE id = ANY(${ids}) ORDER BY id`.withoutTransform)

const sha256 = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex")

/** Makes attempts with `proc` until `check` holds (checked before each attempt, so none is made after it holds). */
const attemptUntil = <R>(proc: { readonly attempt: Effect.Effect<unknown> }, check: Effect.Effect<boolean, unknown, R>) =>
  within(Effect.gen(function* () {
    while (!(yield* check)) yield* proc.attempt
  }))

/**
 * The queue is shared by the file's tests: before a test makes attempts, what earlier tests left unfinished is
 * ended (a fixture step), so its attempts take only its own items.
 */
const sweep = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`UPDATE effect_queue SET exhausted = true, ended_at = now(), acquired_at = NULL, acquired_by = NULL, lease_expires_at = NULL
      WHERE queue_name = ${QUEUE_NAME} AND NOT completed AND NOT exhausted`.withoutTransform)

/** Runs attempts until both of the application's notifications have an outcome. */
const deliverAll = (proc: Proc, applicationId: string) =>
  until(Effect.gen(function* () {
    const states = yield* statesOf(applicationId)
    if (states.every((s) => !["pending", "failed", "processing"].includes(s.state))) return true
    yield* proc.attempt
    return false
  }))

layer(SuiteLayer, { excludeTestServices: true })("team-application notifications (spec 002, real PostgreSQL and loopback provider)", (it) => {
  it.scoped("'A submission commits the application, its command receipt, both notification envelopes, and one queue item per notification in one transaction': queue items name only the effect", () =>
    Effect.gen(function* () {
      const proc = yield* processFor()
      const tenant = tenantId()
      const { replayed, response } = yield* submit(proc, tenant)
      expect(replayed).toBe(false)
      const ids = response.notifications.map((n) => n.effectId)
      expect(response.notifications.map((n) => n.audience)).toEqual(["applicant", "team"])
      const outbox = yield* outboxOf(response.application.id)
      expect(outbox.map((row) => [row.audience, row.outcome])).toEqual([["applicant", null], ["team", null]])
      const items = yield* queueRowsOf(ids)
      expect(items).toHaveLength(2)
      for (const item of items) {
        expect(JSON.parse(item.element)).toEqual({ effect: item.id })
        expect(item.element).not.toContain("@")
        expect([item.attempts, item.completed]).toEqual([0, false])
      }
      // The envelopes are the mail as rendered at submission, fingerprinted.
      for (const row of outbox) expect(fingerprint(Schema.decodeUnknownSync(Schema.parseJson(MailMessage))(row.envelope))).toBe(row.envelope_sha256)
      expect((yield* statesOf(response.application.id)).map((s) => s.state)).toEqual(["pending", "pending"])
    }))

  it.scoped("replays answer the recorded response and write nothing; the same command id with other content is refused (command-id-reused) and writes nothing", () =>
    Effect.gen(function* () {
      const proc = yield* processFor()
      const sql = yield* SqlClient.SqlClient
      const tenant = tenantId()
      const first = yield* submit(proc, tenant)
      const count = () => sql<{ readonly n: number }>`
        SELECT (SELECT count(*) FROM team_applications WHERE tenant_id = ${tenant})
             + (SELECT count(*) FROM team_application_outbox WHERE tenant_id = ${tenant})
             + (SELECT count(*) FROM team_application_audit WHERE tenant_id = ${tenant})
             + (SELECT count(*) FROM effect_queue WHERE id = ANY(${first.response.notifications.map((n) => n.effectId)}))::int AS n`.withoutTransform
      const before = (yield* count())[0]!.n
      const replay = yield* proc.applications.submit(first.command, by(tenant))
      expect(replay).toEqual({ replayed: true, response: first.response })
      const conflict = yield* Effect.flip(proc.applications.submit({ ...first.command, message: "changed" }, by(tenant)))
      expect(conflict).toMatchObject({ _tag: "TeamApplicationCommandConflict", reason: "command-id-reused" })
      expect((yield* count())[0]!.n).toBe(before)
      // Another tenant may use the same command id.
      const other = yield* proc.applications.submit(first.command, by(tenantId()))
      expect(other.replayed).toBe(false)
    }))

  it.scoped("the same command sent eight times at once submits one application: one submission, seven replays of it, nothing written twice", () =>
    Effect.gen(function* () {
      const proc = yield* processFor()
      const sql = yield* SqlClient.SqlClient
      const tenant = tenantId()
      // Twenty bursts, each of one command eight times at once: the transactions overlap in every burst.
      const bursts = 20
      let notifications = 0
      for (let burst = 0; burst < bursts; burst++) {
        const command = submission()
        const results = yield* Effect.all(
          Array.from({ length: 8 }, () => proc.applications.submit(command, by(tenant))),
          { concurrency: "unbounded" }
        )
        expect(results.filter((r) => !r.replayed).length).toBe(1)
        expect(new Set(results.map((r) => r.response.application.id)).size).toBe(1)
        notifications += results[0]!.response.notifications.length
      }
      const [counts] = yield* sql<{ readonly apps: number; readonly outbox: number }>`
        SELECT (SELECT count(*)::int FROM team_applications WHERE tenant_id = ${tenant}) AS apps,
               (SELECT count(*)::int FROM team_application_outbox WHERE tenant_id = ${tenant}) AS outbox`.withoutTransform
      expect(counts).toEqual({ apps: bursts, outbox: notifications })
    }))

  it.scoped("an application's state lists its two notifications (pending, no attempt yet); another tenant or an unknown id reads none; a notification id that is not a whole uuid reads none; the summary counts them", () =>
    Effect.gen(function* () {
      const proc = yield* processFor()
      const tenant = tenantId()
      const pendingBefore = (yield* proc.applications.summary).states.find((s) => s.state === "pending")?.count ?? 0
      const { command, response } = yield* submit(proc, tenant)
      const state = Option.getOrThrow(yield* proc.applications.state(tenant, response.application.id))
      expect({ ...state, createdAt: undefined }).toEqual({
        id: response.application.id,
        tenant,
        team: command.team.slug,
        createdAt: undefined,
        notifications: response.notifications.map((n) => ({
          effectId: n.effectId,
          audience: n.audience,
          state: "pending",
          attempts: 0,
          nextAttemptAt: null,
          leaseExpiresAt: null,
          failures: 0,
          lastError: null,
          outcomeAt: null
        }))
      })
      expect(state.createdAt.toISOString()).toBe(response.application.createdAt)
      expect(yield* proc.applications.state(tenantId(), response.application.id)).toEqual(Option.none())
      expect(yield* proc.applications.state(tenant, crypto.randomUUID())).toEqual(Option.none())
      const effectId = response.notifications[0]!.effectId
      expect(Option.isSome(yield* proc.applications.notification(tenant, effectId))).toBe(true)
      for (const id of [`x${effectId}`, `${effectId}x`]) expect(yield* proc.applications.notification(tenant, id)).toEqual(Option.none())
      const summary = yield* proc.applications.summary
      expect(summary.states.find((s) => s.state === "pending")?.count).toBe(pendingBefore + 2)
      // An item ended (completed, as a fixture step) is counted among the ended queue items.
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE effect_queue SET completed = true, ended_at = now() WHERE id = ${effectId}`.withoutTransform
      expect((yield* proc.applications.summary).endedQueueItems).toBe(summary.endedQueueItems + 1)
    }))

  it.scoped("a queue item that cannot be stored fails the submission as storage-unavailable (offer) and commits nothing", () =>
    Effect.gen(function* () {
      const proc = yield* processFor()
      const sql = yield* SqlClient.SqlClient
      const tenant = tenantId()
      yield* proc.sql.failWhen((text) => text.includes("INSERT INTO effect_queue"))
      const failure = yield* Effect.flip(proc.applications.submit(submission(), by(tenant)))
      yield* proc.sql.failWhen(undefined)
      expect(failure).toMatchObject({ _tag: "TeamApplicationsStorageUnavailable", operation: "offer" })
      const [counts] = yield* sql<{ readonly n: number }>`
        SELECT ((SELECT count(*) FROM team_applications WHERE tenant_id = ${tenant})
             + (SELECT count(*) FROM team_application_outbox WHERE tenant_id = ${tenant}))::int AS n`.withoutTransform
      expect(counts!.n).toBe(0)
    }))

  it.scoped("a submission whose commit's answer is lost (the connection gone after COMMIT) is refused as storage-unavailable (submit), not as a defect; sent again, it is replayed: one application, two notifications", () =>
    Effect.gen(function* () {
      const proc = yield* processFor()
      const sql = yield* SqlClient.SqlClient
      const tenant = tenantId()
      const command = submission()
      yield* proc.sql.loseAnswerWhen((text) => text === "COMMIT")
      const failure = yield* Effect.flip(proc.applications.submit(command, by(tenant)))
      yield* proc.sql.loseAnswerWhen(undefined)
      expect(failure).toMatchObject({ _tag: "TeamApplicationsStorageUnavailable", operation: "submit" })
      const again = yield* proc.applications.submit(command, by(tenant))
      expect(again.replayed).toBe(true)
      expect(again.response.notifications).toHaveLength(2)
      const [counts] = yield* sql<{ readonly applications: number; readonly notifications: number }>`
        SELECT (SELECT count(*) FROM team_applications WHERE tenant_id = ${tenant})::int AS applications,
               (SELECT count(*) FROM team_application_outbox WHERE tenant_id = ${tenant})::int AS notifications`.withoutTransform
      expect(counts).toEqual({ applications: 1, notifications: 2 })
    }))

  it.scoped("TeamApplications.Default brings its own repository: built from the queue, the sender and a database alone, it records a submission", () =>
    Effect.gen(function* () {
      const proc = yield* processFor()
      const given = Context.pick(NotificationQueue, TeamApplicationsSender, SqlClient.SqlClient)(proc.context)
      const built = yield* Layer.build(TeamApplications.Default.pipe(Layer.provide(Layer.succeedContext(given))))
      const { response } = yield* Context.get(built, TeamApplications).submit(submission(), by(tenantId())).pipe(Effect.orDie)
      expect(response.notifications).toHaveLength(2)
      expect(yield* outboxOf(response.application.id)).toHaveLength(2)
    }))

  it.scoped("without a sender a new submission is refused and writes nothing, while a replay still answers", () =>
    Effect.gen(function* () {
      const withSender = yield* processFor()
      const without = yield* processFor({ sender: Option.none() })
      const tenant = tenantId()
      const first = yield* submit(withSender, tenant)
      expect(yield* without.applications.submit(first.command, by(tenant))).toEqual({ replayed: true, response: first.response })
      const refused = yield* Effect.flip(without.applications.submit(submission(), by(tenant)))
      expect(refused).toEqual({ _tag: "SenderUnconfigured" })
      const sql = yield* SqlClient.SqlClient
      expect((yield* sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM team_applications WHERE tenant_id = ${tenant}`.withoutTransform)[0]!.n).toBe(1)
    }))

  it.scoped("the request's identity is its canonical JSON with defaults applied: an omitted message replays as an empty one", () =>
    Effect.sync(() => {
      const { message: _, ...withoutMessage } = submission()
      const omitted = Schema.decodeUnknownSync(SubmitApplicationSchema)(withoutMessage)
      expect(requestSha256(omitted)).toBe(requestSha256({ ...withoutMessage, message: "" }))
      expect(requestSha256(omitted)).toBe(sha256(Either.getOrThrow(Canonical.canonicalString({ ...withoutMessage, message: "" }))))
      expect(requestSha256({ ...withoutMessage, message: "x" })).not.toBe(requestSha256(omitted))
    }))

  it.scoped("'Each attempt decodes the stored envelope and sends it with the effect_id as the provider idempotency key': both delivered once, the body exactly the frozen envelope's, outcome and attempt kept in the outbox", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor()
      const { response } = yield* submit(proc, tenantId())
      yield* deliverAll(proc, response.application.id)
      const requests = yield* provider.requests
      const outbox = yield* outboxOf(response.application.id)
      expect(requests.map((r) => r.idempotencyKey).sort()).toEqual(outbox.map((row) => row.effect_id).sort())
      for (const row of outbox) {
        const request = requests.find((r) => r.idempotencyKey === row.effect_id)!
        expect(sha256(request.body)).toBe(row.envelope_sha256)
        expect(request.headers.authorization).toBe(`Bearer ${MAIL_TOKEN}`)
        expect([row.outcome, row.outcome_attempt]).toEqual(["delivered", 1])
      }
      expect((yield* statesOf(response.application.id)).map((s) => [s.state, s.attempts])).toEqual([["delivered", 1], ["delivered", 1]])
      const items = yield* queueRowsOf(outbox.map((row) => row.effect_id))
      expect(items.every((item) => item.completed && item.attempts === 1)).toBe(true)
    }))

  it.scoped("'Failed while a retry waits', then 'a retry sends the same request': a 5xx leaves the notification failed with its code and next attempt, the retry sends the same key and bytes", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor({ timing: { retryBase: Duration.millis(400), retryCap: Duration.millis(400) } })
      const { response } = yield* submit(proc, tenantId())
      const applicant = response.notifications[0]!.effectId
      yield* provider.script({ key: applicant, times: 1, reply: LoopbackReply.status(503) })
      yield* provider.script({ key: response.notifications[1]!.effectId, reply: LoopbackReply.status(200) })
      yield* attemptUntil(proc, Effect.map(statesOf(response.application.id), (states) => states[0]!.state === "failed"))
      const failed = (yield* statesOf(response.application.id))[0]!
      expect(failed).toMatchObject({ state: "failed", attempts: 1, failures: 1, last_error: "provider-5xx", has_next: true })
      yield* deliverAll(proc, response.application.id)
      const sent = (yield* provider.requests).filter((r) => r.idempotencyKey === applicant)
      expect(sent).toHaveLength(2)
      expect(Buffer.from(sent[1]!.body).equals(Buffer.from(sent[0]!.body))).toBe(true)
      expect((yield* statesOf(response.application.id))[0]).toMatchObject({ state: "delivered", attempts: 2, failures: 1, last_error: "provider-5xx" })
    }))

  it.scoped("a provider's Retry-After sets the retry delay (bounded by the retry cap)", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor({ timing: { retryBase: Duration.millis(100), retryCap: Duration.seconds(20) } })
      const { response } = yield* submit(proc, tenantId())
      yield* provider.script({ reply: LoopbackReply.status(503, { retryAfter: "15" }) })
      yield* attemptUntil(proc, Effect.map(statesOf(response.application.id), (states) => states.every((s) => s.state === "failed")))
      const sql = yield* SqlClient.SqlClient
      const due = yield* sql<{ readonly ms: number }>`
        SELECT (extract(epoch FROM available_at - now()) * 1000)::float8 AS ms FROM effect_queue
        WHERE id = ANY(${response.notifications.map((n) => n.effectId)})`.withoutTransform
      for (const row of due) {
        expect(row.ms).toBeGreaterThan(13_000)
        expect(row.ms).toBeLessThanOrEqual(15_000)
      }
    }))

  it.scoped("a 4xx is a permanent rejection: rejected after one attempt, never sent again", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor()
      const { response } = yield* submit(proc, tenantId())
      yield* provider.script({ reply: LoopbackReply.status(422) })
      yield* deliverAll(proc, response.application.id)
      expect((yield* statesOf(response.application.id)).map((s) => [s.state, s.attempts, s.last_error])).toEqual([
        ["rejected", 1, "provider-4xx"],
        ["rejected", 1, "provider-4xx"]
      ])
      expect(yield* provider.requests).toHaveLength(2)
    }))

  it.scoped("after TEAM_APPLICATION_DELIVERY_MAX_ATTEMPTS failed attempts the outbox keeps the outcome exhausted, with the last failure", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor({ timing: { maxAttempts: 2, retryBase: Duration.millis(20), retryCap: Duration.millis(20) } })
      const { response } = yield* submit(proc, tenantId())
      yield* provider.script({ reply: LoopbackReply.drop() })
      yield* deliverAll(proc, response.application.id)
      const states = yield* statesOf(response.application.id)
      expect(states.map((s) => [s.state, s.attempts, s.failures])).toEqual([["exhausted", 2, 2], ["exhausted", 2, 2]])
      expect(states.every((s) => s.last_error !== null && /^provider-/.test(s.last_error))).toBe(true)
      expect(yield* provider.requests).toHaveLength(4)
    }))

  it.scoped("a stored envelope that was changed (no longer its fingerprint) is never sent: envelope-invalid", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const sql = yield* SqlClient.SqlClient
      const proc = yield* processFor()
      const { response } = yield* submit(proc, tenantId())
      yield* sql`UPDATE team_application_outbox SET envelope = replace(envelope, 'Alex', 'Eve')
                 WHERE application_id = ${response.application.id}`.withoutTransform
      yield* deliverAll(proc, response.application.id)
      expect((yield* statesOf(response.application.id)).map((s) => s.state)).toEqual(["envelope-invalid", "envelope-invalid"])
      expect(yield* provider.requests).toHaveLength(0)
    }))

  it.scoped("'Processing while an attempt holds the lease'; a late owner whose lease was taken over records nothing: the outcome is the new attempt's", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      // A never refreshes (a stopped process); B is healthy. The provider holds A's request until released.
      const a = yield* processFor({ refreshInterval: "1 hour", timing: { staleMs: 500 } })
      const b = yield* processFor({ timing: { staleMs: 500 } })
      const { response } = yield* submit(a, tenantId())
      const [first] = response.notifications
      yield* provider.script({ key: first!.effectId, times: 1, reply: LoopbackReply.hang() })
      const late = yield* Effect.fork(a.attempt)
      yield* provider.awaitRequests(1)
      expect((yield* statesOf(response.application.id))[0]!.state).toBe("processing")
      // The other notification may go first; B runs until the first one is delivered by its second attempt.
      yield* attemptUntil(b, Effect.map(statesOf(response.application.id), (states) => states[0]!.state === "delivered"))
      yield* provider.release(LoopbackReply.status(500))
      yield* within(Fiber.join(late))
      const row = (yield* outboxOf(response.application.id))[0]!
      expect([row.outcome, row.outcome_attempt]).toEqual(["delivered", 2])
      expect((yield* statesOf(response.application.id))[0]).toMatchObject({ state: "delivered", attempts: 2, failures: 0 })
      const sent = (yield* provider.requests).filter((r) => r.idempotencyKey === first!.effectId)
      expect(sent).toHaveLength(2)
      expect(Buffer.from(sent[1]!.body).equals(Buffer.from(sent[0]!.body))).toBe(true)
    }))

  it.scoped("'The worker removes queue items that completed more than 30 days ago'; 'the outbox rows keep every outcome, so a command replay after the cleanup delivers nothing again'", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const sql = yield* SqlClient.SqlClient
      const proc = yield* processFor()
      const tenant = tenantId()
      const { command, response } = yield* submit(proc, tenant)
      yield* deliverAll(proc, response.application.id)
      const ids = response.notifications.map((n) => n.effectId)
      yield* sql`UPDATE effect_queue SET ended_at = now() - interval '31 days' WHERE id = ANY(${ids})`.withoutTransform
      const queue = Context.get(proc.context, EffectQueueStore.EffectQueue)
      expect(yield* queue.removeEnded(QUEUE_NAME, Duration.days(30))).toBeGreaterThanOrEqual(2)
      expect(yield* queueRowsOf(ids)).toHaveLength(0)
      expect((yield* statesOf(response.application.id)).map((s) => [s.state, s.attempts])).toEqual([["delivered", 1], ["delivered", 1]])
      const replay = yield* proc.applications.submit(command, by(tenant))
      expect(replay.replayed).toBe(true)
      expect(yield* queueRowsOf(ids)).toHaveLength(0)
      const idle = yield* proc.queue.take(() => Effect.succeed("taken")).pipe(Effect.timeoutOption("300 millis"))
      expect(Option.isNone(idle)).toBe(true)
      expect(yield* provider.requests).toHaveLength(2)
    }))

  it.scoped("an interrupted attempt (shutdown mid-send) puts the notification back with its attempt counted; the next attempt sends the same request", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor()
      const { response } = yield* submit(proc, tenantId())
      const [first] = response.notifications
      yield* provider.script({ key: first!.effectId, times: 1, reply: LoopbackReply.hang() })
      const running = yield* Effect.fork(proc.attempt)
      yield* provider.awaitRequests(1)
      yield* Fiber.interrupt(running)
      const state = (yield* statesOf(response.application.id))[0]!
      expect(state).toMatchObject({ state: "failed", attempts: 1 })
      yield* deliverAll(proc, response.application.id)
      const sent = (yield* provider.requests).filter((r) => r.idempotencyKey === first!.effectId)
      expect(sent.length).toBeGreaterThanOrEqual(2)
      expect(sent.every((r) => Buffer.from(r.body).equals(Buffer.from(sent[0]!.body)))).toBe(true)
      expect((yield* statesOf(response.application.id))[0]).toMatchObject({ state: "delivered", attempts: 2 })
    }))

  it.scoped("the worker loop: one attempt per tick and the poll interval after it, failures included; an attempt's failure never ends the loop", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor({ timing: { pollInterval: Duration.millis(300), retryBase: Duration.millis(10), retryCap: Duration.millis(10) } })
      const { response } = yield* submit(proc, tenantId())
      yield* provider.script({ reply: LoopbackReply.status(503), times: 1 })
      const { deliveryLoop } = yield* Effect.promise(() => import("../src/Delivery.ts"))
      const loop = yield* Effect.fork(Effect.provide(deliveryLoop, proc.context))
      yield* provider.awaitRequests(3)
      const times = (yield* provider.requests).map((r) => r.receivedAt.getTime())
      yield* Fiber.interrupt(loop)
      expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(280)
      expect(times[2]! - times[1]!).toBeGreaterThanOrEqual(280)
      yield* attemptUntil(proc, Effect.map(statesOf(response.application.id), (states) => states.every((s) => s.state === "delivered")))
    }))

  it.scoped("a provider timeout is an ambiguous outcome: retried under the same key with the same bytes, never settled as rejected", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor({ mailTimeout: "300 millis", timing: { retryBase: Duration.millis(50), retryCap: Duration.millis(50) } })
      const { response } = yield* submit(proc, tenantId())
      const [first] = response.notifications
      yield* provider.script({ key: first!.effectId, times: 1, reply: LoopbackReply.hang() })
      yield* attemptUntil(proc, Effect.map(statesOf(response.application.id), (states) => states[0]!.state === "failed"))
      expect((yield* statesOf(response.application.id))[0]).toMatchObject({ state: "failed", attempts: 1, last_error: "provider-timeout" })
      yield* deliverAll(proc, response.application.id)
      const sent = (yield* provider.requests).filter((r) => r.idempotencyKey === first!.effectId)
      expect(sent).toHaveLength(2)
      expect(Buffer.from(sent[1]!.body).equals(Buffer.from(sent[0]!.body))).toBe(true)
      expect((yield* statesOf(response.application.id))[0]).toMatchObject({ state: "delivered", attempts: 2 })
    }))

  it.scoped("a queue item without its outbox row, or whose outbox row already has an outcome, is settled without a send and without changing the outcome", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const sql = yield* SqlClient.SqlClient
      const proc = yield* processFor()
      const orphan = crypto.randomUUID()
      yield* proc.queue.offer({ effect: orphan }, { id: orphan })
      expect(yield* within(proc.attempt)).toEqual(Exit.succeed({ outcome: "envelope-invalid", code: "envelope-missing" }))
      expect(yield* queueRowsOf([orphan])).toMatchObject([{ completed: true, attempts: 1 }])
      const { response } = yield* submit(proc, tenantId())
      const ids = response.notifications.map((n) => n.effectId)
      const [first, second] = yield* outboxOf(response.application.id)
      // An older version recorded the outcomes (a rejection, an exhaustion) and left the items incomplete (a fixture step).
      yield* sql`UPDATE team_application_outbox SET outcome = 'rejected', outcome_attempt = 1, outcome_at = now(), last_error = 'provider-4xx'
                 WHERE effect_id = ${first!.effect_id}`.withoutTransform
      yield* sql`UPDATE team_application_outbox SET outcome = 'exhausted', outcome_attempt = 1, outcome_at = now(), last_error = 'provider-5xx'
                 WHERE effect_id = ${second!.effect_id}`.withoutTransform
      const attempts = [yield* within(proc.attempt), yield* within(proc.attempt)]
      expect(attempts.map((exit) => Exit.isSuccess(exit) && exit.value.outcome).sort()).toEqual(["exhausted", "rejected"])
      expect((yield* queueRowsOf(ids)).map((row) => row.completed)).toEqual([true, true])
      expect((yield* outboxOf(response.application.id)).map((row) => [row.outcome, row.outcome_attempt])).toEqual([["rejected", 1], ["exhausted", 1]])
      expect(yield* provider.requests).toHaveLength(0)
    }))

  it.scoped("the outbox unreadable mid-attempt: the attempt fails and, its outcome unrecordable too, the item keeps its lease until it expires, then a new attempt delivers it", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const sql = yield* SqlClient.SqlClient
      const proc = yield* processFor({ timing: { retryBase: Duration.millis(50), retryCap: Duration.millis(50) } })
      const { response } = yield* submit(proc, tenantId())
      const ids = response.notifications.map((n) => n.effectId)
      yield* Effect.acquireUseRelease(
        sql`ALTER TABLE team_application_outbox RENAME TO team_application_outbox_away`.withoutTransform,
        () => within(proc.attempt),
        () => Effect.orDie(sql`ALTER TABLE team_application_outbox_away RENAME TO team_application_outbox`.withoutTransform)
      )
      const failure = yield* sql<{ readonly last_failure: string | null; readonly attempts: number; readonly completed: boolean }>`
        SELECT last_failure, attempts, completed FROM effect_queue WHERE id = ANY(${ids}) AND attempts > 0`.withoutTransform
      expect(failure).toEqual([{ last_failure: null, attempts: 1, completed: false }])
      expect(yield* provider.requests).toHaveLength(0)
      yield* deliverAll(proc, response.application.id)
      const states = yield* statesOf(response.application.id)
      expect(states.map((s) => s.state)).toEqual(["delivered", "delivered"])
      expect(states.map((s) => s.attempts).sort()).toEqual([1, 2])
    }))

  it.scoped("the outbox row unreadable for one attempt: the attempt fails as storage-unavailable (kept by the queue and the outbox), nothing is sent, and the retry delivers", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor({ timing: { retryBase: Duration.millis(50), retryCap: Duration.millis(50) } })
      const { response } = yield* submit(proc, tenantId())
      const ids = response.notifications.map((n) => n.effectId)
      yield* proc.sql.failWhen((text) => text.includes("SELECT envelope, envelope_sha256, outcome FROM team_application_outbox"))
      const failed = yield* within(proc.attempt)
      yield* proc.sql.failWhen(undefined)
      expect(Exit.isFailure(failed)).toBe(true)
      const sql = yield* SqlClient.SqlClient
      const queueRows = yield* sql<{ readonly last_failure: string | null; readonly attempts: number }>`
        SELECT last_failure, attempts FROM effect_queue WHERE id = ANY(${ids}) AND attempts > 0`.withoutTransform
      expect(queueRows).toEqual([{ last_failure: "storage-unavailable", attempts: 1 }])
      const states = yield* statesOf(response.application.id)
      expect(states.filter((s) => s.failures > 0).map((s) => [s.state, s.last_error])).toEqual([["failed", "storage-unavailable"]])
      expect(yield* provider.requests).toHaveLength(0)
      yield* deliverAll(proc, response.application.id)
      expect((yield* statesOf(response.application.id)).map((s) => s.state)).toEqual(["delivered", "delivered"])
    }))

  it.scoped("'The worker removes queue items that completed more than 30 days ago once an hour': the clean-up loop's first run removes them at once and logs the count; a failed run is logged and the loop waits for the next", () =>
    Effect.gen(function* () {
      yield* sweep
      const sql = yield* SqlClient.SqlClient
      const proc = yield* processFor()
      const old = `cleanup-${randomBytes(6).toString("hex")}`
      yield* sql`INSERT INTO effect_queue (id, queue_name, element, completed, attempts, ended_at, available_at, created_at, updated_at)
                 VALUES (${old}, ${QUEUE_NAME}, '{}', true, 1, now() - interval '31 days', now(), now(), now())`.withoutTransform
      const logs = yield* logProbe
      yield* proc.sql.failWhen((text) => text.includes("DELETE FROM effect_queue"))
      const failing = yield* Effect.fork(Effect.provide(cleanupLoop, Layer.merge(Layer.succeedContext(proc.context), logs.layer)))
      yield* within(logs.next((entry) => entry.message.includes("queue clean-up failed")))
      expect(yield* queueRowsOf([old])).toHaveLength(1)
      expect(failing.unsafePoll()).toBeNull()
      yield* Fiber.interrupt(failing)
      yield* proc.sql.failWhen(undefined)
      const loop = yield* Effect.fork(Effect.provide(cleanupLoop, Layer.merge(Layer.succeedContext(proc.context), logs.layer)))
      const removed = yield* within(logs.next((entry) => entry.message.includes("ended queue items removed")))
      expect(removed.annotations).toMatchObject({ removed: 1 })
      expect(yield* queueRowsOf([old])).toEqual([])
      expect(loop.unsafePoll()).toBeNull()
      yield* Fiber.interrupt(loop)
    }))

  it.scoped("notifications are rendered word for word: the applicant's confirmation and the team's mail with the applicant's contact and message, HTML escaped", () =>
    Effect.sync(() => {
      const [applicant, team] = renderNotifications(SENDER, submission({ applicant: { name: "A <b>", email: "a@x.example" }, message: "Hi & <hello>\nbye" }))
      expect(applicant).toEqual({
        audience: "applicant",
        message: {
          from: SENDER,
          to: { address: "a@x.example", name: "A <b>" },
          subject: "Your application to Rowing Club",
          text: "Hello A <b>,\n\nyour application to join Rowing Club has been received and passed on to the team.\nThey will answer you at this address.",
          html: "<p>Hello A &lt;b&gt;,</p>\n<p>your application to join Rowing Club has been received and passed on to the team.</p>\n<p>They will answer you at this address.</p>"
        }
      })
      expect(team).toEqual({
        audience: "team",
        message: {
          from: SENDER,
          to: { address: "board@rowing.example", name: "Rowing Club" },
          subject: "New application from A <b>",
          text: "A <b> <a@x.example> applied to join Rowing Club.\n\n> Hi & <hello>\n> bye",
          html: "<p>A &lt;b&gt; &lt;a@x.example&gt; applied to join Rowing Club.</p>\n<blockquote>Hi &amp; &lt;hello&gt;<br>bye</blockquote>"
        }
      })
      const [, silent] = renderNotifications(SENDER, submission({ message: "" }))
      expect(silent!.message.text).toBe("Alex Applicant <alex@applicant.example> applied to join Rowing Club.")
    }))

  it.scoped("a submission that fails after its queue items were offered commits nothing at all", () =>
    Effect.gen(function* () {
      const proc = yield* processFor()
      const sql = yield* SqlClient.SqlClient
      const tenant = tenantId()
      const orphans = sql<{ readonly n: number }>`
        SELECT count(*)::int AS n FROM effect_queue q WHERE q.queue_name = ${QUEUE_NAME}
          AND NOT EXISTS (SELECT 1 FROM team_application_outbox o WHERE o.effect_id::text = q.id)`.withoutTransform
      const orphansBefore = (yield* orphans)[0]!.n
      // The audit row is written last; an actor the table refuses fails the transaction after the offers.
      const failed = yield* Effect.exit(proc.applications.submit(submission(), { ...by(tenant), actor: "not an actor" }))
      expect(Exit.isFailure(failed)).toBe(true)
      const counts = yield* sql<{ readonly apps: number; readonly outbox: number }>`
        SELECT (SELECT count(*) FROM team_applications WHERE tenant_id = ${tenant})::int AS apps,
               (SELECT count(*) FROM team_application_outbox WHERE tenant_id = ${tenant})::int AS outbox`.withoutTransform
      expect(counts[0]).toEqual({ apps: 0, outbox: 0 })
      expect((yield* orphans)[0]!.n).toBe(orphansBefore)
    }))

  it.scoped("the worker's loop passes TEAM_APPLICATION_DELIVERY_MAX_ATTEMPTS to each attempt and counts each attempt once under team-applications: retry, then exhausted on the last allowed attempt, delivered", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const proc = yield* processFor({ timing: { maxAttempts: 3, retryBase: Duration.millis(20), retryCap: Duration.millis(20) } })
      const before = { retry: yield* counted("retry"), exhausted: yield* counted("exhausted"), delivered: yield* counted("delivered") }
      yield* provider.script({ path: "/emails", reply: LoopbackReply.status(503) })
      const failing = yield* submit(proc, tenantId())
      const loop = yield* Effect.fork(Effect.provide(deliveryLoop, proc.context))
      yield* until(Effect.map(statesOf(failing.response.application.id), (states) => states.every((s) => s.state === "exhausted")))
      // Three attempts each, no fourth: the loop's bound, not the queue's default.
      expect((yield* statesOf(failing.response.application.id)).map((s) => s.attempts)).toEqual([3, 3])
      yield* until(Effect.map(counted("exhausted"), (n) => n === before.exhausted + 2))
      expect(yield* counted("retry")).toBe(before.retry + 4)

      yield* provider.reset
      const delivered = yield* submit(proc, tenantId())
      yield* until(Effect.map(statesOf(delivered.response.application.id), (states) => states.every((s) => s.state === "delivered")))
      yield* until(Effect.map(counted("delivered"), (n) => n === before.delivered + 2))
      yield* Fiber.interrupt(loop)
      expect({ retry: yield* counted("retry"), exhausted: yield* counted("exhausted") }).toEqual({ retry: before.retry + 4, exhausted: before.exhausted + 2 })
    }))

  it.scoped("the worker's loop logs a provider's refusal by its code and any other failure whole, counts a damaged item as exhausted, and goes on", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const sql = yield* SqlClient.SqlClient
      const proc = yield* processFor({ timing: { retryBase: Duration.millis(20), retryCap: Duration.millis(20) } })
      const logs = yield* logProbe
      const before = { retry: yield* counted("retry"), exhausted: yield* counted("exhausted") }
      // A damaged queue item (a fixture step): its take fails before any handler runs, and the store ends it exhausted.
      const damaged = crypto.randomUUID()
      yield* sql`INSERT INTO effect_queue (id, queue_name, element, available_at, created_at, updated_at)
                 VALUES (${damaged}, ${QUEUE_NAME}, 'not json', now(), now(), now())`.withoutTransform
      const loop = yield* Effect.fork(Effect.provide(deliveryLoop, Layer.merge(Layer.succeedContext(proc.context), logs.layer)))
      const whole = yield* within(logs.next((entry) => entry.message.includes("notification attempt failed")))
      expect(whole.annotations).not.toHaveProperty("reason")
      expect(whole.cause).toContain("holds no JSON")
      expect({ retry: yield* counted("retry"), exhausted: yield* counted("exhausted") }).toEqual({ ...before, exhausted: before.exhausted + 1 })
      yield* provider.script({ path: "/emails", reply: LoopbackReply.status(503), times: 1 })
      yield* submit(proc, tenantId())
      const refused = yield* within(logs.next((entry) => entry.message.includes("notification attempt failed")))
      expect(refused.annotations).toMatchObject({ reason: "provider-5xx" })
      expect(refused.cause).toBeUndefined()
      expect(loop.unsafePoll()).toBeNull()
      yield* Fiber.interrupt(loop)
    }))

  it.scoped("a queue item whose element is JSON its schema refuses ends exhausted (element-invalid) on its first attempt: nothing sent, its outbox row marked, counted once, the application's other notification delivered", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* sweep
      const sql = yield* SqlClient.SqlClient
      const proc = yield* processFor({ timing: { maxAttempts: 3 } })
      const before = { retry: yield* counted("retry"), exhausted: yield* counted("exhausted"), delivered: yield* counted("delivered") }
      const { response } = yield* submit(proc, tenantId())
      const [damaged, intact] = yield* outboxOf(response.application.id)
      // A fixture step: the stored element edited to JSON of another shape (its effect no uuid).
      yield* sql`UPDATE effect_queue SET element = '{"effect":"not-a-uuid"}' WHERE id = ${damaged!.effect_id}`.withoutTransform
      const loop = yield* Effect.fork(Effect.provide(deliveryLoop, proc.context))
      yield* until(Effect.map(statesOf(response.application.id), (states) => states.every((s) => s.state !== "pending" && s.state !== "processing")))
      yield* until(Effect.map(counted("delivered"), (n) => n === before.delivered + 1))
      yield* Fiber.interrupt(loop)
      const states = yield* statesOf(response.application.id)
      expect(states.find((s) => s.effect_id === damaged!.effect_id)).toMatchObject({ state: "exhausted", attempts: 1, last_error: "element-invalid" })
      expect(states.find((s) => s.effect_id === intact!.effect_id)).toMatchObject({ state: "delivered", attempts: 1 })
      expect((yield* queueRowsOf([damaged!.effect_id]))[0]).toMatchObject({ attempts: 1, completed: false, exhausted: true })
      expect((yield* provider.requests).map((r) => r.idempotencyKey)).toEqual([intact!.effect_id])
      expect({ retry: yield* counted("retry"), exhausted: yield* counted("exhausted"), delivered: yield* counted("delivered") })
        .toEqual({ retry: before.retry, exhausted: before.exhausted + 1, delivered: before.delivered + 1 })
    }))

  it.scoped("a completion that is not an attempt's result is a defect: the hook records nothing", () =>
    Effect.gen(function* () {
      const exit = yield* Effect.exit(notificationHooks.completed!({ id: crypto.randomUUID(), attempt: 1 }, { outcome: "sent-somewhere" }))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
    }))
})
