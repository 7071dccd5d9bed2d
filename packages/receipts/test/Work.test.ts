import { LoopbackReply } from "@delivery/testing"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, Fiber, Option } from "effect"
import { randomBytes } from "node:crypto"
import * as NFS from "node:fs"
import * as NodePath from "node:path"
import { receiptLoop, type TickResult } from "../src/ReceiptWork.ts"
import {
  backdateClaim,
  businessCounts,
  effectRow,
  effectsOf,
  type Executor,
  executor,
  progress,
  recordReceipt,
  recorderFor,
  type Roots,
  setup,
  sha256,
  snapshot,
  SuiteLayer,
  untilDue,
  within
} from "./support/Work.ts"

// Spec 002, "Receipt work": the receipt effects executor (ReceiptWork.tick / runInline) on real PostgreSQL, real
// files in private /tmp/rwt-* roots and a real loopback HTTP provider. Receipts and files are created through the
// real paths (Receipts.record, Receipts.stage). Live clock with short durations: retry base 150 ms, cap 600 ms
// unless a test sets its own; the stale-claim limit stays 60 s and tests backdate `claimed_at`.

const attemptOf = (tick: TickResult) => Option.getOrThrow(tick.attempt)

const tick = (ex: Executor, owner = "w1") => ex.work.tick(owner)

const stagedPath = (roots: Roots, fileId: string) => NodePath.join(roots.staging, fileId)
const storedPath = (roots: Roots, sha: string) => NodePath.join(roots.storage, sha)
const visibleNames = (dir: string) => NFS.readdirSync(dir).sort()

/** Runs the root worker loop of this executor and returns how it ended. */
const runLoop = (ex: Executor) => Effect.exit(within(Effect.provide(receiptLoop, ex.context)))

const failureOf = <A, E>(exit: Exit.Exit<A, E>) =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined

layer(SuiteLayer, { excludeTestServices: true })("receipt effects worker (spec 002, real PostgreSQL, files and loopback provider)", (it) => {
  // --- Start and stop, ordering -------------------------------------------------------------------------------

  it.scoped("'Each worker performs one delivery attempt per tick' and 'A receipt's earlier effects must complete before its later effects become eligible': two files are promoted, their staged copies deleted, the digests audited, then the payer notified, one effect per tick", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const a = randomBytes(3000)
      const b = randomBytes(70_000)
      const r = yield* recordReceipt(ex, tenant, [a, b])
      expect(r.effects.map((e) => e.kind)).toEqual(["promote-file", "promote-file", "delete-staged", "delete-staged", "audit-check", "notify"])
      const [fa, fb] = r.files
      for (const [i, effect] of r.effects.entries()) {
        expect(attemptOf(yield* tick(ex))).toEqual({ id: effect.id, kind: effect.kind, outcome: "done" })
        const rows = yield* effectsOf(r.id)
        // Exactly one more effect per tick; every later one is untouched (never claimed, attempt 0).
        expect(rows.map((row) => row.state)).toEqual(rows.map((_, j) => (j <= i ? "done" : "pending")))
        expect(rows.slice(i + 1).map((row) => row.attempt)).toEqual(rows.slice(i + 1).map(() => 0))
        expect(rows[i]).toMatchObject({ attempt: 1, lease_owner: null, last_error: null })
        if (i === 0) expect(visibleNames(roots.storage)).toEqual([fa!.sha256])
        if (i === 1) {
          expect(visibleNames(roots.storage)).toEqual([fa!.sha256, fb!.sha256].sort())
          // The staged copies stay until both promotions are done.
          expect(visibleNames(roots.staging)).toEqual([fa!.fileId, fb!.fileId].sort())
        }
        if (i === 3) expect(visibleNames(roots.staging)).toEqual([])
        // The payer is notified last, only once every file effect is done.
        expect((yield* provider.requests).length).toBe(effect.kind === "notify" ? 1 : 0)
      }
      expect(NFS.readFileSync(storedPath(roots, fa!.sha256)).equals(a)).toBe(true)
      expect(NFS.readFileSync(storedPath(roots, fb!.sha256)).equals(b)).toBe(true)
      expect(Option.isNone((yield* tick(ex)).attempt)).toBe(true)
      const [mail] = yield* provider.requests
      expect(mail!.idempotencyKey).toBe(r.effects[5]!.id)
      expect(mail!.bodyText).toContain("paula@payer.example")
    }))

  it.scoped("'A receipt's earlier effects must complete before its later effects become eligible': while a promotion fails, nothing later runs and the notification is never sent", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const r = yield* recordReceipt(ex, tenant, [randomBytes(2000), randomBytes(2000)])
      const [fa, fb] = r.files
      NFS.rmSync(stagedPath(roots, fb!.fileId))
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: r.effects[0]!.id, outcome: "done" })
      for (let attempt = 1; attempt <= 3; attempt++) {
        expect(attemptOf(yield* tick(ex))).toEqual({ id: r.effects[1]!.id, kind: "promote-file", outcome: "retry", error: "storage-missing" })
        // Before the retry is due the receipt has nothing eligible: its later effects wait for the promotion.
        expect(Option.isNone((yield* tick(ex)).attempt)).toBe(true)
        expect(yield* progress(r.id)).toEqual([
          "promote-file:done:1",
          `promote-file:pending:${attempt}`,
          "delete-staged:pending:0",
          "delete-staged:pending:0",
          "audit-check:pending:0",
          "notify:pending:0"
        ])
        yield* untilDue(r.id)
      }
      expect((yield* provider.requests).length).toBe(0)
      const notify = yield* effectRow(r.effects[5]!.id)
      expect(notify).toMatchObject({ envelope: null, envelope_sha256: null, claimed_at: null })
      // The first file's staged copy is kept too: deletion comes only after every promotion.
      expect(visibleNames(roots.staging)).toEqual([fa!.fileId])
    }))

  it.scoped("'Among eligible receipts, lower attempt counts take priority' and 'A failed receipt does not block every other receipt': a newer receipt's first attempts go before an older due retry, and it completes while the other keeps failing", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const failing = yield* recordReceipt(ex, tenant, [randomBytes(1500)])
      NFS.rmSync(stagedPath(roots, failing.files[0]!.fileId))
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: failing.effects[0]!.id, outcome: "retry", error: "storage-missing" })
      yield* untilDue(failing.id)
      // Created after the failed promotion became due: every one of its effects is due later than the retry.
      const healthy = yield* recordReceipt(ex, tenant, [randomBytes(1500)])
      const retryDue = (yield* effectRow(failing.effects[0]!.id)).next_attempt_at.getTime()
      for (const row of yield* effectsOf(healthy.id)) expect(row.next_attempt_at.getTime()).toBeGreaterThan(retryDue)
      for (const effect of healthy.effects) {
        expect(attemptOf(yield* tick(ex))).toEqual({ id: effect.id, kind: effect.kind, outcome: "done" })
      }
      expect(yield* progress(healthy.id)).toEqual(["promote-file:done:1", "delete-staged:done:1", "audit-check:done:1", "notify:done:1"])
      // Then the failing receipt gets its turn again, and still fails without blocking anyone.
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: failing.effects[0]!.id, outcome: "retry", error: "storage-missing" })
      expect(yield* progress(failing.id)).toEqual(["promote-file:pending:2", "delete-staged:pending:0", "audit-check:pending:0", "notify:pending:0"])
      expect((yield* provider.requests).map((req) => req.idempotencyKey)).toEqual([healthy.effects[3]!.id])
    }))

  it.scoped("'Each tick remains bounded and waits even after failure': the running loop makes one attempt per tick and waits its poll interval after a failed attempt, although the retry is already due", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots, {
        timing: { pollInterval: Duration.millis(400), retryBase: Duration.millis(20), retryCap: Duration.millis(20) }
      })
      const r = yield* recordReceipt(ex, tenant)
      yield* provider.script({ key: r.effects[0]!.id, reply: LoopbackReply.status(503) })
      const loop = yield* Effect.fork(Effect.provide(receiptLoop, ex.context))
      const requests = yield* within(provider.awaitRequests(3))
      yield* Fiber.interrupt(loop)
      for (let i = 1; i < 3; i++) {
        expect(requests[i]!.receivedAt.getTime() - requests[i - 1]!.receivedAt.getTime()).toBeGreaterThanOrEqual(390)
      }
      expect(new Set(requests.map((req) => req.idempotencyKey))).toEqual(new Set([r.effects[0]!.id]))
    }))

  // --- Notification envelope ----------------------------------------------------------------------------------

  it.scoped("'The first notification attempt freezes its envelope before network I/O' and 'Retries use the same effect identity and envelope, including after provider configuration or contact changes'", () =>
    Effect.gen(function* () {
      const { provider, roots, sql, tenant } = yield* setup
      const first = yield* executor(roots, { sender: { address: "receipts@shop.example", name: "Shop" } })
      const r = yield* recordReceipt(first, tenant)
      const notify = r.effects[0]!
      expect(notify.kind).toBe("notify")
      yield* provider.script({ key: notify.id, times: 1, reply: LoopbackReply.hang() })
      const running = yield* Effect.fork(tick(first))
      const [held] = yield* within(provider.awaitRequests(1))
      // The provider holds the request: the envelope was committed before it was sent, and is what it received.
      const frozen = yield* effectRow(notify.id)
      expect(frozen).toMatchObject({ state: "running", attempt: 1 })
      expect(frozen.envelope).not.toBeNull()
      expect(frozen.envelope_sha256).toBe(sha256(held!.body))
      expect(held!.idempotencyKey).toBe(notify.id)
      expect(JSON.parse(held!.bodyText)).toMatchObject({ from: "\"Shop\" <receipts@shop.example>", to: ["\"Paula Payer\" <paula@payer.example>"] })
      yield* provider.release(LoopbackReply.status(503))
      expect(attemptOf(yield* Fiber.join(running))).toMatchObject({ outcome: "retry", error: "provider-5xx" })
      // The payer's contact and the provider configuration change before the retry.
      yield* sql`UPDATE receipts SET payer_email = 'changed@elsewhere.example', payer_name = 'Changed Name' WHERE id = ${r.id}`
      const second = yield* executor(roots, { sender: { address: "billing@other.example", name: "Other" } })
      yield* untilDue(r.id)
      expect(attemptOf(yield* tick(second))).toMatchObject({ id: notify.id, outcome: "done" })
      const requests = yield* provider.requests
      expect(requests).toHaveLength(2)
      expect(requests[1]!.idempotencyKey).toBe(notify.id)
      expect(Buffer.from(requests[1]!.body).equals(Buffer.from(held!.body))).toBe(true)
      expect(requests[1]!.bodyText).not.toContain("changed@elsewhere.example")
      expect(requests[1]!.bodyText).not.toContain("billing@other.example")
      const done = yield* effectRow(notify.id)
      expect(done).toMatchObject({ state: "done", attempt: 2, envelope: frozen.envelope, envelope_sha256: frozen.envelope_sha256 })
      expect((yield* provider.deliveries).map((d) => d.idempotencyKey)).toEqual([notify.id])
    }))

  // --- Provider outcomes --------------------------------------------------------------------------------------

  it.scoped("'Provider rejection, timeout, and transport errors remain retryable receipt outcomes': 4xx, timeout, dropped connection and 5xx each leave the notification pending with backoff and last_error, then it is delivered", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots, { mailTimeout: "300 millis" })
      const r = yield* recordReceipt(ex, tenant)
      const notify = r.effects[0]!
      const failures = [
        [LoopbackReply.status(422), "provider-4xx"],
        [LoopbackReply.hang(), "provider-timeout"],
        [LoopbackReply.drop(), "provider-connection-dropped"],
        [LoopbackReply.status(503), "provider-5xx"]
      ] as const
      for (const [i, [reply, code]] of failures.entries()) {
        yield* provider.script({ key: notify.id, times: 1, reply })
        const before = Date.now()
        expect(attemptOf(yield* tick(ex))).toEqual({ id: notify.id, kind: "notify", outcome: "retry", error: code })
        const after = Date.now()
        const row = yield* effectRow(notify.id)
        expect(row).toMatchObject({ state: "pending", attempt: i + 1, last_error: code, lease_owner: null, completed_at: null })
        // min(cap, base * 2^(attempt-1)), shortened by at most 20% jitter.
        const ceiling = Math.min(600, 150 * 2 ** i)
        expect(row.next_attempt_at.getTime()).toBeGreaterThanOrEqual(before + 0.8 * ceiling - 1)
        expect(row.next_attempt_at.getTime()).toBeLessThanOrEqual(after + ceiling + 1)
        expect(Option.isNone((yield* tick(ex)).attempt)).toBe(true)
        yield* untilDue(r.id)
      }
      expect(attemptOf(yield* tick(ex))).toEqual({ id: notify.id, kind: "notify", outcome: "done" })
      expect(yield* effectRow(notify.id)).toMatchObject({ state: "done", attempt: 5, last_error: null, lease_owner: null })
      const requests = yield* provider.requests
      expect(requests).toHaveLength(5)
      expect(new Set(requests.map((req) => req.idempotencyKey))).toEqual(new Set([notify.id]))
      expect(new Set(requests.map((req) => sha256(req.body))).size).toBe(1)
    }))

  // --- Storage ------------------------------------------------------------------------------------------------

  it.scoped("'Storage failures remain failed work; the worker never skips required file promotion': a missing staged file leaves the promotion pending storage-missing, nothing later runs; once the file is back it is promoted and the rest follows", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const bytes = randomBytes(9000)
      const r = yield* recordReceipt(ex, tenant, [bytes])
      const file = r.files[0]!
      const away = NodePath.join(roots.base, "away")
      NFS.renameSync(stagedPath(roots, file.fileId), away)
      for (let attempt = 1; attempt <= 2; attempt++) {
        expect(attemptOf(yield* tick(ex))).toEqual({ id: r.effects[0]!.id, kind: "promote-file", outcome: "retry", error: "storage-missing" })
        expect(yield* progress(r.id)).toEqual([`promote-file:pending:${attempt}`, "delete-staged:pending:0", "audit-check:pending:0", "notify:pending:0"])
        expect((yield* effectRow(r.effects[0]!.id)).last_error).toBe("storage-missing")
        expect(Option.isNone((yield* tick(ex)).attempt)).toBe(true)
        yield* untilDue(r.id)
      }
      expect(visibleNames(roots.storage)).toEqual([])
      expect((yield* provider.requests).length).toBe(0)
      NFS.renameSync(away, stagedPath(roots, file.fileId))
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: r.effects[0]!.id, outcome: "done" })
      expect(NFS.readFileSync(storedPath(roots, file.sha256)).equals(bytes)).toBe(true)
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: r.effects[1]!.id, outcome: "done" })
      expect(visibleNames(roots.staging)).toEqual([])
      // An audit check that finds the stored copy damaged is failed work too; the notification waits for it.
      const good = NFS.readFileSync(storedPath(roots, file.sha256))
      NFS.writeFileSync(storedPath(roots, file.sha256), randomBytes(9000))
      expect(attemptOf(yield* tick(ex))).toEqual({ id: r.effects[2]!.id, kind: "audit-check", outcome: "retry", error: "storage-digest-mismatch" })
      yield* untilDue(r.id)
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: r.effects[2]!.id, outcome: "retry", error: "storage-digest-mismatch" })
      expect((yield* provider.requests).length).toBe(0)
      NFS.writeFileSync(storedPath(roots, file.sha256), good)
      yield* untilDue(r.id)
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: r.effects[2]!.id, outcome: "done" })
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: r.effects[3]!.id, outcome: "done" })
      expect(yield* progress(r.id)).toEqual(["promote-file:done:3", "delete-staged:done:1", "audit-check:done:3", "notify:done:1"])
      expect((yield* provider.requests).length).toBe(1)
    }))

  it.scoped("'Storage failures remain failed work': a corrupted staged file is storage-digest-mismatch, nothing is promoted and the staged copy is kept", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const r = yield* recordReceipt(ex, tenant, [randomBytes(5000)])
      const file = r.files[0]!
      const corrupt = randomBytes(5000)
      NFS.writeFileSync(stagedPath(roots, file.fileId), corrupt)
      for (let attempt = 1; attempt <= 2; attempt++) {
        expect(attemptOf(yield* tick(ex))).toEqual({ id: r.effects[0]!.id, kind: "promote-file", outcome: "retry", error: "storage-digest-mismatch" })
        yield* untilDue(r.id)
      }
      expect(yield* progress(r.id)).toEqual(["promote-file:pending:2", "delete-staged:pending:0", "audit-check:pending:0", "notify:pending:0"])
      expect(visibleNames(roots.storage)).toEqual([])
      expect(NFS.readFileSync(stagedPath(roots, file.fileId)).equals(corrupt)).toBe(true)
      expect((yield* provider.requests).length).toBe(0)
    }))

  // --- Leases -------------------------------------------------------------------------------------------------

  it.scoped("'A stale claim returns to the retry path' and 'Late owners cannot complete or fail a replacement claim': a claim older than 60 s is taken over on the next tick; the late owner's success and failure both change nothing", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const late = yield* executor(roots, { mailTimeout: "5 seconds" })
      const next = yield* executor(roots)
      for (const lateReply of [LoopbackReply.status(200, { delayMs: 1000 }), LoopbackReply.status(503, { delayMs: 1000 })]) {
        yield* provider.reset
        const r = yield* recordReceipt(late, tenant)
        const notify = r.effects[0]!
        yield* provider.script({ key: notify.id, times: 1, reply: lateReply }, { key: notify.id, times: 1, reply: LoopbackReply.hang() })
        const owner = yield* Effect.fork(tick(late, "late-owner"))
        yield* within(provider.awaitRequests(1))
        expect(yield* effectRow(notify.id)).toMatchObject({ state: "running", attempt: 1, lease_owner: "late-owner" })
        // A fresh claim is nobody else's to take.
        expect(yield* tick(next, "next-owner")).toEqual({ recovered: 0, attempt: Option.none() })
        yield* backdateClaim(notify.id, 61)
        const replacement = yield* Effect.fork(tick(next, "next-owner"))
        yield* within(provider.awaitRequests(2))
        const taken = yield* effectRow(notify.id)
        expect(taken).toMatchObject({ state: "running", attempt: 2, lease_owner: "next-owner", last_error: "stale-claim" })
        const before = yield* snapshot(notify.id)
        // The late owner's answer arrives while the replacement claim runs: it records nothing.
        expect(Option.isNone((yield* Fiber.join(owner)).attempt)).toBe(true)
        expect(yield* snapshot(notify.id)).toBe(before)
        yield* provider.release()
        const replaced = yield* Fiber.join(replacement)
        expect(replaced.recovered).toBe(1)
        expect(attemptOf(replaced)).toMatchObject({ id: notify.id, outcome: "done" })
        expect(yield* effectRow(notify.id)).toMatchObject({ state: "done", attempt: 2, lease_owner: null, last_error: null })
        const requests = yield* provider.requests
        expect(requests.map((req) => req.idempotencyKey)).toEqual([notify.id, notify.id])
        expect(sha256(requests[0]!.body)).toBe(sha256(requests[1]!.body))
      }
    }))

  // --- Root worker failures -----------------------------------------------------------------------------------

  it.scoped("'Database errors and invalid durable envelopes stop the root worker' (envelope): a tampered stored envelope fails the tick with InvalidDurableEnvelope, nothing is sent, and the worker loop ends", () =>
    Effect.gen(function* () {
      const { provider, roots, sql, tenant } = yield* setup
      const ex = yield* executor(roots)
      const r = yield* recordReceipt(ex, tenant)
      const notify = r.effects[0]!
      yield* provider.script({ key: notify.id, times: 1, reply: LoopbackReply.status(503) })
      expect(attemptOf(yield* tick(ex))).toMatchObject({ outcome: "retry", error: "provider-5xx" })
      yield* sql`UPDATE receipt_effects SET envelope = replace(envelope, 'paula@payer.example', 'mallory@evil.example') WHERE id = ${notify.id}`
      yield* untilDue(r.id)
      const failed = yield* Effect.exit(tick(ex))
      expect(failureOf(failed)).toMatchObject({ _tag: "InvalidDurableEnvelope", effect: notify.id })
      expect((yield* provider.requests).length).toBe(1)
      // Not turned into a retry: the claim is left to the stale-claim rule of the next process.
      expect(yield* effectRow(notify.id)).toMatchObject({ state: "running", attempt: 2, last_error: "provider-5xx" })
      // The root loop: its tick recovers the stale claim, meets the same envelope, and the loop ends failed.
      yield* backdateClaim(notify.id, 61)
      expect(failureOf(yield* runLoop(ex))).toMatchObject({ _tag: "InvalidDurableEnvelope", effect: notify.id })
      expect((yield* provider.requests).length).toBe(1)
      // A fingerprint that does not match is as invalid as a body that does not. Due a second ago: the claim compares
      // with the process's clock in whole milliseconds, and now() within the same millisecond would still lie ahead.
      yield* sql`UPDATE receipt_effects SET state = 'pending', next_attempt_at = now() - interval '1 second',
                 envelope = replace(envelope, 'mallory@evil.example', 'paula@payer.example'), envelope_sha256 = ${sha256("other")}
                 WHERE id = ${notify.id}`
      expect(failureOf(yield* Effect.exit(tick(ex)))).toMatchObject({ _tag: "InvalidDurableEnvelope", effect: notify.id })
      expect((yield* provider.requests).length).toBe(1)
    }))

  it.scoped("'Database errors and invalid durable envelopes stop the root worker' (database): a renamed receipt_effects table fails the tick with ReceiptsStorageUnavailable and ends the loop; a database error mid-attempt is no retryable outcome", () =>
    Effect.gen(function* () {
      const { provider, roots, sql, tenant } = yield* setup
      const ex = yield* executor(roots)
      const r = yield* recordReceipt(ex, tenant)
      const notify = r.effects[0]!
      const renamed = <A, E, R>(from: string, to: string, use: Effect.Effect<A, E, R>) =>
        Effect.acquireUseRelease(
          Effect.orDie(sql`ALTER TABLE ${sql(from)} RENAME TO ${sql(to)}`),
          () => use,
          () => Effect.orDie(sql`ALTER TABLE ${sql(to)} RENAME TO ${sql(from)}`)
        )
      yield* renamed("receipt_effects", "receipt_effects_hidden", Effect.gen(function* () {
        expect(failureOf(yield* Effect.exit(tick(ex)))).toMatchObject({ _tag: "ReceiptsStorageUnavailable" })
        expect(failureOf(yield* runLoop(ex))).toMatchObject({ _tag: "ReceiptsStorageUnavailable" })
      }))
      expect(yield* effectRow(notify.id)).toMatchObject({ state: "pending", attempt: 0 })
      // The receipt's lines vanish between claim and render: the attempt fails the tick, it is not recorded as a retry.
      yield* renamed("receipt_lines", "receipt_lines_hidden", Effect.gen(function* () {
        expect(failureOf(yield* Effect.exit(tick(ex)))).toMatchObject({ _tag: "ReceiptsStorageUnavailable", operation: "notifyData" })
      }))
      expect(yield* effectRow(notify.id)).toMatchObject({ state: "running", attempt: 1, last_error: null, envelope: null })
      expect((yield* provider.requests).length).toBe(0)
      // With the database back, the stale-claim rule returns the work and it completes.
      yield* backdateClaim(notify.id, 61)
      const recovered = yield* tick(ex)
      expect(recovered.recovered).toBe(1)
      expect(attemptOf(recovered)).toMatchObject({ id: notify.id, outcome: "done" })
      expect((yield* provider.requests).length).toBe(1)
    }))

  // --- Interruption -------------------------------------------------------------------------------------------

  it.scoped("'Shutdown ... interrupts workers' and 'A stale claim returns to the retry path': a tick interrupted mid-notification records pending 'interrupted', due now, fenced; the next tick re-sends the same envelope under the same key", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots, { mailTimeout: "10 seconds" })
      const r = yield* recordReceipt(ex, tenant)
      const notify = r.effects[0]!
      yield* provider.script({ key: notify.id, times: 1, reply: LoopbackReply.hang() })
      const running = yield* Effect.fork(tick(ex))
      const [held] = yield* within(provider.awaitRequests(1))
      const interruptedAt = Date.now()
      yield* Fiber.interrupt(running)
      expect(Date.now() - interruptedAt).toBeLessThan(2000)
      const row = yield* effectRow(notify.id)
      expect(row).toMatchObject({ state: "pending", attempt: 1, last_error: "interrupted", lease_owner: null, envelope_sha256: sha256(held!.body) })
      expect(row.next_attempt_at.getTime()).toBeLessThanOrEqual(Date.now())
      yield* within(provider.awaitAborts(1))
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: notify.id, outcome: "done" })
      const requests = yield* provider.requests
      expect(requests.map((req) => req.idempotencyKey)).toEqual([notify.id, notify.id])
      expect(Buffer.from(requests[1]!.body).equals(Buffer.from(held!.body))).toBe(true)

      // Fenced: an owner interrupted after its claim was replaced records nothing over the replacement.
      yield* provider.reset
      const s = yield* recordReceipt(ex, tenant)
      const second = s.effects[0]!
      yield* provider.script({ key: second.id, times: 2, reply: LoopbackReply.hang() })
      const stale = yield* Effect.fork(tick(ex, "stale-owner"))
      yield* within(provider.awaitRequests(1))
      yield* backdateClaim(second.id, 61)
      const replacement = yield* Effect.fork(tick(ex, "new-owner"))
      yield* within(provider.awaitRequests(2))
      const before = yield* snapshot(second.id)
      yield* Fiber.interrupt(stale)
      expect(yield* snapshot(second.id)).toBe(before)
      expect(yield* effectRow(second.id)).toMatchObject({ state: "running", attempt: 2, lease_owner: "new-owner" })
      yield* provider.release()
      expect(attemptOf(yield* Fiber.join(replacement))).toMatchObject({ id: second.id, outcome: "done" })
    }))

  // --- The request's post-commit path -------------------------------------------------------------------------

  it.scoped("'Receipt requests still use their existing bounded post-commit delivery path': runInline runs the receipt's effects in order, stops at the first failure leaving the rest pending, ends within RECEIPT_INLINE_TIMEOUT, and touches no other receipt", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots)
      const other = yield* recordReceipt(ex, tenant, [randomBytes(1000)])
      const r = yield* recordReceipt(ex, tenant, [randomBytes(1000), randomBytes(2000)])
      yield* ex.work.runInline(r.id)
      const rows = yield* effectsOf(r.id)
      expect(rows.map((row) => `${row.kind}:${row.state}:${row.attempt}`)).toEqual([
        "promote-file:done:1",
        "promote-file:done:1",
        "delete-staged:done:1",
        "delete-staged:done:1",
        "audit-check:done:1",
        "notify:done:1"
      ])
      // In seq order: each completed no earlier than the one before it.
      for (let i = 1; i < rows.length; i++) expect(rows[i]!.completed_at!.getTime()).toBeGreaterThanOrEqual(rows[i - 1]!.completed_at!.getTime())
      expect((yield* provider.requests).map((req) => req.idempotencyKey)).toEqual([r.effects[5]!.id])

      // The first failure ends the inline run: one attempt at the failing effect, the rest left pending.
      const broken = yield* recordReceipt(ex, tenant, [randomBytes(1000), randomBytes(1000)])
      NFS.rmSync(stagedPath(roots, broken.files[1]!.fileId))
      yield* ex.work.runInline(broken.id)
      expect(yield* progress(broken.id)).toEqual([
        "promote-file:done:1",
        "promote-file:pending:1",
        "delete-staged:pending:0",
        "delete-staged:pending:0",
        "audit-check:pending:0",
        "notify:pending:0"
      ])
      expect((yield* effectRow(broken.effects[1]!.id)).last_error).toBe("storage-missing")

      // Bounded: a provider that holds the request is cut off at RECEIPT_INLINE_TIMEOUT, not at the mail timeout.
      const bounded = yield* executor(roots, { mailTimeout: "10 seconds", timing: { inlineTimeout: Duration.millis(400) } })
      const held = yield* recordReceipt(bounded, tenant)
      yield* provider.script({ key: held.effects[0]!.id, reply: LoopbackReply.hang() })
      const started = Date.now()
      yield* within(bounded.work.runInline(held.id))
      const elapsed = Date.now() - started
      expect(elapsed).toBeGreaterThanOrEqual(390)
      expect(elapsed).toBeLessThan(2000)
      expect(yield* effectRow(held.effects[0]!.id)).toMatchObject({ state: "pending", attempt: 1, last_error: "interrupted", lease_owner: null })

      // None of this touched the other receipt.
      expect(yield* progress(other.id)).toEqual(["promote-file:pending:0", "delete-staged:pending:0", "audit-check:pending:0", "notify:pending:0"])
      for (const row of yield* effectsOf(other.id)) expect(row.claimed_at).toBeNull()
    }))

  // --- Business facts -----------------------------------------------------------------------------------------

  it.scoped("'Provider failures do not repeat the command or create another business audit event': receipts, lines, audit and command receipts are unchanged across failed and successful attempts and a replay", () =>
    Effect.gen(function* () {
      const { provider, roots, tenant } = yield* setup
      const ex = yield* executor(roots, { mailTimeout: "300 millis", timing: { retryBase: Duration.millis(100), retryCap: Duration.millis(200) } })
      const r = yield* recordReceipt(ex, tenant, [randomBytes(4000)])
      const recorded = yield* businessCounts(tenant)
      expect(recorded).toEqual({ receipts: 1, lines: 2, audit: 1, commands: 1, effects: 4 })
      for (let i = 0; i < 3; i++) expect(attemptOf(yield* tick(ex)).outcome).toBe("done")
      const notify = r.effects[3]!
      yield* provider.script(
        { key: notify.id, times: 1, reply: LoopbackReply.status(503) },
        { key: notify.id, times: 1, reply: LoopbackReply.status(429) },
        { key: notify.id, times: 1, reply: LoopbackReply.drop() },
        { key: notify.id, times: 1, reply: LoopbackReply.hang() }
      )
      for (const code of ["provider-5xx", "provider-4xx", "provider-connection-dropped", "provider-timeout"]) {
        expect(attemptOf(yield* tick(ex))).toMatchObject({ id: notify.id, outcome: "retry", error: code })
        expect(yield* businessCounts(tenant)).toEqual(recorded)
        yield* untilDue(r.id)
      }
      expect(attemptOf(yield* tick(ex))).toMatchObject({ id: notify.id, outcome: "done" })
      expect(yield* businessCounts(tenant)).toEqual(recorded)
      // A replay of the command answers from the command receipt and writes nothing, effects included.
      const replay = yield* ex.receipts.record(r.command, recorderFor(tenant)).pipe(Effect.orDie)
      expect(replay).toEqual({ replayed: true, response: r.response })
      expect(yield* businessCounts(tenant)).toEqual(recorded)
      expect(yield* progress(r.id)).toEqual(["promote-file:done:1", "delete-staged:done:1", "audit-check:done:1", "notify:done:5"])
      expect(Option.isNone((yield* tick(ex)).attempt)).toBe(true)
      expect((yield* provider.deliveries).map((d) => d.idempotencyKey)).toEqual([notify.id])
      const sqlClient = yield* SqlClient.SqlClient
      const audit = yield* sqlClient<{ readonly action: string }>`SELECT action FROM receipt_audit WHERE tenant_id = ${tenant}`.withoutTransform
      expect(audit.map((row) => row.action)).toEqual(["receipt-recorded"])
    }))
})

