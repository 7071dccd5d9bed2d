import { expect, layer } from "@effect/vitest"
import { backendMain, freePort, get, LoopbackProvider, LoopbackReply, probePort, type RecordedRequest, spawnBun, TestDatabase } from "@delivery/testing"
import { CLEANUP_WORKER_NAME as CLEANUP_WORKER, WORKER_NAME as WORKER } from "@delivery/team-applications"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { randomUUID } from "node:crypto"
import { annotation, OPERATOR_TOKEN } from "./support/Backend.ts"
import { call } from "./support/Http.ts"
import { start, tenantWithKey } from "./support/Receipts.ts"
import {
  application,
  disabledEnv,
  enabledEnv,
  expectRefusal,
  MAIL_TOKEN,
  notificationsOf,
  type NotificationRow,
  QUEUE_NAME,
  retireEarlierWork,
  rowsOf,
  SENDER,
  settled,
  sha256Hex,
  submit,
  TEAM_APPLICATIONS_PERMISSION,
  waitFor
} from "./support/TeamApplications.ts"

// Spec 002, "Team application notifications" and "Start and stop", through real `bun` backend processes over HTTP,
// the suite's real PostgreSQL and the real loopback provider: the submission's one transaction, replays and
// refusals; delivery by an enabled backend worker (not by ingress or a disabled process); retries, rejection and
// exhaustion; a process killed or stopped mid-send and the lease rule; the 30-day queue clean-up; SIGTERM mid-send.
// The only SQL writes are fixture steps (retiring earlier tests' waiting work, backdating an ended item).

const op = { token: OPERATOR_TOKEN }

const stateOf = (port: number, token: string, id: string) => call(port, "GET", `/api/team-applications/${id}`, { token })

const requestsFor = (requests: ReadonlyArray<RecordedRequest>, key: string) => requests.filter((r) => r.idempotencyKey === key)

/** What the provider received is exactly the stored envelope's fingerprinted body, with the effect id as key. */
const expectSentAsStored = (request: RecordedRequest, row: NotificationRow) => {
  expect(request.idempotencyKey).toBe(row.effect_id)
  expect(request.headers["authorization"]).toBe(`Bearer ${MAIL_TOKEN}`)
  expect(sha256Hex(request.body)).toBe(row.envelope_sha256)
  const envelope = JSON.parse(row.envelope)
  const mailbox = (m: { address: string; name?: string }) => (m.name === undefined ? m.address : `${JSON.stringify(m.name)} <${m.address}>`)
  expect(JSON.parse(request.bodyText)).toEqual({
    from: mailbox(envelope.from),
    to: [mailbox(envelope.to)],
    subject: envelope.subject,
    text: envelope.text,
    html: envelope.html
  })
}

const Suite = Layer.merge(TestDatabaseLive, LoopbackProvider.Default)

layer(Suite, { excludeTestServices: true, timeout: 120_000 })("team applications through real backend processes", (it) => {
  it.scoped("A submission commits the application, its command receipt, both notification envelopes, and one queue item per notification in one transaction; the queue items name only the effect; a replay answers the recorded response (idempotent-replayed: true) and writes nothing, other content under the same command id is 409 command-id-reused; without TEAM_APPLICATION_FROM new submissions are 503 team-applications-unconfigured; another tenant's id is 404; malformed bodies are 400 request-invalid and a credential without team-applications:write is 403, writing nothing (through `bun run start`)", () =>
    Effect.gen(function* () {
      const [{ port }, unconfigured] = yield* Effect.all([
        start(disabledEnv, { script: true }),
        start({ RECEIPT_DELIVERY: "disabled", TEAM_APPLICATION_DELIVERY: "disabled" })
      ], { concurrency: 2 })
      const { account, tenant, token } = yield* tenantWithKey(port, [TEAM_APPLICATIONS_PERMISSION])
      const body = application()
      const first = yield* submit(port, token, body)
      expect(first.status, first.text).toBe(201)
      expect(first.headers["idempotent-replayed"]).toBeUndefined()
      const id = first.json.application.id as string
      expect(first.json.application).toEqual({ id, tenant, commandId: body.commandId, team: body.team.slug, createdAt: expect.any(String) })
      expect(first.json.notifications.map((n: any) => n.audience)).toEqual(["applicant", "team"])
      const [applicantId, teamId] = first.json.notifications.map((n: any) => n.effectId as string)
      // The answer names the application and its effects, never an address, a name or the message.
      for (const secret of [body.applicant.email, body.applicant.name, body.team.email, body.team.name, body.message]) expect(first.text).not.toContain(secret)

      const rows = yield* rowsOf(tenant)
      expect([rows.applications.length, rows.commands.length, rows.audit.length, rows.outbox.length, rows.queue.length]).toEqual([1, 1, 1, 2, 2])
      // One transaction wrote every row: they all carry its transaction id.
      const xmins = new Set(Object.values(rows).flatMap((table: any) => table.map((r: any) => r.xmin)))
      expect(xmins.size).toBe(1)
      expect(rows.applications[0].row).toMatchObject({
        id,
        command_id: body.commandId,
        team_slug: body.team.slug,
        team_email: body.team.email,
        applicant_email: body.applicant.email,
        message: body.message,
        submitted_by: account
      })
      expect(rows.commands[0].row).toMatchObject({ command_id: body.commandId, application_id: id, request_sha256: expect.stringMatching(/^[0-9a-f]{64}$/), response: first.json })
      expect(rows.audit[0].row).toMatchObject({ application_id: id, action: "application-submitted", actor: expect.stringMatching(/^api-key:/), correlation_id: first.headers["x-correlation-id"] })
      // The outbox holds the private envelope (the mail rendered at submission, with the addresses) and its fingerprint.
      const outbox = rows.outbox.map((r: any) => r.row)
      expect(outbox.map((o: any) => [o.effect_id, o.audience, o.outcome, o.failures])).toEqual([[applicantId, "applicant", null, 0], [teamId, "team", null, 0]])
      const [toApplicant, toTeam] = outbox.map((o: any) => JSON.parse(o.envelope))
      expect(toApplicant).toMatchObject({ from: SENDER, to: { address: body.applicant.email, name: body.applicant.name } })
      expect(toTeam).toMatchObject({ from: SENDER, to: { address: body.team.email, name: body.team.name } })
      expect(toTeam.text).toContain(body.applicant.email)
      for (const o of outbox) expect(o.envelope_sha256).toMatch(/^[0-9a-f]{64}$/)
      // The queue items name only the effect: no address, no name, no message.
      const queue = rows.queue.map((r: any) => r.row)
      expect(queue.map((q: any) => [q.id, q.queue_name, q.element, q.attempts, q.completed, q.exhausted, q.acquired_by])).toEqual([
        [applicantId, QUEUE_NAME, JSON.stringify({ effect: applicantId }), 0, false, false, null],
        [teamId, QUEUE_NAME, JSON.stringify({ effect: teamId }), 0, false, false, null]
      ])
      for (const q of queue) expect(q.element).not.toContain("@")

      // No worker here: both wait, pending, and the view shows neither an address nor an envelope.
      const state = yield* stateOf(port, token, id)
      expect(state.status).toBe(200)
      expect(state.json.notifications.map((n: any) => [n.effectId, n.audience, n.state, n.attempts])).toEqual([[applicantId, "applicant", "pending", 0], [teamId, "team", "pending", 0]])
      for (const secret of [body.applicant.email, body.team.email, body.message, outbox[0].envelope_sha256]) expect(state.text).not.toContain(secret)

      // Replays: the same bytes, marked, nothing written (also with the default message spelled out, members reordered).
      const withoutMessage = application()
      const { message: _message, ...bare } = withoutMessage
      const second = yield* submit(port, token, bare)
      expect(second.status).toBe(201)
      const before = yield* rowsOf(tenant)
      for (const [again, recorded] of [[body, first], [{ applicant: body.applicant, message: body.message, team: body.team, commandId: body.commandId }, first], [{ ...bare, message: "" }, second]] as const) {
        const replay = yield* submit(port, token, again)
        expect([replay.status, replay.headers["idempotent-replayed"], replay.text]).toEqual([201, "true", recorded.text])
      }
      for (const other of [{ ...body, message: "other" }, { ...body, team: { ...body.team, email: "other@teams.example" } }, { ...body, applicant: { ...body.applicant, name: "Other" } }]) {
        const conflict = yield* submit(port, token, other)
        expectRefusal(conflict, 409, "TeamApplicationCommandConflict", "command-id-reused")
        expect(conflict.headers["idempotent-replayed"]).toBeUndefined()
      }
      expect(yield* rowsOf(tenant)).toEqual(before)

      // Concurrent submissions under one command id: one application, every other answer a replay of it.
      const racing = application()
      const answers = yield* Effect.all(Array.from({ length: 6 }, () => submit(port, token, racing)), { concurrency: "unbounded" })
      expect(answers.map((a) => a.status)).toEqual([201, 201, 201, 201, 201, 201])
      expect(answers.filter((a) => a.headers["idempotent-replayed"] === undefined)).toHaveLength(1)
      expect(new Set(answers.map((a) => a.text)).size).toBe(1)
      const raced = yield* rowsOf(tenant)
      expect([raced.applications.length, raced.commands.length, raced.audit.length, raced.outbox.length, raced.queue.length]).toEqual([3, 3, 3, 6, 6])

      // Without TEAM_APPLICATION_FROM: a new submission is refused and writes nothing; a replay still answers.
      expectRefusal(yield* submit(unconfigured.port, token, application()), 503, "TeamApplicationsUnavailable", "team-applications-unconfigured")
      const replayElsewhere = yield* submit(unconfigured.port, token, body)
      expect([replayElsewhere.status, replayElsewhere.headers["idempotent-replayed"], replayElsewhere.text]).toEqual([201, "true", first.text])
      expect(yield* rowsOf(tenant)).toEqual(raced)

      // Another tenant's application is not found, on its tenant route and under its tenant on the operator route.
      const other = yield* tenantWithKey(port, [TEAM_APPLICATIONS_PERMISSION])
      expectRefusal(yield* stateOf(port, other.token, id), 404, "TeamApplicationNotFound", "application-not-found")
      expectRefusal(yield* stateOf(port, token, randomUUID()), 404, "TeamApplicationNotFound", "application-not-found")
      expectRefusal(yield* call(port, "GET", `/operator/team-applications/${other.tenant}/${id}`, op), 404, "TeamApplicationNotFound", "application-not-found")
      const operator = yield* call(port, "GET", `/operator/team-applications/${tenant}/${id}`, op)
      expect([operator.status, operator.json]).toEqual([200, state.json])

      // The edge refuses malformed bodies before anything is written.
      const malformed: ReadonlyArray<unknown> = [
        { ...application(), extra: true },
        { ...application(), team: { ...body.team, phone: "123" } },
        { ...application(), commandId: "has space" },
        { ...application(), applicant: { ...body.applicant, email: "not-an-address" } },
        { ...application(), applicant: { ...body.applicant, name: "two\nlines" } },
        { ...application(), team: { ...body.team, slug: "Upper" } },
        { ...application(), message: "x".repeat(2001) },
        { commandId: "only-id" },
        "[]"
      ]
      for (const bad of malformed) {
        const refused = yield* submit(port, token, bad)
        expectRefusal(refused, 400, "RequestInvalid", "request-invalid")
        for (const secret of [body.applicant.email, body.team.email]) expect(refused.text).not.toContain(secret)
      }
      expectRefusal(yield* stateOf(port, token, "not-an-id"), 400, "RequestInvalid", "request-invalid")

      // Without the permission (another API key, a device credential): 403 on both routes, nothing written.
      const receiptsKey = yield* call(port, "POST", `/operator/tenants/${tenant}/api-keys`, { ...op, body: { account, kind: "agent", name: "receipts-only", permissions: ["receipts:write"] } })
      const device = yield* call(port, "POST", `/operator/tenants/${tenant}/device-credentials`, { ...op, body: { account, device: "d-1" } })
      expect([receiptsKey.status, device.status]).toEqual([201, 201])
      for (const credential of [receiptsKey.json.token as string, device.json.token as string]) {
        expectRefusal(yield* submit(port, credential, application()), 403, "PermissionDenied")
        expectRefusal(yield* submit(port, credential, body), 403, "PermissionDenied")
        expectRefusal(yield* stateOf(port, credential, id), 403, "PermissionDenied")
      }
      expect(yield* rowsOf(tenant)).toEqual(raced)
    }))

  it.scoped("Enabled workers reject incomplete provider configuration before the listener starts: TEAM_APPLICATION_DELIVERY=enabled without TEAM_APPLICATION_FROM and MAIL_PROVIDER_URL, or with an endpoint carrying credentials, exits non-zero naming the variables, nothing listening, no secret printed", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      const db = yield* TestDatabase
      const full = enabledEnv(provider)
      const { TEAM_APPLICATION_FROM: _from, MAIL_PROVIDER_URL: _url, ...incomplete } = full
      const cases: ReadonlyArray<readonly [Record<string, string>, ReadonlyArray<string>]> = [
        [incomplete, ["TEAM_APPLICATION_FROM", "MAIL_PROVIDER_URL"]],
        [{ ...full, MAIL_PROVIDER_URL: `http://user:${MAIL_TOKEN}@127.0.0.1:${provider.port}/emails` }, ["MAIL_PROVIDER_URL"]]
      ]
      const runs = yield* Effect.all(cases.map(([env, named]) =>
        Effect.gen(function* () {
          const port = yield* freePort
          const backend = yield* spawnBun(backendMain, { DATABASE_URL: db.url, PORT: String(port), OPERATOR_TOKEN, PASSWORD_RESET_DELIVERY: "disabled", ...env })
          return { port, backend, named }
        })), { concurrency: 2 })
      for (const { backend, named, port } of runs) {
        expect(yield* backend.exitCode()).not.toBe(0)
        const output = yield* backend.output
        for (const name of named) expect(output).toContain(name)
        expect(output).not.toContain("listening on")
        expect(output).not.toContain(MAIL_TOKEN)
        expect(yield* probePort(port)).toBe("refused")
      }
      expect((yield* provider.requests).length).toBe(0)
    }))

  it.scoped("Each attempt sends the stored envelope with the effect_id as the provider idempotency key: an enabled backend worker delivers both notifications once each (body = the fingerprinted envelope), seen as delivered with 1 attempt on the tenant and operator routes; the internal ingress and TEAM_APPLICATION_DELIVERY=disabled start no worker and the items wait, durable, for it", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      const [ingress, disabled] = yield* Effect.all([
        start({ ...enabledEnv(provider), ROLE: "ingress" }),
        start(disabledEnv)
      ], { concurrency: 2 })
      const { tenant, token } = yield* tenantWithKey(ingress.port, [TEAM_APPLICATIONS_PERMISSION])
      const bodies = [application(), application()]
      const viaIngress = yield* submit(ingress.port, token, bodies[0])
      const viaDisabled = yield* submit(disabled.port, token, bodies[1])
      expect([viaIngress.status, viaDisabled.status]).toEqual([201, 201])
      const ids = [viaIngress.json.application.id as string, viaDisabled.json.application.id as string]

      expect(JSON.parse((yield* get(ingress.port, "/ready")).body).checks.workers).toMatchObject({ enabled: false, running: [] })
      expect(JSON.parse((yield* get(disabled.port, "/ready")).body).checks.workers.running).not.toContain(WORKER)
      expect(yield* disabled.backend.output).toContain("team-application delivery disabled")
      // Many poll intervals later: nothing was taken, the provider was never called.
      yield* Effect.sleep("1 second")
      for (const id of ids) {
        expect((yield* notificationsOf(id)).map((n) => [n.state, n.attempts, n.acquired_by])).toEqual([["pending", 0, null], ["pending", 0, null]])
      }
      expect((yield* provider.requests).length).toBe(0)
      yield* Effect.all([ingress.backend.signal("SIGTERM"), disabled.backend.signal("SIGTERM")])
      expect(yield* Effect.all([ingress.backend.exitCode(), disabled.backend.exitCode()])).toEqual([0, 0])

      const { port } = yield* start(enabledEnv(provider))
      expect(JSON.parse((yield* get(port, "/ready")).body).checks.workers.running).toEqual(expect.arrayContaining([WORKER, CLEANUP_WORKER]))
      const rows = [...(yield* settled(ids[0]!)), ...(yield* settled(ids[1]!))]
      expect(rows.map((r) => [r.outcome, r.outcome_attempt, r.attempts, r.completed, r.failures])).toEqual(Array.from({ length: 4 }, () => ["delivered", 1, 1, true, 0]))
      // A moment later: still one request per notification, each accepted once by the provider.
      yield* Effect.sleep("300 millis")
      const requests = yield* provider.requests
      expect(requests).toHaveLength(4)
      expect((yield* provider.deliveries).map((d) => d.idempotencyKey).sort()).toEqual(rows.map((r) => r.effect_id).sort())
      for (const row of rows) {
        const sent = requestsFor(requests, row.effect_id)
        expect(sent).toHaveLength(1)
        expectSentAsStored(sent[0]!, row)
      }
      const [applicantMail, teamMail] = [requestsFor(requests, rows[0]!.effect_id)[0]!, requestsFor(requests, rows[1]!.effect_id)[0]!]
      expect(JSON.parse(applicantMail.bodyText)).toMatchObject({ from: `"${SENDER.name}" <${SENDER.address}>`, to: [`"${bodies[0]!.applicant.name}" <${bodies[0]!.applicant.email}>`] })
      expect(JSON.parse(teamMail.bodyText)).toMatchObject({ to: [`"${bodies[0]!.team.name}" <${bodies[0]!.team.email}>`] })

      for (const id of ids) {
        const mine = yield* stateOf(port, token, id)
        const operator = yield* call(port, "GET", `/operator/team-applications/${tenant}/${id}`, op)
        expect(mine.status).toBe(200)
        expect(mine.json.notifications.map((n: any) => [n.state, n.attempts, n.failures, n.lastError, n.nextAttemptAt, n.leaseExpiresAt])).toEqual([
          ["delivered", 1, 0, null, null, null],
          ["delivered", 1, 0, null, null, null]
        ])
        for (const n of mine.json.notifications) expect(n.outcomeAt).toEqual(expect.any(String))
        expect([operator.status, operator.json]).toEqual([200, mine.json])
      }
      const summary = yield* call(port, "GET", "/operator/team-applications/summary", op)
      expect(summary.status).toBe(200)
      expect(summary.json.states.find((s: any) => s.state === "delivered")?.count).toBeGreaterThanOrEqual(4)
    }))

  it.scoped("Failed retryable work waits the queue's retry delay and a retry sends the same request (503 then 200: failed with nextAttemptAt and lastError provider-5xx, then delivered at attempt 2); a 4xx is rejected and never retried; after TEAM_APPLICATION_DELIVERY_MAX_ATTEMPTS 5xx attempts it is exhausted", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      // A retry delay long enough to watch the waiting state.
      const { port } = yield* start(enabledEnv(provider, {
        TEAM_APPLICATION_DELIVERY_MAX_ATTEMPTS: "2",
        TEAM_APPLICATION_RETRY_BASE: "1 second",
        TEAM_APPLICATION_RETRY_CAP: "1 second"
      }))
      const { token } = yield* tenantWithKey(port, [TEAM_APPLICATIONS_PERMISSION])

      // 503 once: the applicant's notification (taken first) fails; the team's goes meanwhile; the retry delivers.
      yield* provider.script({ times: 1, reply: LoopbackReply.status(503) })
      const retried = yield* submit(port, token, application())
      expect(retried.status).toBe(201)
      const [applicantId, teamId] = retried.json.notifications.map((n: any) => n.effectId as string)
      const waiting = yield* waitFor(
        stateOf(port, token, retried.json.application.id),
        (answer) => answer.json.notifications[0].state === "failed",
        "saw the failed attempt waiting"
      )
      const failed = waiting.json.notifications[0]
      expect(failed).toMatchObject({ effectId: applicantId, state: "failed", attempts: 1, failures: 1, lastError: "provider-5xx", leaseExpiresAt: null, outcomeAt: null })
      const [firstTry] = yield* provider.requests
      // The retry delay (1 second, jittered by a fifth) runs from the failed attempt.
      expect(Date.parse(failed.nextAttemptAt)).toBeGreaterThan(firstTry!.receivedAt.getTime() + 700)
      const [waitingRow] = yield* notificationsOf(retried.json.application.id)
      expect([waitingRow!.last_failure, waitingRow!.completed, waitingRow!.acquired_by]).toEqual(["provider-5xx", false, null])
      expect(waitingRow!.available_at!.getTime()).toBeGreaterThan(waitingRow!.now.getTime())
      const retriedRows = yield* settled(retried.json.application.id)
      expect(retriedRows.map((r) => [r.audience, r.outcome, r.outcome_attempt, r.attempts, r.failures, r.last_error])).toEqual([
        ["applicant", "delivered", 2, 2, 1, "provider-5xx"],
        ["team", "delivered", 1, 1, 0, null]
      ])
      const after = (yield* stateOf(port, token, retried.json.application.id)).json.notifications[0]
      expect(after).toMatchObject({ state: "delivered", attempts: 2, nextAttemptAt: null })
      const attempts = requestsFor(yield* provider.requests, applicantId)
      expect(attempts.map((r) => r.status)).toEqual([503, 200])
      expect(attempts[1]!.idempotencyKey).toBe(attempts[0]!.idempotencyKey)
      expect(attempts[1]!.bodyText).toBe(attempts[0]!.bodyText)
      expect(Buffer.from(attempts[1]!.body).equals(Buffer.from(attempts[0]!.body))).toBe(true)
      for (const attempt of attempts) expectSentAsStored(attempt, retriedRows[0]!)
      expect(requestsFor(yield* provider.requests, teamId)).toHaveLength(1)

      // 4xx: rejected at its first attempt, ended, never sent again.
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.status(422) })
      const rejected = yield* submit(port, token, application())
      const rejectedRows = yield* settled(rejected.json.application.id)
      expect(rejectedRows.map((r) => [r.audience, r.outcome, r.outcome_attempt, r.attempts, r.completed, r.last_error])).toEqual([
        ["applicant", "rejected", 1, 1, true, "provider-4xx"],
        ["team", "delivered", 1, 1, true, null]
      ])
      expect((yield* stateOf(port, token, rejected.json.application.id)).json.notifications[0]).toMatchObject({ state: "rejected", attempts: 1, lastError: "provider-4xx" })
      // Past the retry delay: still one request each.
      yield* Effect.sleep("1500 millis")
      expect((yield* provider.requests).map((r) => r.status)).toEqual([422, 200])

      // The provider's Retry-After (here 0 seconds) replaces the queue's own delay (1 second).
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.status(503, { retryAfter: "0" }) })
      const hinted = yield* submit(port, token, application())
      const hintedRows = yield* settled(hinted.json.application.id)
      expect(hintedRows.map((r) => [r.outcome, r.outcome_attempt])).toEqual([["delivered", 2], ["delivered", 1]])
      const [refused, accepted] = requestsFor(yield* provider.requests, hintedRows[0]!.effect_id)
      expect(accepted!.receivedAt.getTime() - refused!.answeredAt!.getTime()).toBeLessThan(700)
      expect(accepted!.bodyText).toBe(refused!.bodyText)

      // 5xx every time: each notification ends exhausted after its 2 attempts, both sending the same request.
      yield* provider.reset
      yield* provider.script({ reply: LoopbackReply.status(503) })
      const exhausted = yield* submit(port, token, application())
      const exhaustedRows = yield* settled(exhausted.json.application.id)
      expect(exhaustedRows.map((r) => [r.outcome, r.outcome_attempt, r.attempts, r.failures, r.last_error, r.exhausted, r.completed, r.ended_at !== null])).toEqual([
        ["exhausted", 2, 2, 2, "provider-5xx", true, false, true],
        ["exhausted", 2, 2, 2, "provider-5xx", true, false, true]
      ])
      expect((yield* stateOf(port, token, exhausted.json.application.id)).json.notifications.map((n: any) => [n.state, n.attempts, n.nextAttemptAt])).toEqual([
        ["exhausted", 2, null],
        ["exhausted", 2, null]
      ])
      yield* Effect.sleep("1500 millis")
      const requests = yield* provider.requests
      expect(requests).toHaveLength(4)
      for (const row of exhaustedRows) {
        const sent = requestsFor(requests, row.effect_id)
        expect(sent).toHaveLength(2)
        for (const attempt of sent) expectSentAsStored(attempt, row)
      }
    }))

  it.scoped("Start and stop: a process killed mid-send cannot run cleanup; after TEAM_APPLICATION_DELIVERY_STALE_MS the next process takes the item again (attempt 2) and sends it with the same idempotency key and payload; the delivery is recorded once", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      const env = enabledEnv(provider, { TEAM_APPLICATION_DELIVERY_STALE_MS: "1500", MAIL_PROVIDER_TIMEOUT: "30 seconds" })
      const first = yield* start(env)
      const { token } = yield* tenantWithKey(first.port, [TEAM_APPLICATIONS_PERMISSION])
      const submitted = yield* submit(first.port, token, application())
      expect(submitted.status).toBe(201)
      const id = submitted.json.application.id as string
      const applicantId = submitted.json.notifications[0].effectId as string
      const [hung] = yield* provider.awaitRequests(1)
      expect(hung!.idempotencyKey).toBe(applicantId)
      yield* first.backend.signal("SIGKILL")
      expect(yield* first.backend.exitCode()).toBe(137)
      // Killed mid-attempt: the attempt is used, the lease still names the dead owner.
      const [killed] = yield* notificationsOf(id)
      expect([killed!.attempts, killed!.completed, killed!.outcome, killed!.acquired_by !== null, killed!.lease_expires_at !== null]).toEqual([1, false, null, true, true])
      const leaseEnd = killed!.lease_expires_at!

      const next = yield* start(env)
      const rows = yield* settled(id)
      expect(rows.map((r) => [r.audience, r.outcome, r.outcome_attempt, r.attempts, r.completed])).toEqual([
        ["applicant", "delivered", 2, 2, true],
        ["team", "delivered", 1, 1, true]
      ])
      const sent = requestsFor(yield* provider.requests, applicantId)
      expect(sent).toHaveLength(2)
      // Taken again only once the dead owner's lease had ended.
      expect(sent[1]!.receivedAt.getTime()).toBeGreaterThanOrEqual(leaseEnd.getTime() - 50)
      for (const attempt of sent) expectSentAsStored(attempt, rows[0]!)
      expect(sent[1]!.bodyText).toBe(sent[0]!.bodyText)
      expect((yield* provider.deliveries).filter((d) => d.idempotencyKey === applicantId)).toHaveLength(1)
      expect((yield* stateOf(next.port, token, id)).json.notifications[0]).toMatchObject({ state: "delivered", attempts: 2 })
    }))

  it.scoped("A worker that stops refreshing its lease loses it after TEAM_APPLICATION_DELIVERY_STALE_MS; another attempt then takes the item, and the late owner records nothing (SIGSTOP mid-send, SIGCONT after the other delivered); both stop with SIGTERM, exit 0", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      // The first request is answered 200 after longer than the lease: the answer reaches a late owner.
      yield* provider.script({ times: 1, reply: LoopbackReply.status(200, { delayMs: 3000 }) })
      const env = enabledEnv(provider, { TEAM_APPLICATION_DELIVERY_STALE_MS: "1500", MAIL_PROVIDER_TIMEOUT: "30 seconds" })
      const a = yield* start(env)
      const { token } = yield* tenantWithKey(a.port, [TEAM_APPLICATIONS_PERMISSION])
      const submitted = yield* submit(a.port, token, application())
      const id = submitted.json.application.id as string
      const applicantId = submitted.json.notifications[0].effectId as string
      yield* provider.awaitRequests(1)
      yield* a.backend.signal("SIGSTOP")
      yield* Effect.addFinalizer(() => a.backend.signal("SIGCONT"))
      const [stopped] = yield* notificationsOf(id)
      expect([stopped!.attempts, stopped!.state]).toEqual([1, "processing"])

      const b = yield* start(env)
      const rows = yield* settled(id)
      expect(rows.map((r) => [r.audience, r.outcome, r.outcome_attempt, r.attempts])).toEqual([
        ["applicant", "delivered", 2, 2],
        ["team", "delivered", 1, 1]
      ])
      expect(rows[0]!.acquired_by).toBeNull()

      yield* a.backend.signal("SIGCONT")
      // A gets its late 200 and tries to record it: the fence (attempt 1 is no longer the item's) refuses it.
      yield* a.backend.waitForOutput(new RegExp(`outcomes refused, the lease was lost[^\\n]*(?:\\n {2}[^\\n]*)*?\\n {2}items: [^\\n]*${applicantId}#1`))
      yield* Effect.sleep("300 millis")
      const after = yield* notificationsOf(id)
      expect(after.map((r) => [r.outcome, r.outcome_attempt, r.attempts, r.failures, r.last_error, r.completed])).toEqual([
        ["delivered", 2, 2, 0, null, true],
        ["delivered", 1, 1, 0, null, true]
      ])
      expect(after[0]!.ended_at).toEqual(rows[0]!.ended_at)
      const sent = requestsFor(yield* provider.requests, applicantId)
      expect(sent).toHaveLength(2)
      expect(sent[0]!.answeredAt).toBeDefined()
      expect(sent[1]!.bodyText).toBe(sent[0]!.bodyText)
      for (const attempt of sent) expectSentAsStored(attempt, after[0]!)

      yield* Effect.all([a.backend.signal("SIGTERM"), b.backend.signal("SIGTERM")])
      expect(yield* Effect.all([a.backend.exitCode(), b.backend.exitCode()])).toEqual([0, 0])
    }))

  it.scoped("The worker removes queue items that completed more than 30 days ago (an hourly clean-up that also runs when the worker starts); the outbox rows keep every outcome, so the state still reads delivered and a command replay after the cleanup delivers nothing again", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      const sql = yield* SqlClient.SqlClient
      yield* provider.reset
      yield* retireEarlierWork
      const first = yield* start(enabledEnv(provider))
      const { tenant, token } = yield* tenantWithKey(first.port, [TEAM_APPLICATIONS_PERMISSION])
      const oldBody = application()
      const old = yield* submit(first.port, token, oldBody)
      const recent = yield* submit(first.port, token, application())
      expect([old.status, recent.status]).toEqual([201, 201])
      const oldId = old.json.application.id as string
      const recentId = recent.json.application.id as string
      yield* settled(oldId)
      yield* settled(recentId)
      yield* first.backend.signal("SIGTERM")
      expect(yield* first.backend.exitCode()).toBe(0)
      const delivered = (yield* provider.requests).length
      expect(delivered).toBe(4)

      // Fixture: the old application's items ended 31 days ago, the recent one's 29 days ago.
      const backdate = (applicationId: string, days: number) =>
        sql`UPDATE effect_queue SET ended_at = ended_at - ${days} * interval '1 day'
            WHERE id IN (SELECT effect_id::text FROM team_application_outbox WHERE application_id = ${applicationId})`.withoutTransform
      yield* backdate(oldId, 31)
      yield* backdate(recentId, 29)
      const [kept] = yield* sql<{ readonly count: number }>`
        SELECT count(*)::int AS count FROM effect_queue WHERE queue_name = ${QUEUE_NAME} AND (completed OR exhausted)`

      const next = yield* start(enabledEnv(provider))
      // The entry's annotations may arrive in a later chunk than its header: wait for the one that counts.
      const removal = yield* next.backend.waitForOutput(/ended queue items removed[^\n]*(?:\n {2}[^\n]*)*?\n {2}removed: \d+/)
      expect(annotation(removal, "removed")).toBe("2")
      expect((yield* notificationsOf(oldId)).map((n) => [n.queued, n.outcome, n.outcome_attempt, n.state])).toEqual([
        [false, "delivered", 1, "delivered"],
        [false, "delivered", 1, "delivered"]
      ])
      expect((yield* notificationsOf(recentId)).map((n) => [n.queued, n.completed, n.outcome])).toEqual([[true, true, "delivered"], [true, true, "delivered"]])
      const state = yield* stateOf(next.port, token, oldId)
      expect(state.json.notifications.map((n: any) => [n.state, n.attempts])).toEqual([["delivered", 1], ["delivered", 1]])
      const operator = yield* call(next.port, "GET", `/operator/team-applications/${tenant}/${oldId}`, op)
      expect(operator.json).toEqual(state.json)
      const summaryAfter = (yield* call(next.port, "GET", "/operator/team-applications/summary", op)).json
      expect(summaryAfter.endedQueueItems).toBe(kept!.count - 2)
      expect(summaryAfter.states.find((s: any) => s.state === "missing")).toBeUndefined()

      const replay = yield* submit(next.port, token, oldBody)
      expect([replay.status, replay.headers["idempotent-replayed"], replay.text]).toEqual([201, "true", old.text])
      yield* Effect.sleep("500 millis")
      expect((yield* provider.requests).length).toBe(delivered)
      expect((yield* notificationsOf(oldId)).every((n) => !n.queued)).toBe(true)
    }))

  it.scoped("Start and stop: SIGTERM during an in-flight send aborts the call and exits 0; the item goes back to the queue (the attempt stays counted, due again, no outcome) and the next process delivers it under the same idempotency key and payload", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      const env = enabledEnv(provider, { MAIL_PROVIDER_TIMEOUT: "30 seconds" })
      const first = yield* start(env)
      const { token } = yield* tenantWithKey(first.port, [TEAM_APPLICATIONS_PERMISSION])
      const submitted = yield* submit(first.port, token, application())
      const id = submitted.json.application.id as string
      const applicantId = submitted.json.notifications[0].effectId as string
      yield* provider.awaitRequests(1)
      yield* first.backend.signal("SIGTERM")
      expect(yield* first.backend.exitCode()).toBe(0)
      const [aborted] = yield* provider.awaitAborts(1)
      expect(aborted!.idempotencyKey).toBe(applicantId)
      expect(yield* first.backend.output).toContain(`shutdown: worker ${WORKER} interrupted and joined`)

      const [released, untouched] = yield* notificationsOf(id)
      expect([released!.attempts, released!.completed, released!.exhausted, released!.acquired_by, released!.lease_expires_at, released!.outcome, released!.failures]).toEqual([1, false, false, null, null, null, 0])
      expect(released!.available_at!.getTime()).toBeLessThanOrEqual(released!.now.getTime())
      expect(released!.state).toBe("failed")
      expect([untouched!.attempts, untouched!.state]).toEqual([0, "pending"])

      const next = yield* start(env)
      const rows = yield* settled(id)
      expect(rows.map((r) => [r.audience, r.outcome, r.outcome_attempt, r.attempts])).toEqual([
        ["applicant", "delivered", 2, 2],
        ["team", "delivered", 1, 1]
      ])
      const sent = requestsFor(yield* provider.requests, applicantId)
      expect(sent).toHaveLength(2)
      expect(sent[1]!.bodyText).toBe(sent[0]!.bodyText)
      for (const attempt of sent) expectSentAsStored(attempt, rows[0]!)
      yield* next.backend.signal("SIGTERM")
      expect(yield* next.backend.exitCode()).toBe(0)
    }))
})
