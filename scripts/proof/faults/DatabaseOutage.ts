import { Effect, Fiber } from "effect"
import type { Evidence } from "../Evidence.ts"
import type { Scenario } from "../Scenario.ts"
import type { Backend, World } from "../World.ts"
import {
  accountKeys,
  type Answer,
  application,
  call,
  describeAccount,
  exitOf,
  is2xx,
  OUTBOX_FAST,
  outboxMessage,
  PERMISSIONS,
  pollUntil,
  provision,
  readPool,
  receipt,
  seconds,
  signingKey,
  StepFailed,
  unique
} from "./Support.ts"

// DESIGN, "The one rule behind everything": nothing is acknowledged before it is committed, nothing committed is
// lost; CONVENTIONS: "A database outage is an expected outcome for a delivery system". With a steady stream of work
// over HTTP to two backends (team applications, receipts, outbox messages), PostgreSQL is stopped (connections cut)
// for a few seconds while the stream goes on, then started again on the same port and data. Nothing is acknowledged
// during the outage (503 or no connection, never 2xx), the backend processes keep running and become ready again
// without a restart, every piece of work acknowledged before or after the outage reaches its final state (delivered
// once per key, identical bodies), and nothing that was refused was committed.

const NAME = "database-outage"
const PROJECT = "proof"
const HOOKS = "/hooks/outage"
const CLIENTS = 3
const WARM_UP_MS = 3_000
const OUTAGE_MS = 5_000
const AFTER_MS = 3_000

type Family = "team-applications" | "receipts" | "outbox"
const FAMILIES: ReadonlyArray<Family> = ["team-applications", "receipts", "outbox"]

interface Sent {
  readonly family: Family
  readonly backend: string
  /** The command id (team applications, receipts) or the idempotency key (outbox) of the request. */
  readonly ref: string
  readonly answer: Answer
}

export const databaseOutage: Scenario = {
  name: NAME,
  run: (world, evidence) => Effect.scoped(run(world, evidence))
}

const run = (world: World, evidence: Evidence) =>
  Effect.gen(function* () {
    const check = (name: string, ok: boolean, detail?: string) => evidence.check(NAME, name, ok, detail)
    const tenantId = unique("outage")
    const signing = signingKey(tenantId)
    // A receipt's post-commit attempt cut off by the stop (mail sent, outcome not written) stays claimed until the
    // stale-claim rule takes it back: at the 60 s default that is after the final-state wait below gives up. 8 s
    // still outlasts a live attempt (provider call 2 s, RECEIPT_INLINE_TIMEOUT 5 s).
    const env = { ...OUTBOX_FAST, RECEIPT_STALE_CLAIM: "8 seconds", SIGNER_KEYS: signing.signerKeys }
    const backends: ReadonlyArray<Backend> = [yield* world.start("backend-a", { env }), yield* world.start("backend-b", { env })]
    // The processes the stream and the checks talk to: the same two, unless one had to be restarted (see below).
    const live: Array<Backend> = [...backends]
    const tenant = yield* provision(world, backends[0]!.port, {
      tenant: tenantId,
      permissions: [PERMISSIONS.outbox, PERMISSIONS.receipts, PERMISSIONS.teamApplications],
      signing,
      targets: { [PROJECT]: HOOKS }
    })
    const pids = backends.map((b) => b.process.pid)

    // The stream: CLIENTS loops, each sending one request at a time, families and backends in turn.
    const sent: Array<Sent> = []
    let streaming = true
    let n = 0
    const tag = unique("o")
    const one = Effect.suspend(() => {
      const i = n++
      const family = FAMILIES[i % FAMILIES.length]!
      const backend = live[Math.floor(i / FAMILIES.length) % live.length]!
      const request = family === "team-applications"
        ? (() => {
          const body = application()
          return { ref: body.commandId, path: "/api/team-applications", body }
        })()
        : family === "receipts"
        ? (() => {
          const body = receipt()
          return { ref: body.commandId, path: "/api/receipts", body }
        })()
        : (() => {
          const body = outboxMessage(tenantId, PROJECT, i + 1, tag)
          return { ref: body.envelope.idempotencyKey, path: "/api/outbox/messages", body }
        })()
      return Effect.map(
        call(backend.port, "POST", request.path, { token: tenant.token, body: request.body, timeoutMs: 10_000 }),
        (answer) => void sent.push({ family, backend: backend.name, ref: request.ref, answer })
      )
    })
    const client = Effect.gen(function* () {
      while (streaming) {
        yield* one
        yield* Effect.sleep("100 millis")
      }
    })
    const stream = yield* Effect.fork(Effect.all(Array.from({ length: CLIENTS }, () => client), { concurrency: "unbounded", discard: true }))

    yield* Effect.sleep(WARM_UP_MS)
    const ackedBefore = sent.filter((s) => is2xx(s.answer.status)).length
    check("before the outage the backends acknowledge the stream", ackedBefore > 0, `${ackedBefore}/${sent.length} acknowledged`)

    // The outage: the server stops (connections cut) and stays down while the stream goes on.
    const stopBegin = Date.now()
    yield* world.cluster.stop
    const stopDone = Date.now()
    yield* Effect.sleep(OUTAGE_MS / 2)
    const health = yield* Effect.forEach(backends, (b) => call(b.port, "GET", "/health"))
    const ready = yield* Effect.forEach(backends, (b) => call(b.port, "GET", "/ready"))
    check("during the outage both backends answer /health 200", health.every((h) => h.status === 200), `statuses ${health.map((h) => h.status).join(" ")}`)
    check(
      "during the outage both backends answer /ready 503 naming the database",
      ready.every((r) => r.status === 503 && (r.json?.failed ?? []).includes("database")),
      `statuses ${ready.map((r) => r.status).join(" ")}, failed ${ready.map((r) => (r.json?.failed ?? []).join("+")).join(" ")}`
    )
    yield* Effect.sleep(OUTAGE_MS / 2)
    const exitedDuring = yield* Effect.forEach(backends, (b) => b.process.hasExited)
    // For a process that stopped: which worker stopped it (a worker name from its log, nothing else).
    const stoppedBy = yield* Effect.forEach(backends, (b) =>
      Effect.map(b.process.output, (out) => /worker (\S+) failed: stopping the process/.exec(out)?.[1] ?? "unknown"))
    check(
      "both backend processes keep running through the outage",
      exitedDuring.every((e) => !e),
      backends.map((b, i) => `${b.name} ${exitedDuring[i] ? `exited (stopped by worker ${stoppedBy[i]})` : "running"}`).join(", ")
    )
    const startBegin = Date.now()
    yield* world.cluster.start
    const startDone = Date.now()
    evidence.notes[`${NAME}.outageSeconds`] = seconds(startBegin - stopDone)

    // A process that did not survive the outage is started again, as its supervisor would, so that the checks below
    // still say whether anything acknowledged was lost; the checks above and below record that it had to be.
    const exitCodes: Array<string> = []
    for (const [i, backend] of backends.entries()) {
      if (!(yield* backend.process.hasExited)) continue
      exitCodes.push(`${backend.name} exit ${yield* exitOf(backend.process, "1 second")}`)
      live[i] = yield* world.start(`${backend.name}-restarted`, { env })
    }
    if (exitCodes.length > 0) evidence.notes[`${NAME}.restartedAfterExit`] = exitCodes

    // Ready again without a restart: the same processes, the pool reconnected, every worker running.
    const readyAgain = yield* pollUntil(
      Effect.forEach(live, (b) => call(b.port, "GET", "/ready")),
      (rs) => rs.every((r) => r.status === 200),
      { timeoutMs: 30_000, everyMs: 100 }
    )
    check(
      "after PostgreSQL starts again both backends are ready without a restart",
      readyAgain.ok && exitCodes.length === 0 && live.every((b, i) => b.process.pid === pids[i]),
      `ready ${seconds(readyAgain.at - startDone)} s after the start${exitCodes.length === 0 ? "" : `, only after restarting (${exitCodes.join(", ")})`}`
    )
    yield* Effect.sleep(AFTER_MS)
    streaming = false
    yield* Fiber.join(stream).pipe(Effect.timeout("20 seconds"), Effect.ignore)

    // Nothing acknowledged during the outage: no request sent after the server stopped and answered before it
    // started again was answered 2xx; each was refused with 503 or found no connection.
    const during = sent.filter((s) => s.answer.sentAt >= stopDone && s.answer.answeredAt <= startBegin)
    const statusCount = (list: ReadonlyArray<Sent>) => {
      const counts = new Map<string, number>()
      for (const s of list) {
        const key = s.answer.status === 0 ? `no-answer:${s.answer.error}` : `${s.answer.status}${s.answer.json?.reason === undefined ? "" : `:${s.answer.json.reason}`}`
        counts.set(key, (counts.get(key) ?? 0) + 1)
      }
      return [...counts].map(([k, v]) => `${k} x${v}`).join(", ")
    }
    check("the stream went on during the outage", during.length >= CLIENTS, `${during.length} requests`)
    check("nothing is acknowledged during the outage (no 2xx)", during.every((s) => !is2xx(s.answer.status)), statusCount(during))
    check("every request during the outage is refused 503 (storage unavailable) or finds no connection", during.every((s) => s.answer.status === 503 || s.answer.status === 0), statusCount(during))

    const acked = sent.filter((s) => is2xx(s.answer.status))
    const refused = sent.filter((s) => s.answer.status >= 400)
    const unanswered = sent.filter((s) => s.answer.status === 0)
    const ackedAfter = acked.filter((s) => s.answer.sentAt >= startDone)
    check("after the outage the backends acknowledge the stream again", ackedAfter.length > 0, `${ackedAfter.length} acknowledged after the start`)
    check(
      "outside the outage every request is acknowledged (201)",
      sent.filter((s) => s.answer.answeredAt < stopBegin || s.answer.sentAt > readyAgain.at).every((s) => s.answer.status === 201),
      statusCount(sent.filter((s) => s.answer.answeredAt < stopBegin || s.answer.sentAt > readyAgain.at))
    )
    evidence.notes[`${NAME}.requests`] = { total: sent.length, acknowledged: acked.length, refused: refused.length, unanswered: unanswered.length, duringOutage: during.length }

    // Everything acknowledged reaches its final state (a fresh read pool: the server restarted).
    const sql = yield* readPool(world)
    const ackedOf = (family: Family) => acked.filter((s) => s.family === family)
    const applicationIds = ackedOf("team-applications").map((s) => s.answer.json.application.id as string)
    const notificationKeys = ackedOf("team-applications").flatMap((s) => (s.answer.json.notifications as ReadonlyArray<{ readonly effectId: string }>).map((x) => x.effectId))
    const receiptIds = ackedOf("receipts").map((s) => s.answer.json.receipt.id as string)
    const receiptNotifyKeys = ackedOf("receipts").map((s) => (s.answer.json.effects as ReadonlyArray<{ readonly id: string; readonly kind: string }>).find((e) => e.kind === "notify")!.id)
    const messageIds = ackedOf("outbox").map((s) => s.answer.json.message.id as string)
    const finalState = Effect.all({
      notifications: sql<{ readonly effect_id: string; readonly state: string }>`
        SELECT s.effect_id::text AS effect_id, s.state FROM team_application_delivery_state s
        JOIN team_application_outbox o ON o.effect_id = s.effect_id WHERE o.tenant_id = ${tenantId}`.withoutTransform,
      effects: sql<{ readonly receipt_id: string; readonly state: string }>`
        SELECT receipt_id::text AS receipt_id, state FROM receipt_effects WHERE tenant_id = ${tenantId}`.withoutTransform,
      messages: sql<{ readonly id: string; readonly state: string }>`
        SELECT id::text AS id, state FROM outbox_messages WHERE tenant = ${tenantId}`.withoutTransform
    }).pipe(Effect.orElseSucceed(() => ({ notifications: [], effects: [], messages: [] })))
    const settled = (s: Effect.Effect.Success<typeof finalState>) => {
      const notifications = new Map(s.notifications.map((r) => [r.effect_id, r.state]))
      const messages = new Map(s.messages.map((r) => [r.id, r.state]))
      return {
        notifications: notificationKeys.filter((k) => notifications.get(k) === "delivered").length,
        receipts: receiptIds.filter((id) => {
          const mine = s.effects.filter((e) => e.receipt_id === id)
          return mine.length > 0 && mine.every((e) => e.state === "done")
        }).length,
        messages: messageIds.filter((id) => messages.get(id) === "delivered").length
      }
    }
    const final = yield* pollUntil(
      finalState,
      (s) => {
        const c = settled(s)
        return c.notifications === notificationKeys.length && c.receipts === receiptIds.length && c.messages === messageIds.length
      },
      { timeoutMs: 40_000, everyMs: 200 }
    )
    const counts = settled(final.value)
    check(
      "every acknowledged piece of work reaches its final state (nothing acknowledged is lost)",
      final.ok,
      `notifications ${counts.notifications}/${notificationKeys.length} delivered, receipts ${counts.receipts}/${receiptIds.length} done, messages ${counts.messages}/${messageIds.length} delivered`
    )

    // The product's own views agree (through backend-b, over HTTP).
    const b = live[1]!
    const viewsOk = yield* Effect.all({
      applications: Effect.forEach(applicationIds, (id) =>
        Effect.map(call(b.port, "GET", `/api/team-applications/${id}`, { token: tenant.token }), (v) =>
          v.status === 200 && (v.json.notifications as ReadonlyArray<{ readonly state: string }>).every((x) => x.state === "delivered"))),
      receipts: Effect.forEach(receiptIds, (id) =>
        Effect.map(call(b.port, "GET", `/api/receipts/${id}`, { token: tenant.token }), (v) =>
          v.status === 200 && (v.json.effects as ReadonlyArray<{ readonly state: string }>).every((x) => x.state === "done"))),
      messages: Effect.forEach(messageIds, (id) =>
        Effect.map(call(b.port, "GET", `/operator/outbox/messages/${tenantId}/${PROJECT}/${id}`, { token: world.operatorToken }), (v) =>
          v.status === 200 && v.json.state === "delivered"))
    })
    const viewFailures = [...viewsOk.applications, ...viewsOk.receipts, ...viewsOk.messages].filter((ok) => !ok).length
    check("the product's views show every acknowledged piece of work in its final state", viewFailures === 0, `${viewFailures} not final`)

    // What the provider and the receiver saw: every acknowledged key delivered once, attempts identical.
    const requests = yield* world.loopback.requests
    const deliveries = yield* world.loopback.deliveries
    const families = {
      "team-applications": accountKeys(notificationKeys, requests, deliveries),
      receipts: accountKeys(receiptNotifyKeys, requests, deliveries),
      outbox: accountKeys(messageIds, requests, deliveries)
    }
    const keyCount = { "team-applications": notificationKeys.length, receipts: receiptNotifyKeys.length, outbox: messageIds.length }
    for (const family of FAMILIES) {
      const a = families[family]
      check(
        `${family}: every acknowledged key delivered once, every attempt with an identical body`,
        a.undelivered === 0 && a.acceptedTwice === 0 && a.changedBodies === 0,
        describeAccount(a, keyCount[family])
      )
    }
    const known = new Set([...notificationKeys, ...receiptNotifyKeys, ...messageIds])
    const foreign = requests.filter((r) => r.idempotencyKey === undefined || !known.has(r.idempotencyKey))

    // Nothing refused was committed: no row carries a refused request's command id or idempotency key.
    const refusedRefs = (family: Family) => refused.filter((s) => s.family === family).map((s) => s.ref)
    const committedRefused = yield* Effect.all({
      applications: sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM team_applications WHERE tenant_id = ${tenantId} AND command_id IN ${sql.in(["", ...refusedRefs("team-applications")])}`.withoutTransform,
      receipts: sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM receipts WHERE tenant_id = ${tenantId} AND command_id IN ${sql.in(["", ...refusedRefs("receipts")])}`.withoutTransform,
      messages: sql<{ readonly n: number }>`SELECT count(*)::int AS n FROM outbox_envelopes WHERE tenant = ${tenantId} AND idempotency_key IN ${sql.in(["", ...refusedRefs("outbox")])}`.withoutTransform
    })
    const committedCount = committedRefused.applications[0]!.n + committedRefused.receipts[0]!.n + committedRefused.messages[0]!.n
    check("nothing refused was committed (no row for a refused command id or idempotency key)", committedCount === 0, `${refused.length} refused, ${committedCount} committed`)
    // A request left without an answer is ambiguous: its work may or may not be committed; if it is, it is delivered.
    // A request left without an answer is ambiguous: its work may be committed, and then it is delivered.
    check(
      "no provider or receiver request names unacknowledged work, unless some request was left without an answer",
      foreign.length === 0 || unanswered.length > 0,
      `${foreign.length} such requests, ${unanswered.length} requests unanswered`
    )

    const stillRunning = yield* Effect.forEach(backends, (x) => x.process.hasExited)
    check("both backends ran through the whole scenario (same processes, never exited)", stillRunning.every((e) => !e))
    yield* Effect.forEach(live, (x) => x.process.signal("SIGTERM"))
    const codes = yield* Effect.forEach(live, (x) => exitOf(x.process))
    check("the running backends exit 0 on SIGTERM", codes.every((c) => c === 0), `exits ${codes.join(" ")}`)
    if (sent.length === 0) return yield* new StepFailed({ message: "no request was sent" })
    return {
      recoverySeconds: seconds(final.at - startDone),
      duplicates: Object.fromEntries(FAMILIES.map((f) => [f, families[f].duplicates]))
    }
  })
