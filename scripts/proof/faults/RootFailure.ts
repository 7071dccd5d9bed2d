import { LoopbackReply, probePort } from "@delivery/testing"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import type { Evidence } from "../Evidence.ts"
import type { Scenario } from "../Scenario.ts"
import type { World } from "../World.ts"
import {
  accountKeys,
  call,
  describeAccount,
  exitOf,
  PERMISSIONS,
  pollUntil,
  provision,
  readPool,
  receipt,
  seconds,
  sha256Hex,
  StepFailed,
  unique
} from "./Support.ts"

// Spec 002, "Receipt work": "Database errors and invalid durable envelopes stop the root worker", and "Start and
// stop": a database failure stops the process non-zero; "the next process applies the existing stale-claim rules".
// Receipts are recorded over HTTP (three with an attachment) while the mail provider refuses (503), so their
// notifications wait, frozen, on the retry path. One notification's retry hangs at the provider; meanwhile the
// private table the receipt worker records in (receipt_effects) is renamed, the only fault injection the proof
// makes. The provider then accepts the hung call: backend-a cannot record it, its root worker fails and the
// process stops, non-zero, after an orderly shutdown. The table is renamed back (no outcome is written), the
// provider recovers, backend-b starts and every receipt's effects reach done: files promoted and staged copies
// removed, each notification accepted once under its key with identical bodies, the dead owner's claim taken
// back by the stale-claim rule.

const NAME = "root-failure"
const TABLE = "receipt_effects"
const AWAY = "receipt_effects_away"
const RECEIPTS = 4
const ATTACHED = 3

interface EffectView {
  readonly id: string
  readonly kind: string
  readonly state: string
  readonly attempt: number
  readonly frozen: boolean
}

export const rootFailure: Scenario = {
  name: NAME,
  run: (world, evidence) => Effect.scoped(run(world, evidence))
}

const run = (world: World, evidence: Evidence) =>
  Effect.gen(function* () {
    const check = (name: string, ok: boolean, detail?: string) => evidence.check(NAME, name, ok, detail)
    // A 3 s stale-claim rule (spec default 60 s) so the next process takes the dead owner's claim back quickly;
    // MAIL_PROVIDER_TIMEOUT outlasts the hung call, so the call is still in flight when the table is renamed.
    const env = { RECEIPT_STALE_CLAIM: "3 seconds", MAIL_PROVIDER_TIMEOUT: "30 seconds" }
    const sql = yield* readPool(world)

    const a = yield* world.start("backend-a", { env })
    const readyA = yield* call(a.port, "GET", "/ready")
    check("backend-a is ready, its receipt-effects worker running", readyA.status === 200 && (readyA.json?.checks?.workers?.running ?? []).includes("receipt-effects"), `status ${readyA.status}`)
    const tenant = yield* provision(world, a.port, { tenant: unique("root"), permissions: [PERMISSIONS.receipts] })

    // The mail provider refuses every call: notifications stay on the retry path, frozen at their first attempt.
    yield* world.loopback.script({ path: "/emails", reply: LoopbackReply.status(503) })
    const files: Array<{ readonly id: string; readonly sha256: string }> = []
    for (let i = 0; i < ATTACHED; i++) {
      const bytes = randomBytes(2_048 + i)
      const staged = yield* call(a.port, "POST", "/api/receipts/files", { token: tenant.token, headers: { "content-type": "application/pdf" }, body: new Uint8Array(bytes) })
      if (staged.status !== 201) return yield* new StepFailed({ message: `upload: status ${staged.status}` })
      files.push({ id: staged.json.fileId as string, sha256: sha256Hex(bytes) })
    }
    const recorded: Array<{ readonly id: string; readonly notify: string }> = []
    for (let i = 0; i < RECEIPTS; i++) {
      const answer = yield* call(a.port, "POST", "/api/receipts", { token: tenant.token, body: receipt(i < ATTACHED ? [files[i]!.id] : []) })
      if (answer.status !== 201) return yield* new StepFailed({ message: `record receipt: status ${answer.status}` })
      const notify = (answer.json.effects as ReadonlyArray<{ readonly id: string; readonly kind: string }>).find((e) => e.kind === "notify")!
      recorded.push({ id: answer.json.receipt.id as string, notify: notify.id })
    }
    check("backend-a records every receipt over HTTP (201)", recorded.length === RECEIPTS, `${recorded.length} receipts, ${files.length} attachments`)
    const notifyKeys = recorded.map((r) => r.notify)

    const views = (port: number) =>
      Effect.forEach(recorded, (r) => Effect.map(call(port, "GET", `/api/receipts/${r.id}`, { token: tenant.token }), (v) => (v.json?.effects ?? []) as ReadonlyArray<EffectView>))
    const frozen = yield* pollUntil(
      views(a.port),
      (all) => all.every((effects) => effects.some((e) => e.kind === "notify" && e.frozen && e.attempt >= 1 && e.state !== "done")),
      { timeoutMs: 15_000 }
    )
    check("with the provider refusing, every notification is frozen and waits on the retry path", frozen.ok)

    // One notification's next retry hangs at the provider: backend-a's worker holds its claim mid-call.
    const hungKey = recorded[0]!.notify
    yield* world.loopback.script({ key: hungKey, times: 1, reply: LoopbackReply.hang() })
    const hung = yield* pollUntil(world.loopback.requests, (rs) => rs.some((r) => r.idempotencyKey === hungKey && r.handling === "hung"), { timeoutMs: 15_000, everyMs: 50 })
    check("backend-a's worker is mid-call on a notification retry", hung.ok)
    if (!hung.ok) return yield* new StepFailed({ message: "the retry never reached the provider" })

    // The fault: the private table the worker records in disappears under it.
    yield* sql.unsafe(`ALTER TABLE ${TABLE} RENAME TO ${AWAY}`)
    yield* Effect.addFinalizer(() => Effect.ignore(sql.unsafe(`ALTER TABLE IF EXISTS ${AWAY} RENAME TO ${TABLE}`)))
    const released = yield* world.loopback.release()
    const failedAt = Date.now()
    const code = yield* exitOf(a.process, "30 seconds")
    check("the provider accepts the hung call; backend-a cannot record it and exits non-zero", released === 1 && code !== "none" && code !== 0, `released ${released}, exit ${code}`)
    const output = yield* a.process.output
    check("backend-a's root worker failed and stopped the process", output.includes("worker receipt-effects failed: stopping the process"))
    check("the stop was orderly: the other workers were interrupted and joined first", /shutdown: worker \S+ interrupted and joined/.test(output))
    check("backend-a's listener is closed", (yield* probePort(a.port)) === "refused")

    // Restore the table: the fault's only repair. Nothing else is written between the failure and the restart.
    yield* sql.unsafe(`ALTER TABLE ${AWAY} RENAME TO ${TABLE}`)
    const left = yield* sql<{ readonly id: string; readonly kind: string; readonly state: string; readonly attempt: number; readonly frozen: boolean }>`
      SELECT id::text AS id, kind, state, attempt, envelope IS NOT NULL AS frozen FROM receipt_effects
      WHERE tenant_id = ${tenant.tenant} AND kind = 'notify'`.withoutTransform
    const dead = left.find((e) => e.id === hungKey)
    check(
      "the dead owner's claim is left running; the other notifications wait, frozen",
      dead?.state === "running" && left.filter((e) => e.id !== hungKey).every((e) => e.state === "pending" && e.frozen),
      `${left.map((e) => e.state).join(",")}`
    )

    // The provider recovers (one 200 rule per key; rules naming a key win over the refusing path rule).
    yield* world.loopback.script(...notifyKeys.map((key) => ({ key, reply: LoopbackReply.status(200) })))
    const b = yield* world.start("backend-b", { env })
    const done = yield* pollUntil(views(b.port), (all) => all.every((effects) => effects.length > 0 && effects.every((e) => e.state === "done")), { timeoutMs: 30_000 })
    const effects = done.value.flat()
    check("after the restart every receipt's effects reach done", done.ok, `${effects.filter((e) => e.state === "done").length}/${effects.length} effects done`)
    const hungAfter = effects.find((e) => e.id === hungKey)
    check(
      "the dead owner's claim went back to the retry path (stale-claim rule) and the next attempt completed it",
      (yield* b.process.output).includes("stale claims back on the retry path") && hungAfter !== undefined && dead !== undefined && hungAfter.attempt === dead.attempt + 1,
      `attempt ${dead?.attempt} -> ${hungAfter?.attempt}`
    )
    const kinds = new Set(effects.map((e) => e.kind))
    check("the work covered every effect kind (promote-file, delete-staged, audit-check, notify)", ["promote-file", "delete-staged", "audit-check", "notify"].every((k) => kinds.has(k)))
    const promoted = files.filter((f) => {
      const path = join(world.roots.storage, f.sha256)
      return existsSync(path) && sha256Hex(readFileSync(path)) === f.sha256
    })
    const staged = readdirSync(world.roots.staging).filter((name) => !name.startsWith("."))
    check("every attachment is promoted (storage/<sha256>, digest verified) and no staged copy is left", promoted.length === files.length && staged.length === 0, `${promoted.length}/${files.length} promoted, ${staged.length} staged left`)

    const account = accountKeys(notifyKeys, yield* world.loopback.requests, yield* world.loopback.deliveries)
    check(
      "each notification is accepted once under its key, every attempt with an identical body",
      account.undelivered === 0 && account.acceptedTwice === 0 && account.changedBodies === 0,
      describeAccount(account, notifyKeys.length)
    )
    yield* b.process.signal("SIGTERM")
    const codeB = yield* exitOf(b.process)
    check("backend-b exits 0 on SIGTERM", codeB === 0, `exit ${codeB}`)
    evidence.notes[`${NAME}.failureToRecovered`] = seconds(done.at - failedAt)
    return { recoverySeconds: seconds(done.at - b.startedAt), duplicates: { receipts: account.duplicates } }
  })
