import { LoopbackReply, type RecordedRequest } from "@delivery/testing"
import { Effect } from "effect"
import type { Evidence } from "../Evidence.ts"
import type { Scenario } from "../Scenario.ts"
import type { World } from "../World.ts"
import {
  accountKeys,
  application,
  call,
  describeAccount,
  exitOf,
  OUTBOX_FAST,
  outboxMessage,
  PERMISSIONS,
  pollUntil,
  provision,
  readPool,
  seconds,
  sha256Hex,
  signingKey,
  StepFailed,
  unique
} from "./Support.ts"

// Spec 002, "Team application notifications": "A worker that stops refreshing its lease loses it after
// TEAM_APPLICATION_DELIVERY_STALE_MS. Another attempt then takes the item, and the late owner records nothing."
// Spec 000's outbox lease is fenced the same way (`WHERE attempt = $claimed`). A real owner (backend-a) starts
// sending a team-application notification and an outbox message into provider answers that come late; it is
// suspended (SIGSTOP) mid-send and past both leases; backend-b takes both items and delivers them (next attempt,
// same idempotency key, identical body); backend-a is resumed (SIGCONT), gets its late answers and records nothing:
// the recorded outcomes stay backend-b's. Both stop with exit 0 on SIGTERM.

const NAME = "lease-takeover"
const PROJECT = "proof"
const HOOKS = "/hooks/lease"
/** The late answer to backend-a's notification: long after its 3 s lease, and after backend-b has delivered. */
const MAIL_DELAY_MS = 8_000
/** The late answer to backend-a's webhook: within its 2 s request timeout, but backend-a is stopped by then. */
const HOOK_DELAY_MS = 1_500

interface QueueRow {
  readonly effect_id: string
  readonly audience: string
  readonly envelope_sha256: string
  readonly outcome: string | null
  readonly outcome_attempt: number | null
  readonly attempts: number | null
  readonly lease_expires_at: Date | null
  readonly ended_at: Date | null
  readonly state: string
  /** The row versions (xmin) of the outbox row and its queue item: any write changes one. */
  readonly version: string
}

const firstOn = (requests: ReadonlyArray<RecordedRequest>, path: string) => requests.find((r) => r.path === path)

export const leaseTakeover: Scenario = {
  name: NAME,
  run: (world, evidence) => Effect.scoped(run(world, evidence))
}

const run = (world: World, evidence: Evidence) =>
  Effect.gen(function* () {
    const check = (name: string, ok: boolean, detail?: string) => evidence.check(NAME, name, ok, detail)
    const tenantId = unique("lease")
    const signing = signingKey(tenantId)
    // MAIL_PROVIDER_TIMEOUT outlasts the late answer, so backend-a's call is still waiting for it when resumed.
    const env = { ...OUTBOX_FAST, SIGNER_KEYS: signing.signerKeys, MAIL_PROVIDER_TIMEOUT: "30 seconds" }
    const sql = yield* readPool(world)
    const op = { token: world.operatorToken }

    const a = yield* world.start("backend-a", { env })
    // Whatever happens below, a suspended process is resumed (so that the world's clean-up can stop it).
    yield* Effect.addFinalizer(() => a.process.signal("SIGCONT"))
    const tenant = yield* provision(world, a.port, {
      tenant: tenantId,
      permissions: [PERMISSIONS.outbox, PERMISSIONS.teamApplications],
      signing,
      targets: { [PROJECT]: HOOKS }
    })

    yield* world.loopback.script(
      { path: "/emails", times: 1, reply: LoopbackReply.status(200, { delayMs: MAIL_DELAY_MS }) },
      { path: HOOKS, times: 1, reply: LoopbackReply.status(200, { delayMs: HOOK_DELAY_MS }) }
    )
    const submitted = yield* call(a.port, "POST", "/api/team-applications", { token: tenant.token, body: application() })
    const enqueued = yield* call(a.port, "POST", "/api/outbox/messages", { token: tenant.token, body: outboxMessage(tenantId, PROJECT, 1, unique("lt")) })
    check("backend-a accepts a team application and an outbox message (201 each)", submitted.status === 201 && enqueued.status === 201, `statuses ${submitted.status} ${enqueued.status}`)
    if (submitted.status !== 201 || enqueued.status !== 201) return yield* new StepFailed({ message: "work not accepted" })
    const applicationId = submitted.json.application.id as string
    const notificationKeys = (submitted.json.notifications as ReadonlyArray<{ readonly effectId: string }>).map((n) => n.effectId)
    const messageId = enqueued.json.message.id as string

    // backend-a's first attempts reach the provider, whose answers are late: suspend it mid-send.
    const sending = yield* pollUntil(world.loopback.requests, (rs) => firstOn(rs, "/emails") !== undefined && firstOn(rs, HOOKS) !== undefined, { timeoutMs: 15_000, everyMs: 20 })
    check("backend-a starts sending the notification and the webhook", sending.ok, `${sending.value.length} requests`)
    if (!sending.ok) return yield* new StepFailed({ message: "backend-a never sent" })
    yield* a.process.signal("SIGSTOP")
    const stoppedAt = Date.now()
    const lateMail = firstOn(sending.value, "/emails")!
    const lateHook = firstOn(sending.value, HOOKS)!
    const mailKey = lateMail.idempotencyKey ?? ""
    check("the late notification and webhook carry the item's identity as idempotency key", notificationKeys.includes(mailKey) && lateHook.idempotencyKey === messageId)

    const rows = sql<QueueRow>`
      SELECT o.effect_id::text AS effect_id, o.audience, o.envelope_sha256, o.outcome, o.outcome_attempt, q.attempts,
             q.lease_expires_at, q.ended_at, s.state,
             o.xmin::text || '/' || coalesce(q.xmin::text, '-') AS version
      FROM team_application_outbox o
      LEFT JOIN effect_queue q ON q.id = o.effect_id::text
      JOIN team_application_delivery_state s ON s.effect_id = o.effect_id
      WHERE o.application_id = ${applicationId} ORDER BY o.audience`.withoutTransform
    const mailRow = (list: ReadonlyArray<QueueRow>) => list.find((r) => r.effect_id === mailKey)
    const held = mailRow(yield* rows)
    check(
      "suspended mid-send, backend-a holds the notification's lease (attempt 1, processing, no outcome)",
      held !== undefined && held.attempts === 1 && held.state === "processing" && held.outcome === null,
      `attempt ${held?.attempts}, ${held?.state}`
    )
    const mailLeaseEnd = held?.lease_expires_at?.getTime() ?? stoppedAt

    // backend-b: the same configuration; it takes both items once backend-a's leases end.
    const b = yield* world.start("backend-b", { env })
    const bMessage = call(b.port, "GET", `/operator/outbox/messages/${tenantId}/${PROJECT}/${messageId}`, op)
    const hookHeld = yield* bMessage
    check(
      "backend-a holds the message's lease while suspended (delivering, attempt 1)",
      hookHeld.json?.state === "delivering" && hookHeld.json?.attempt === 1,
      `${hookHeld.json?.state}, attempt ${hookHeld.json?.attempt}`
    )
    const hookLeaseEnd = hookHeld.json?.dueAt === undefined || hookHeld.json?.dueAt === null ? stoppedAt : Date.parse(hookHeld.json.dueAt)

    const taken = yield* pollUntil(
      Effect.all([rows, bMessage]),
      ([list, m]) => list.length === 2 && list.every((r) => r.outcome !== null) && m.json?.state === "delivered",
      { timeoutMs: 25_000, everyMs: 100 }
    )
    const [takenRows, takenMessage] = taken.value
    const takenMail = mailRow(takenRows)
    check("backend-b delivers both notifications and the message while backend-a is suspended", taken.ok, `notifications ${takenRows.map((r) => r.outcome).join(",")}, message ${takenMessage.json?.state}`)
    check(
      "the taken notification is recorded as backend-b's attempt (delivered, attempt 2)",
      takenMail?.outcome === "delivered" && takenMail.outcome_attempt === 2,
      `${takenMail?.outcome} attempt ${takenMail?.outcome_attempt}`
    )
    check("the taken message is recorded as backend-b's attempt (delivered, attempt 2)", takenMessage.json?.state === "delivered" && takenMessage.json?.attempt === 2, `attempt ${takenMessage.json?.attempt}`)
    const afterTake = yield* world.loopback.requests
    const mailRetry = afterTake.filter((r) => r.idempotencyKey === mailKey)[1]
    const hookRetry = afterTake.filter((r) => r.idempotencyKey === messageId)[1]
    check(
      "backend-b's attempts start only after backend-a's leases ended",
      mailRetry !== undefined && hookRetry !== undefined && mailRetry.receivedAt.getTime() >= mailLeaseEnd - 50 && hookRetry.receivedAt.getTime() >= hookLeaseEnd - 50,
      `notification +${seconds((mailRetry?.receivedAt.getTime() ?? 0) - stoppedAt)} s, message +${seconds((hookRetry?.receivedAt.getTime() ?? 0) - stoppedAt)} s after the suspension`
    )
    check("backend-a is still suspended, not exited, while backend-b takes over", !(yield* a.process.hasExited))
    const messageVersion = () =>
      Effect.map(sql<{ readonly version: string }>`SELECT xmin::text AS version FROM outbox_messages WHERE id = ${messageId}`.withoutTransform, (r) => r[0]?.version)
    const recorded = { rows: takenRows, message: takenMessage.json, messageVersion: yield* messageVersion() }

    // backend-a resumes and gets its late answers: the fence refuses its outcomes.
    yield* a.process.signal("SIGCONT")
    const refusal = yield* a.process
      .waitForOutput(new RegExp(`outcomes refused, the lease was lost[^\\n]*(?:\\n {2}[^\\n]*)*?\\n {2}items: [^\\n]*${mailKey}#1`), "20 seconds")
      .pipe(Effect.either)
    check("resumed, backend-a logs that its notification outcome was refused (lease lost, attempt 1)", refusal._tag === "Right")
    const hookAnswered = yield* pollUntil(
      world.loopback.requests,
      (rs) => rs.find((r) => r.seq === lateHook.seq)?.answeredAt !== undefined && rs.find((r) => r.seq === lateMail.seq)?.answeredAt !== undefined,
      { timeoutMs: 15_000 }
    )
    check("backend-a's late calls are answered (the provider's 200 reaches the late owner)", hookAnswered.ok)
    // The outbox records outcomes every 100 ms: give backend-a's recorder time to try.
    yield* Effect.sleep("1500 millis")
    const late = yield* rows
    const lateMessage = yield* bMessage
    const unchanged = late.every((r) => {
      const before = recorded.rows.find((x) => x.effect_id === r.effect_id)
      return before !== undefined && r.version === before.version && r.outcome === before.outcome && r.outcome_attempt === before.outcome_attempt &&
        r.ended_at?.getTime() === before.ended_at?.getTime()
    })
    check("the late owner records nothing: both notification outcomes are unchanged (row versions, outcome, attempt, end)", unchanged, late.map((r) => `${r.audience} ${r.outcome}#${r.outcome_attempt}`).join(", "))
    check(
      "the late owner records nothing: the message stays delivered by attempt 2 (row version and delivery time unchanged)",
      lateMessage.json?.state === "delivered" && lateMessage.json?.attempt === 2 && lateMessage.json?.deliveredAt === recorded.message?.deliveredAt &&
        (yield* messageVersion()) === recorded.messageVersion,
      `${lateMessage.json?.state}, attempt ${lateMessage.json?.attempt}`
    )

    // What the provider saw: one delivery per key, every attempt the same request.
    const requests = yield* world.loopback.requests
    const deliveries = yield* world.loopback.deliveries
    const mails = accountKeys(notificationKeys, requests, deliveries)
    const hooks = accountKeys([messageId], requests, deliveries)
    check("notifications: one delivery per idempotency key, every attempt with an identical body", mails.undelivered === 0 && mails.acceptedTwice === 0 && mails.changedBodies === 0, describeAccount(mails, notificationKeys.length))
    check("message: one delivery for its key, both attempts with an identical body", hooks.undelivered === 0 && hooks.acceptedTwice === 0 && hooks.changedBodies === 0 && hooks.requests === 2, describeAccount(hooks, 1))
    const sentAsStored = requests
      .filter((r) => r.idempotencyKey !== undefined && notificationKeys.includes(r.idempotencyKey))
      .every((r) => sha256Hex(r.body) === late.find((row) => row.effect_id === r.idempotencyKey)?.envelope_sha256)
    check("every notification attempt sends exactly the stored envelope (its SHA-256)", sentAsStored)
    const webhookIds = new Set(requests.filter((r) => r.idempotencyKey === messageId).map((r) => r.headers["webhook-id"]))
    check("both webhook attempts carry the same webhook-id", webhookIds.size === 1 && webhookIds.has(messageId))

    const readyA = yield* call(a.port, "GET", "/ready")
    check("resumed, backend-a is ready again (its workers still run)", readyA.status === 200, `status ${readyA.status}`)
    yield* Effect.all([a.process.signal("SIGTERM"), b.process.signal("SIGTERM")])
    const [codeA, codeB] = yield* Effect.all([exitOf(a.process), exitOf(b.process)])
    check("backend-a and backend-b exit 0 on SIGTERM", codeA === 0 && codeB === 0, `exits ${codeA} ${codeB}`)
    return {
      recoverySeconds: seconds(taken.at - b.startedAt),
      duplicates: { "team-applications": mails.duplicates, outbox: hooks.duplicates }
    }
  })
