import { LoopbackReply, type RecordedRequest } from "@delivery/testing"
import type { Envelope } from "@delivery/signer"
import { Data, Effect, Either, Fiber } from "effect"
import type { Evidence } from "./Evidence.ts"
import { type Accepted, readStates, settled, type States, tally } from "./primary/Final.ts"
import { inboxVerdicts, providerVerdicts, workVerdicts } from "./primary/Verdicts.ts"
import { makeTenantKey, provision, signerKeysEnv, TENANT } from "./primary/Fixtures.ts"
import { call, journalBetween, pollUntil } from "./primary/Http.ts"
import { FAMILIES, type Family } from "./primary/Ledger.ts"
import { makeReads, type Snapshot } from "./primary/Reads.ts"
import {
  type AcceptedApplication,
  type AcceptedMessage,
  type AcceptedReceipt,
  acknowledged,
  type EnvelopeSend,
  enqueueMessage,
  recordReceipt,
  requestReset,
  resendEnvelope,
  sendEnvelope,
  signEnvelopes,
  submitApplication
} from "./primary/Work.ts"
import type { Scenario } from "./Scenario.ts"
import type { Backend, World } from "./World.ts"

// Spec 002's primary scenario ("Local proof"): with providers failing, work is accepted over HTTP by two backends
// and the ingress; both backends are killed (SIGKILL) while a delivery of every family is in flight; providers
// recover; two backends start again; and, with no SQL write and no operator drain in between, every piece of
// accepted work reaches the final state its spec defines. Fixtures create prerequisites only, through the
// provisioning routes; every envelope, message, reset, receipt and application is created over HTTP.

const NAME = "primary"
const MESSAGES = 10
const RESETS = 3
const UNKNOWN_RESETS = 2
const RECEIPTS = 3
const APPLICATIONS = 3
/** Per producer stream: one sent to the ingress before the kill, one sent to the backends across the kill. */
const ENVELOPES = 10
const HOOKS = "/hooks/proof"
/** Outbox requests left hanging at the kill. */
const HUNG_HOOKS = 3
/** Envelopes of the second stream sent to the backends before the deliveries are held open. */
const ENVELOPES_BEFORE_KILL = 3

/**
 * Short timing, so the scenario runs in well under a minute: a provider call is bounded by 6 s, and each family's
 * stale-claim rule (reset and receipt claims, outbox leases, team-application leases) takes over after at most
 * 8 s. Claims stay longer than a call, so no live call ever looks stale. Attempts are not capped for the length of
 * the outage (messages 100, notifications 1000), and every backoff is capped at 1 s.
 */
const timingEnv = {
  MAIL_PROVIDER_TIMEOUT: "6 seconds",
  PASSWORD_RESET_STALE_CLAIM: "8 seconds",
  RECEIPT_STALE_CLAIM: "8 seconds",
  OUTBOX_REQUEST_TIMEOUT: "6 seconds",
  OUTBOX_BATCH_SIZE: "10",
  OUTBOX_CONCURRENCY: "10",
  OUTBOX_CYCLE_TIMEOUT: "7 seconds",
  OUTBOX_LEASE: "8 seconds",
  OUTBOX_POLL_INTERVAL: "100 millis",
  OUTBOX_BACKOFF_BASE: "200 millis",
  OUTBOX_BACKOFF_CAP: "1 second",
  OUTBOX_DEFAULT_MAX_ATTEMPTS: "100",
  TEAM_APPLICATION_DELIVERY_MAX_ATTEMPTS: "1000"
} as const

class PrimaryTimeout extends Data.TaggedError("PrimaryTimeout")<{}> {}

const inFlight = (r: RecordedRequest) => r.handling === "hung" && !r.clientAborted

/** The claims a family's durable state held at one moment (the kill), by idempotency key. */
const claimsOf = (snapshot: Snapshot): Record<Family, ReadonlySet<string>> => ({
  "outbox": new Set(snapshot.messages.filter((m) => m.state === "delivering").map((m) => m.id)),
  "reset-mail": new Set(snapshot.resets.filter((r) => r.state === "sending").map((r) => r.id)),
  "receipts": new Set(snapshot.receiptNotifies.filter((e) => e.state === "running").map((e) => e.id)),
  "team-applications": new Set(snapshot.notifications.filter((n) => n.state === "processing").map((n) => n.id))
})

const run = (world: World, evidence: Evidence) =>
  Effect.gen(function* () {
    const check = (name: string, ok: boolean, detail?: string) => evidence.check(NAME, name, ok, detail)
    const key = makeTenantKey()
    const env = { ...timingEnv, SIGNER_KEYS: signerKeysEnv(key) }
    const loopback = world.loopback

    const a = yield* world.start("backend-a", { env })
    const b = yield* world.start("backend-b", { env })
    const ingress = yield* world.start("ingress", { role: "ingress", env })
    const reads = yield* makeReads(world.databaseUrl)
    check("the proof's SQL session is read-only (every read runs in a READ ONLY transaction)", yield* Effect.orElseSucceed(reads.isReadOnly, () => false))

    // Prerequisites only, over the operator routes.
    const provisioned = yield* Effect.either(provision(a.url, world.operatorToken, key, { resetAccounts: RESETS, hooksEndpoint: loopback.urlFor(HOOKS) }))
    if (Either.isLeft(provisioned)) {
      check("fixtures are created through the provisioning routes", false, `${provisioned.left.step} answered ${provisioned.left.status}`)
      return {}
    }
    const fixtures = provisioned.right
    check(
      "fixtures are created through the provisioning routes only",
      true,
      `1 tenant, ${RESETS + 1} accounts, 1 API key, 1 device credential, 1 signing key, 1 delivery target`
    )

    // Providers fail: the mail provider and the webhook receiver answer 503 to everything.
    yield* loopback.script({ reply: LoopbackReply.status(503) })

    // Work, accepted over HTTP by both backends and the ingress in turn.
    const accepting: ReadonlyArray<Backend> = [a, b, ingress]
    const via = (i: number) => accepting[i % accepting.length]!
    const messages: Array<AcceptedMessage> = []
    const refusedWork: Array<string> = []
    for (let i = 1; i <= MESSAGES; i++) {
      const enqueued = yield* enqueueMessage(via(i).url, fixtures.apiKey, i)
      if (enqueued.accepted) messages.push(enqueued.accepted)
      else refusedWork.push(`message ${enqueued.answer.status}`)
    }
    const resetAnswers: Array<number> = []
    for (const [i, account] of fixtures.resetAccounts.entries()) resetAnswers.push((yield* requestReset(via(i).url, account.email)).status)
    const unknownAddresses = Array.from({ length: UNKNOWN_RESETS }, (_, i) => `nobody${i}.${Date.now()}@proof.example`)
    for (const [i, email] of unknownAddresses.entries()) resetAnswers.push((yield* requestReset(via(i + 1).url, email)).status)
    const receipts: Array<AcceptedReceipt> = []
    for (let i = 1; i <= RECEIPTS; i++) {
      const recorded = yield* recordReceipt(via(i).url, fixtures.apiKey, i)
      if (recorded.accepted) receipts.push(recorded.accepted)
      else refusedWork.push(`receipt ${recorded.step} ${recorded.answer.status}`)
    }
    const applications: Array<AcceptedApplication> = []
    for (let i = 1; i <= APPLICATIONS; i++) {
      const submitted = yield* submitApplication(via(i).url, fixtures.apiKey, i)
      if (submitted.accepted) applications.push(submitted.accepted)
      else refusedWork.push(`application ${submitted.answer.status}`)
    }
    check(
      "with providers failing, the work is accepted over HTTP by backend-a, backend-b and the ingress",
      messages.length === MESSAGES && receipts.length === RECEIPTS && applications.length === APPLICATIONS,
      `messages ${messages.length}/${MESSAGES}, receipts ${receipts.length}/${RECEIPTS}, applications ${applications.length}/${APPLICATIONS}${refusedWork.length > 0 ? `; refused: ${refusedWork.join(", ")}` : ""}`
    )
    check(
      "every reset request is answered 202 alike, for enabled accounts and unknown addresses",
      resetAnswers.every((s) => s === 202),
      `${RESETS} enabled + ${UNKNOWN_RESETS} unknown; statuses ${tally(resetAnswers.map(String))}`
    )
    const resetRows = yield* Effect.orElseSucceed(reads.resets, () => [])
    check(
      "only the enabled accounts' reset requests committed a reset-mail row (unknown addresses: none)",
      resetRows.length === RESETS,
      `${resetRows.length} rows for ${RESETS} + ${UNKNOWN_RESETS} requests`
    )

    // Inbound envelopes: one stream to the ingress now, one to the backends across the kill.
    const streamA = yield* signEnvelopes(key, fixtures.deviceToken, "laptop-a", ENVELOPES)
    const streamB = yield* signEnvelopes(key, fixtures.deviceToken, "laptop-b", ENVELOPES)
    const sendsA: Array<EnvelopeSend> = []
    for (const envelope of streamA) sendsA.push(yield* sendEnvelope(ingress, fixtures.deviceToken, envelope))
    check(
      "signed envelopes sent to the ingress are acknowledged (201 accepted)",
      sendsA.every((s) => s.outcome === "accepted"),
      `${sendsA.filter(acknowledged).length}/${ENVELOPES} acknowledged`
    )

    // The record of accepted work: each provider idempotency key and its family.
    const acceptedKeys = new Map<string, Family>()
    for (const m of messages) acceptedKeys.set(m.id, "outbox")
    for (const r of resetRows) acceptedKeys.set(r.id, "reset-mail")
    for (const r of receipts) acceptedKeys.set(r.notifyKey, "receipts")
    for (const app of applications) for (const k of app.notificationKeys) acceptedKeys.set(k, "team-applications")
    const familyOf = (r: RecordedRequest) => (r.idempotencyKey === undefined ? undefined : acceptedKeys.get(r.idempotencyKey))

    // Every family is attempted and refused while providers fail.
    const failing = yield* pollUntil(loopback.requests, (requests) =>
      FAMILIES.every((f) => requests.some((r) => familyOf(r) === f && r.status === 503)), { timeoutMs: 30_000 })
    check(
      "while providers fail, every family's deliveries are attempted and refused (503)",
      failing.ok,
      FAMILIES.map((f) => `${f} ${failing.value.filter((r) => familyOf(r) === f && r.status === 503).length}`).join(", ")
    )

    // Envelopes to the backends, alternately: the first ones now, acknowledged before the kill.
    const sendsB: Array<EnvelopeSend> = []
    const sendB = (envelope: Envelope, i: number) =>
      Effect.tap(sendEnvelope(i % 2 === 0 ? a : b, fixtures.deviceToken, envelope), (s) => Effect.sync(() => sendsB.push(s)))
    yield* Effect.forEach(streamB.slice(0, ENVELOPES_BEFORE_KILL), sendB, { discard: true })

    // Deliveries in flight. The providers hold open, every time, one receipt notification, one team notification
    // and some webhooks (their calls time out and are retried, and held open again); then, once, one reset mail
    // (a reset call that times out is quarantined, so the kill must come before its timeout).
    const heldKeys = [receipts[0]?.notifyKey, applications[0]?.notificationKeys[0], ...messages.slice(0, HUNG_HOOKS).map((m) => m.id)]
      .filter((k): k is string => k !== undefined)
    for (const k of heldKeys) yield* loopback.script({ key: k, reply: LoopbackReply.hang() })
    const allHeld = (keys: ReadonlyArray<string>) => (requests: ReadonlyArray<RecordedRequest>) =>
      keys.every((k) => requests.some((r) => r.idempotencyKey === k && inFlight(r)))
    const held = yield* pollUntil(loopback.requests, allHeld(heldKeys), { timeoutMs: 10_000, everyMs: 20 })
    const resetKey = resetRows[0]?.id
    if (resetKey !== undefined) yield* loopback.script({ key: resetKey, times: 1, reply: LoopbackReply.hang() })
    const hanging = yield* pollUntil(loopback.requests, allHeld([...heldKeys, ...(resetKey === undefined ? [] : [resetKey])]), { timeoutMs: 5_000, everyMs: 10 })
    check(
      "deliveries of every family are in flight (requests held open by the providers)",
      held.ok && hanging.ok && resetKey !== undefined,
      `${hanging.value.filter(inFlight).length} requests held open`
    )

    // The rest of the stream is sent while the backends are killed: some acknowledged, the others cut off.
    const sender = yield* Effect.fork(Effect.forEach(streamB.slice(ENVELOPES_BEFORE_KILL), (envelope, i) =>
      // Paced, so that the kill lands in the middle of the stream.
      Effect.zipLeft(sendB(envelope, i + ENVELOPES_BEFORE_KILL), Effect.sleep("40 millis")), { discard: true }))
    yield* pollUntil(Effect.sync(() => sendsB.filter(acknowledged).length), (n) => n > ENVELOPES_BEFORE_KILL, { timeoutMs: 2_000, everyMs: 5 })

    // The kill: both backends at once, SIGKILL, no clean-up possible.
    const killedAt = Date.now()
    yield* a.process.signal("SIGKILL")
    yield* b.process.signal("SIGKILL")
    const exits = yield* Effect.all([a.process.exitCode("15 seconds"), b.process.exitCode("15 seconds")]).pipe(Effect.orElseSucceed(() => [-1, -1]))
    check("backend-a and backend-b are killed with SIGKILL (exit 137)", exits.every((code) => code === 137), `exits ${exits.join(" ")}`)
    // What was claimed at the kill (read-only SQL), against what the providers were holding open.
    const atKill = yield* Effect.orElseSucceed(reads.snapshot(new Date(killedAt)), (): Snapshot => ({ resets: [], receiptNotifies: [], messages: [], notifications: [] }))
    yield* Fiber.join(sender)
    const ackedB = sendsB.filter(acknowledged)
    check(
      "envelopes were acknowledged by the backends before the kill, and the stream was cut off by it",
      ackedB.length >= 1 && ackedB.length < ENVELOPES,
      `${ackedB.length} acknowledged by backend-a/backend-b before the kill, ${ENVELOPES - ackedB.length} not`
    )
    const claimed = claimsOf(atKill)
    const before = yield* loopback.requests
    const heldAtKill = (f: Family) => new Set(before.filter((r) => familyOf(r) === f && r.handling === "hung").map((r) => r.idempotencyKey!))
    const inFlightAtKill = Object.fromEntries(FAMILIES.map((f) => [f, [...claimed[f]].filter((k) => heldAtKill(f).has(k)).length])) as Record<Family, number>
    check(
      "at the kill, every family holds a claim on a delivery the provider is holding open",
      FAMILIES.every((f) => inFlightAtKill[f] >= 1),
      FAMILIES.map((f) => `${f} ${inFlightAtKill[f]} (claims ${claimed[f].size})`).join(", ")
    )
    check(
      "nothing was acknowledged by a provider while providers were failing",
      before.every((r) => r.status === undefined || r.status >= 300),
      `${before.length} requests`
    )

    // Providers recover (200 for everything), then two backends start again. Nothing else happens in between.
    yield* loopback.reset
    const a2 = yield* world.start("backend-a-restarted", { env })
    const b2 = yield* world.start("backend-b-restarted", { env })
    const restartedAt = Date.now()
    // Only the producer's envelopes cut off by the kill were sent in that window, and they reached nothing.
    const between = journalBetween(killedAt, restartedAt)
    const reached = between.filter((entry) => entry.status !== 0 || entry.path.startsWith("/operator/"))
    check(
      "between the kill and the successful restart no request reached the product (no operator drain) and no SQL was written",
      reached.length === 0 && (yield* Effect.orElseSucceed(reads.isReadOnly, () => false)),
      `${reached.length} answered or operator requests (${between.length - reached.length} envelope sends refused: nothing listening); SQL read-only`
    )

    // The producer sends again what it has no acknowledgement for (and, harmlessly, what it has).
    const resent: Array<{ readonly send: EnvelopeSend; readonly outcome: string; readonly eventIdentity?: string }> = []
    const resendTargets = [a2, b2, ingress]
    for (const [i, send] of [...sendsB, ...streamB.slice(sendsB.length).map((envelope): EnvelopeSend => ({ envelope, process: "none", status: 0 }))].entries()) {
      const answer = yield* resendEnvelope(resendTargets[i % resendTargets.length]!.url, fixtures.deviceToken, key, send.envelope)
      resent.push(Either.isRight(answer)
        ? { send, outcome: answer.right.outcome, eventIdentity: answer.right.eventIdentity }
        : { send, outcome: (answer.left as { _tag?: string })._tag ?? "failed" })
    }
    for (const send of sendsA.slice(0, 2)) {
      const answer = yield* resendEnvelope(ingress.url, fixtures.deviceToken, key, send.envelope)
      resent.push(Either.isRight(answer) ? { send, outcome: answer.right.outcome, eventIdentity: answer.right.eventIdentity } : { send, outcome: "failed" })
    }
    const ackedResends = resent.filter((r) => acknowledged(r.send))
    check(
      "an envelope acknowledged before the kill is a duplicate when sent again, with the same event identity",
      ackedResends.every((r) => r.outcome === "duplicate" && r.eventIdentity === r.send.eventIdentity),
      `${ackedResends.filter((r) => r.outcome === "duplicate").length}/${ackedResends.length} duplicates`
    )
    check(
      "an envelope without acknowledgement is acknowledged when sent again (accepted, or a duplicate if it had committed)",
      resent.filter((r) => !acknowledged(r.send)).every((r) => r.outcome === "accepted" || r.outcome === "duplicate"),
      tally(resent.filter((r) => !acknowledged(r.send)).map((r) => r.outcome))
    )

    // Unattended recovery: wait for every piece of work to stop moving, reading through the product's routes.
    const accepted: Accepted = { messages, resets: resetRows.map((r) => r.id), receipts, applications }
    const recovery = yield* pollUntil(readStates(a2.url, world.operatorToken, accepted, reads), (s) => settled(s, accepted), { timeoutMs: 90_000, everyMs: 250 })
    const recoverySeconds = (recovery.at - restartedAt) / 1000
    check(
      "every piece of accepted work reaches a final state, unattended",
      recovery.ok,
      `${recoverySeconds.toFixed(1)} s after the restart`
    )
    const states: States = recovery.value
    workVerdicts(check, states, accepted, atKill)

    // Reset mail through the operator routes too: the summary and the ended rows agree with the rows.
    const summary = yield* call(a2.url, "GET", "/operator/reset-mail/summary", { token: world.operatorToken })
    const ended = yield* call(a2.url, "GET", `/operator/reset-mail/ended?state=quarantined&tenant=${TENANT}`, { token: world.operatorToken })
    const endedRows = (ended.json?.rows ?? []) as ReadonlyArray<{ readonly id: string; readonly reason: string }>
    const summaryCounts = (summary.json?.counts ?? []) as ReadonlyArray<{ readonly state: string; readonly reason: string | null; readonly count: number }>
    const label = (state: string, reason: string | null) => (reason === null ? state : `${state}/${reason}`)
    const fromRoute = tally(summaryCounts.flatMap((c) => Array.from({ length: c.count }, () => label(c.state, c.reason))).sort())
    const fromRows = tally(states.resets.map((r) => label(r.state, r.reason)).sort())
    const quarantinedRows = states.resets.filter((r) => r.state === "quarantined")
    check(
      "the reset-mail operator routes agree: counts by state and reason, and the quarantined rows with their reasons",
      summary.status === 200 && ended.status === 200 && fromRoute === fromRows && endedRows.length === quarantinedRows.length &&
        quarantinedRows.every((q) => endedRows.some((e) => e.id === q.id && e.reason === q.reason)),
      `summary ${summary.status === 200 ? fromRoute : summary.status}; ended ${endedRows.length}`
    )

    // What the providers saw, before and after the kill; the inbound envelopes as the inbox holds them.
    const after = yield* loopback.requests
    const ledger = providerVerdicts(check, {
      before,
      after,
      deliveries: yield* loopback.deliveries,
      acceptedKeys,
      accepted,
      states,
      hooksPath: HOOKS,
      unknownAddresses
    })
    const acknowledgedBeforeKill = inboxVerdicts(check, {
      inbox: yield* Effect.orElseSucceed(reads.inbox, () => []),
      sends: [...sendsA, ...sendsB],
      envelopes: [...streamA, ...streamB],
      byIngress: sendsA.filter(acknowledged).length
    })

    // No operator action stood in for recovery, and the restarted backends are healthy.
    check("no outbox dead letter was redriven by an operator", (yield* Effect.orElseSucceed(reads.redrives, () => -1)) === 0)
    for (const p of [a2, b2]) {
      const ready = yield* call(p.url, "GET", "/ready")
      check(`${p.name} is running and ready after the recovery`, ready.status === 200 && !(yield* p.process.hasExited), `status ${ready.status}`)
    }
    evidence.notes[NAME] = {
      families: ledger.families,
      inFlightAtKill,
      recoverySeconds,
      envelopes: { acknowledgedBeforeKill, resent: resent.length }
    }
    return {
      recoverySeconds,
      duplicates: Object.fromEntries(FAMILIES.map((f) => [f, ledger.families[f].duplicates]))
    }
  })

export const primary: Scenario = {
  name: NAME,
  run: (world, evidence) =>
    Effect.scoped(run(world, evidence)).pipe(
      // The whole scenario is bounded: every wait inside has its own bound and a failing check.
      Effect.timeoutFail({ duration: "3 minutes", onTimeout: () => new PrimaryTimeout() })
    )
}
