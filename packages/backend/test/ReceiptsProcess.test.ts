import { expect, layer } from "@effect/vitest"
import { backendMain, freePort, get, LoopbackProvider, LoopbackReply, probePort, spawnBun, TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { createHash, randomBytes, randomUUID } from "node:crypto"
import { chmodSync, existsSync, mkdirSync, readdirSync } from "node:fs"
import { connect } from "node:net"
import { join } from "node:path"
import { OPERATOR_TOKEN } from "./support/Backend.ts"
import { call } from "./support/Http.ts"
import { privateRoots, start, tenantWithKey } from "./support/Receipts.ts"

// Spec 002's receipt work through real backend processes over HTTP (docs/api.md, receipts): the command and upload
// routes' refusals and what they leave behind, the delivery modes (counted on the loopback provider), start-up
// refusals, and the start and stop rules of the receipt effects worker (SIGTERM mid-call, a database failure,
// SIGKILL mid-call and the next process's stale-claim rule), and the views of a receipt's effects.

const op = { token: OPERATOR_TOKEN }
const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`
const MAIL_TOKEN = `mail-${randomBytes(24).toString("base64url")}`
const PAYER = { name: "Pat Payer-Secret", email: "pat.secret@payer.example" }

const command = (overrides: Record<string, unknown> = {}) => ({
  commandId: unique("cmd"),
  reference: `R-${randomBytes(3).toString("hex")}`,
  currency: "EUR",
  paidAt: "2026-11-30T12:00:00.000Z",
  payer: PAYER,
  lines: [{ description: "Consulting", quantity: 2, unitMinor: 12_500 }],
  ...overrides
})

/** The receipt provider configuration pointing at the loopback provider. */
const providerEnv = (provider: LoopbackProvider, extra: Record<string, string> = {}): Record<string, string> => ({
  RECEIPT_FROM: "receipts@acme.example",
  MAIL_PROVIDER_URL: provider.urlFor("/emails"),
  MAIL_PROVIDER_TOKEN: MAIL_TOKEN,
  RECEIPT_POLL_INTERVAL: "100 millis",
  ...extra
})

const rootsEnv = (roots: { readonly staging: string; readonly storage: string }) => ({
  RECEIPT_STAGING_ROOT: roots.staging,
  RECEIPT_STORAGE_ROOT: roots.storage
})

/** Every receipts row of a tenant as JSON text: compared before and after a refused request. */
const rowsOf = (tenant: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly rows: string }>`
      SELECT json_build_object(
        'receipts', (SELECT coalesce(json_agg(r ORDER BY r.id), '[]') FROM receipts r WHERE tenant_id = ${tenant}),
        'lines', (SELECT count(*) FROM receipt_lines l JOIN receipts r ON r.id = l.receipt_id WHERE r.tenant_id = ${tenant}),
        'commands', (SELECT coalesce(json_agg(c ORDER BY c.command_id), '[]') FROM receipt_commands c WHERE tenant_id = ${tenant}),
        'audit', (SELECT coalesce(json_agg(a ORDER BY a.audit_id), '[]') FROM receipt_audit a WHERE tenant_id = ${tenant}),
        'effects', (SELECT coalesce(json_agg(e ORDER BY e.id), '[]') FROM receipt_effects e WHERE tenant_id = ${tenant}),
        'files', (SELECT coalesce(json_agg(f ORDER BY f.id), '[]') FROM receipt_files f WHERE tenant_id = ${tenant})
      )::text AS rows`.withoutTransform).pipe(Effect.map(([row]) => JSON.parse(row!.rows)))

interface EffectRow {
  readonly id: string
  readonly seq: number
  readonly kind: string
  readonly state: string
  readonly attempt: number
  readonly last_error: string | null
  readonly frozen: boolean
}

const effectsOf = (receiptId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<EffectRow>`
      SELECT id::text AS id, seq, kind, state, attempt, last_error, envelope IS NOT NULL AS frozen
      FROM receipt_effects WHERE receipt_id = ${receiptId} ORDER BY seq`.withoutTransform)

const waitForEffects = (receiptId: string, ready: (rows: ReadonlyArray<EffectRow>) => boolean, what: string) =>
  Effect.gen(function* () {
    for (let i = 0; i < 200; i++) {
      const rows = yield* effectsOf(receiptId)
      if (rows.length > 0 && ready(rows)) return rows
      yield* Effect.sleep("50 millis")
    }
    return yield* Effect.dieMessage(`effects of ${receiptId} never ${what}: ${JSON.stringify(yield* effectsOf(receiptId))}`)
  })

/**
 * The suite's tests share one database: a test that starts a worker first retires the work earlier tests left
 * pending on purpose, so that worker's provider calls are this test's alone. Fixture set-up, not an outcome.
 */
const retireEarlierWork = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`UPDATE receipt_effects SET state = 'done', completed_at = now(), lease_owner = NULL, updated_at = now()
      WHERE state <> 'done'`.withoutTransform)

/**
 * Waits until the receipt's (single) effect is claimed and its call for that claim hangs at the provider: as many
 * calls as attempts, stable past RECEIPT_INLINE_TIMEOUT (the request's own attempt or the worker may claim first).
 */
const hungClaim = (provider: LoopbackProvider, receiptId: string) =>
  Effect.gen(function* () {
    const claimed = Effect.gen(function* () {
      const [effect] = yield* waitForEffects(receiptId, ([e]) => e!.state === "running", "was claimed")
      yield* provider.awaitRequests(effect!.attempt)
      return effect!.attempt
    })
    for (let i = 0; i < 20; i++) {
      const attempt = yield* claimed
      yield* Effect.sleep("300 millis")
      const [now] = yield* effectsOf(receiptId)
      if (now!.state === "running" && now!.attempt === attempt && (yield* provider.requests).length === attempt) return attempt
    }
    return yield* Effect.dieMessage("the claim never settled")
  })

const waitUntil = (ready: () => boolean, what: string) =>
  Effect.gen(function* () {
    for (let i = 0; i < 200; i++) {
      if (ready()) return
      yield* Effect.sleep("25 millis")
    }
    return yield* Effect.dieMessage(`never: ${what}`)
  })

const record = (port: number, token: string, body: unknown) => call(port, "POST", "/api/receipts", { token, body })

const upload = (port: number, token: string, bytes: Uint8Array, headers: Record<string, string> = { "content-type": "application/pdf" }) =>
  call(port, "POST", "/api/receipts/files", { token, headers, body: bytes })

/** A refusal as documented: status, tag and reason, and the correlation id of the answer. */
const expectRefusal = (answer: { readonly status: number; readonly json: any; readonly headers: Record<string, string> }, status: number, tag: string, reason?: string) => {
  expect({ status: answer.status, tag: answer.json?._tag, reason: answer.json?.reason }).toEqual({ status, tag, reason })
  if (reason !== undefined) expect(answer.json.correlationId).toBe(answer.headers["x-correlation-id"])
}

/** An upload request on a raw socket that declares more than it sends: resolves once the socket is open and written. */
const truncatedUpload = (port: number, token: string, declared: number, sent: Uint8Array) =>
  Effect.async<ReturnType<typeof connect>>((resume) => {
    const socket = connect({ host: "127.0.0.1", port }, () => {
      socket.write(
        `POST /api/receipts/files HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\n` +
          `Content-Type: application/pdf\r\nContent-Length: ${declared}\r\n\r\n`
      )
      socket.write(sent, () => resume(Effect.succeed(socket)))
    })
    socket.on("error", () => {})
  })

const Suite = Layer.merge(TestDatabaseLive, LoopbackProvider.Default)

layer(Suite, { excludeTestServices: true, timeout: 120_000 })("receipts' routes, modes and start/stop rules through real backend processes", (it) => {
  it.scoped("A replay of a command answers the recorded response (idempotent-replayed: true) and writes nothing; the same commandId with other content is 409 command-id-reused and writes nothing", () =>
    Effect.gen(function* () {
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled" })
      const { tenant, token } = yield* tenantWithKey(port)
      const body = command()
      const first = yield* record(port, token, body)
      expect(first.status).toBe(201)
      expect(first.headers["idempotent-replayed"]).toBeUndefined()
      const after = yield* rowsOf(tenant)
      expect([after.receipts.length, after.lines, after.commands.length, after.audit.length, after.effects.length]).toEqual([1, 1, 1, 1, 1])

      // The same content, also written differently (members reordered, `attachments: []` spelled out).
      const { commandId, ...rest } = body
      for (const again of [body, { attachments: [], ...rest, commandId }]) {
        const replay = yield* record(port, token, again)
        expect([replay.status, replay.headers["idempotent-replayed"], replay.text]).toEqual([201, "true", first.text])
      }
      for (const other of [{ ...body, reference: "R-other" }, { ...body, payer: { ...PAYER, email: "other@payer.example" } }, { ...body, lines: [...body.lines, body.lines[0]] }]) {
        const conflict = yield* record(port, token, other)
        expectRefusal(conflict, 409, "CommandConflict", "command-id-reused")
        expect(conflict.headers["idempotent-replayed"]).toBeUndefined()
      }
      expect(yield* rowsOf(tenant)).toEqual(after)

      // Concurrent commands with one id: one receipt, every other answer a replay of it.
      const racing = command()
      const answers = yield* Effect.all(Array.from({ length: 6 }, () => record(port, token, racing)), { concurrency: "unbounded" })
      expect(answers.map((a) => a.status)).toEqual([201, 201, 201, 201, 201, 201])
      expect(answers.filter((a) => a.headers["idempotent-replayed"] === undefined)).toHaveLength(1)
      expect(new Set(answers.map((a) => a.text)).size).toBe(1)
      const raced = yield* rowsOf(tenant)
      expect([raced.receipts.length, raced.commands.length, raced.audit.length, raced.effects.length]).toEqual([2, 2, 2, 2])

      // The id is the tenant's: another tenant may use it for its own receipt.
      const other = yield* tenantWithKey(port)
      expect((yield* record(port, other.token, { ...body, reference: "R-other" })).status).toBe(201)
      expect(yield* rowsOf(tenant)).toEqual(raced)
    }))

  it.scoped("Attachments must be this tenant's staged files, each attached once: an unknown id, another tenant's file, a file already attached and a duplicated id are 422 with their reason and commit nothing", () =>
    Effect.gen(function* () {
      const roots = yield* privateRoots
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...rootsEnv(roots) })
      const { tenant, token } = yield* tenantWithKey(port)
      const other = yield* tenantWithKey(port)
      const mine = yield* upload(port, token, randomBytes(100))
      const second = yield* upload(port, token, randomBytes(100))
      const theirs = yield* upload(port, other.token, randomBytes(100))
      expect([mine.status, second.status, theirs.status]).toEqual([201, 201, 201])
      const attached = yield* record(port, token, command({ attachments: [mine.json.fileId] }))
      expect(attached.status).toBe(201)
      const before = yield* rowsOf(tenant)
      const theirsBefore = yield* rowsOf(other.tenant)

      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string, string]> = [
        [[second.json.fileId, randomUUID()], "attachment-unknown", "unknown"],
        [[theirs.json.fileId], "attachment-unknown", theirs.json.fileId],
        [[second.json.fileId, mine.json.fileId], "attachment-already-attached", mine.json.fileId],
        [[second.json.fileId, second.json.fileId], "attachment-duplicated", second.json.fileId]
      ]
      for (const [attachments, reason, fileId] of cases) {
        const body = command({ attachments })
        const refused = yield* record(port, token, body)
        expectRefusal(refused, 422, "AttachmentRefused", reason)
        if (fileId !== "unknown") expect(refused.json.fileId).toBe(fileId)
        // Nothing committed, the command id included: it is still free for a valid command.
        expect(yield* rowsOf(tenant)).toEqual(before)
        expect(yield* rowsOf(other.tenant)).toEqual(theirsBefore)
      }
      // Concurrent commands (distinct ids) attaching one file: it is attached once, the others are refused.
      const racing = yield* Effect.all(Array.from({ length: 5 }, () => record(port, token, command({ attachments: [second.json.fileId] }))), { concurrency: "unbounded" })
      expect(racing.map((a) => a.status).sort()).toEqual([201, 422, 422, 422, 422])
      for (const refused of racing.filter((a) => a.status === 422)) expect(refused.json.reason).toBe("attachment-already-attached")
      const finalRows = yield* rowsOf(tenant)
      expect([finalRows.receipts.length, finalRows.commands.length, finalRows.audit.length]).toEqual([2, 2, 2])
    }))

  it.scoped("Permission receipts:write: an API key without it and a device credential get 403 on every receipts route and nothing is committed or staged", () =>
    Effect.gen(function* () {
      const roots = yield* privateRoots
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...rootsEnv(roots) })
      const { account, tenant, token } = yield* tenantWithKey(port)
      const recorded = yield* record(port, token, command())
      expect(recorded.status).toBe(201)
      const without = yield* call(port, "POST", `/operator/tenants/${tenant}/api-keys`, {
        ...op,
        body: { account, kind: "agent", name: "enqueue-only", permissions: ["outbox:enqueue"] }
      })
      const device = yield* call(port, "POST", `/operator/tenants/${tenant}/device-credentials`, { ...op, body: { account, device: "d-1" } })
      expect([without.status, device.status]).toEqual([201, 201])
      const before = yield* rowsOf(tenant)
      for (const credential of [without.json.token as string, device.json.token as string]) {
        expectRefusal(yield* record(port, credential, command()), 403, "PermissionDenied")
        expectRefusal(yield* upload(port, credential, randomBytes(100)), 403, "PermissionDenied")
        expectRefusal(yield* call(port, "GET", `/api/receipts/${recorded.json.receipt.id}`, { token: credential }), 403, "PermissionDenied")
      }
      expect(yield* rowsOf(tenant)).toEqual(before)
      expect(readdirSync(roots.staging)).toEqual([])
    }))

  it.scoped("The edge refuses malformed and oversized commands (101 lines, 11 attachments, unknown members, broken JSON, a body over MAX_REQUEST_BODY_BYTES) and nothing is committed", () =>
    Effect.gen(function* () {
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", MAX_REQUEST_BODY_BYTES: "20000", RECEIPT_FILE_MAX_BYTES: "20000" })
      const { tenant, token } = yield* tenantWithKey(port)
      const line = { description: "Item", quantity: 1, unitMinor: 100 }
      const malformed: ReadonlyArray<unknown> = [
        command({ lines: Array.from({ length: 101 }, () => line) }),
        command({ lines: [] }),
        command({ attachments: Array.from({ length: 11 }, () => randomUUID()) }),
        command({ extra: true }),
        command({ payer: { ...PAYER, phone: "123" } }),
        command({ commandId: "has space" }),
        command({ currency: "eur" }),
        command({ lines: [{ ...line, quantity: 0 }] }),
        command({ reference: "two\nlines" }),
        "[]"
      ]
      for (const body of malformed) {
        const refused = yield* record(port, token, body)
        expect(refused.status).toBe(400)
        expect(refused.json._tag).toBe("RequestInvalid")
        // A refusal quotes nothing the client sent.
        expect(refused.text).not.toContain(PAYER.email)
      }
      expectRefusal(yield* record(port, token, "{\"commandId\": "), 422, "JsonBodyRefused", "json-malformed")
      const oversized = yield* record(port, token, command({ lines: [{ ...line, description: "x".repeat(200) }], reference: "y".repeat(100), pad: "z".repeat(30_000) }))
      expect(oversized.status).toBe(413)
      expect(yield* rowsOf(tenant)).toEqual({ receipts: [], lines: 0, commands: [], audit: [], effects: [], files: [] })
      // 100 lines is the bound, not over it.
      expect((yield* record(port, token, command({ lines: Array.from({ length: 100 }, () => line) }))).status).toBe(201)
    }))

  it.scoped("An upload over RECEIPT_FILE_MAX_BYTES, declared or chunked (undeclared), is 413 file-too-large: nothing is left in the staging root and no row is written", () =>
    Effect.gen(function* () {
      const roots = yield* privateRoots
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...rootsEnv(roots), RECEIPT_FILE_MAX_BYTES: "4096" })
      const { tenant, token } = yield* tenantWithKey(port)
      const declared = yield* upload(port, token, randomBytes(4097))
      expectRefusal(declared, 413, "UploadRejected", "file-too-large")
      expect(declared.json.maxBytes).toBe(4096)
      // Chunked: no Content-Length, the limit is enforced while the chunks arrive.
      const chunks = [randomBytes(2000), randomBytes(2000), randomBytes(2000)]
      const stream = new ReadableStream<Uint8Array>({
        async pull(controller) {
          const next = chunks.shift()
          if (next === undefined) return controller.close()
          await new Promise((resolve) => setTimeout(resolve, 20))
          controller.enqueue(new Uint8Array(next))
        }
      })
      const chunked = yield* call(port, "POST", "/api/receipts/files", { token, headers: { "content-type": "application/pdf" }, body: stream })
      expectRefusal(chunked, 413, "UploadRejected", "file-too-large")
      expect(readdirSync(roots.staging)).toEqual([])
      expect((yield* rowsOf(tenant)).files).toEqual([])

      // At the limit, declared and chunked, the upload is staged.
      const exact = randomBytes(4096)
      const accepted = yield* upload(port, token, exact)
      expect(accepted.status).toBe(201)
      expect(accepted.json).toMatchObject({ size: 4096, sha256: createHash("sha256").update(exact).digest("hex") })
      const parts = [exact.subarray(0, 3000), exact.subarray(3000)]
      const chunkedExact = yield* call(port, "POST", "/api/receipts/files", {
        token,
        headers: { "content-type": "application/pdf" },
        body: new ReadableStream<Uint8Array>({
          pull: (controller) => {
            const next = parts.shift()
            return next === undefined ? controller.close() : controller.enqueue(new Uint8Array(next))
          }
        })
      })
      expect([chunkedExact.status, chunkedExact.json.sha256]).toEqual([201, accepted.json.sha256])
      expect(readdirSync(roots.staging).sort()).toEqual([accepted.json.fileId, chunkedExact.json.fileId].sort())
    }))

  it.scoped("A truncated upload (a Content-Length larger than the body, then the client closes) leaves nothing behind: no staged or temporary file, no row", () =>
    Effect.gen(function* () {
      const roots = yield* privateRoots
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...rootsEnv(roots) })
      const { tenant, token } = yield* tenantWithKey(port)
      const socket = yield* truncatedUpload(port, token, 50_000, randomBytes(10_000))
      // The upload is being streamed into the staging root...
      yield* waitUntil(() => readdirSync(roots.staging).length > 0, "the upload reached the staging root")
      socket.destroy()
      // ...and once the client is gone, nothing of it is left.
      yield* waitUntil(() => readdirSync(roots.staging).length === 0, "the staging root is empty again")
      yield* Effect.sleep("300 millis")
      expect(readdirSync(roots.staging)).toEqual([])
      expect((yield* rowsOf(tenant)).files).toEqual([])
      // The process still serves uploads.
      expect((yield* upload(port, token, randomBytes(10))).status).toBe(201)
    }))

  it.scoped("An upload whose row cannot be written (database failure) is 503 storage-unavailable and leaves no staged file behind", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const roots = yield* privateRoots
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...rootsEnv(roots) })
      const { tenant, token } = yield* tenantWithKey(port)
      yield* sql`ALTER TABLE receipt_files RENAME TO receipt_files_away`
      yield* Effect.addFinalizer(() => Effect.orDie(sql`ALTER TABLE IF EXISTS receipt_files_away RENAME TO receipt_files`))
      const refused = yield* upload(port, token, randomBytes(1000))
      yield* sql`ALTER TABLE receipt_files_away RENAME TO receipt_files`
      // Holds today: the answer and the database.
      expect([refused.status, refused.json?.reason]).toEqual([503, "storage-unavailable"])
      expect((yield* rowsOf(tenant)).files).toEqual([])
      // Fails today: the staged copy is left behind.
      expect(readdirSync(roots.staging)).toEqual([])
    }))

  it.scoped("An upload without a valid Content-Type is refused (413 content-type-invalid) and an empty one (upload-empty): nothing staged, no row", () =>
    Effect.gen(function* () {
      const roots = yield* privateRoots
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...rootsEnv(roots) })
      const { tenant, token } = yield* tenantWithKey(port)
      for (const contentType of ["pdf", "application/pdf/x", "text/plain\u00e9", `application/${"x".repeat(64)}`, "application /pdf"]) {
        expectRefusal(yield* upload(port, token, randomBytes(100), { "content-type": contentType }), 413, "UploadRejected", "content-type-invalid")
      }
      // Without any Content-Type (the helper would add JSON's).
      const untyped = yield* Effect.promise(() =>
        fetch(`http://127.0.0.1:${port}/api/receipts/files`, { method: "POST", headers: { authorization: `Bearer ${token}`, connection: "close" }, body: new Blob([randomBytes(100)]) })
          .then(async (response) => ({ status: response.status, json: await response.json() as any, headers: Object.fromEntries(response.headers) }))
      )
      expectRefusal(untyped, 413, "UploadRejected", "content-type-invalid")
      expectRefusal(yield* upload(port, token, new Uint8Array(0)), 413, "UploadRejected", "upload-empty")
      expect(readdirSync(roots.staging)).toEqual([])
      expect((yield* rowsOf(tenant)).files).toEqual([])
      // Parameters are not part of the stored type.
      const typed = yield* upload(port, token, randomBytes(10), { "content-type": "Text/Plain; charset=utf-8" })
      expect([typed.status, typed.json.contentType]).toEqual([201, "text/plain"])
    }))

  it.scoped("An upload is never named by the client: the staged file is named by the returned id only, whatever name the request suggests", () =>
    Effect.gen(function* () {
      const roots = yield* privateRoots
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...rootsEnv(roots) })
      const { tenant, token } = yield* tenantWithKey(port)
      const bytes = randomBytes(1000)
      const staged = yield* call(port, "POST", "/api/receipts/files?name=..%2Fevil.pdf&fileId=chosen", {
        token,
        headers: {
          "content-type": "application/pdf",
          "content-disposition": "attachment; filename=\"../evil.pdf\"",
          "x-file-name": "evil.pdf",
          "x-file-id": "00000000-0000-4000-8000-000000000000"
        },
        body: new Uint8Array(bytes)
      })
      expect(staged.status).toBe(201)
      expect(staged.json.fileId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
      expect(staged.json.fileId).not.toBe("00000000-0000-4000-8000-000000000000")
      expect(readdirSync(roots.staging)).toEqual([staged.json.fileId])
      expect(readdirSync(roots.storage)).toEqual([])
      expect(readdirSync(roots.base).sort()).toEqual(["staging", "storage"])
      expect(existsSync("/tmp/evil.pdf")).toBe(false)
      expect((yield* rowsOf(tenant)).files.map((f: { id: string }) => f.id)).toEqual([staged.json.fileId])
    }))

  it.scoped("Without storage roots in the process, uploads and attachments are 503 receipt-storage-unconfigured and nothing is written", () =>
    Effect.gen(function* () {
      const roots = yield* privateRoots
      const withRoots = yield* start({ RECEIPT_DELIVERY: "disabled", ...rootsEnv(roots) })
      const { tenant, token } = yield* tenantWithKey(withRoots.port)
      const staged = yield* upload(withRoots.port, token, randomBytes(100))
      const keptBody = command({ attachments: [(yield* upload(withRoots.port, token, randomBytes(100))).json.fileId] })
      const kept = yield* record(withRoots.port, token, keptBody)
      expect([staged.status, kept.status]).toEqual([201, 201])
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled" })
      // A replay writes nothing, so it answers here too.
      const replay = yield* record(port, token, keptBody)
      expect([replay.status, replay.headers["idempotent-replayed"], replay.text]).toEqual([201, "true", kept.text])
      const before = yield* rowsOf(tenant)
      expectRefusal(yield* upload(port, token, randomBytes(100)), 503, "ReceiptsUnavailable", "receipt-storage-unconfigured")
      // A file staged by a process with the roots cannot be attached here: this process could never keep it.
      expectRefusal(yield* record(port, token, command({ attachments: [staged.json.fileId] })), 503, "ReceiptsUnavailable", "receipt-storage-unconfigured")
      expect(yield* rowsOf(tenant)).toEqual(before)
      expect(readdirSync(roots.staging)).toContain(staged.json.fileId)
      // Receipts without attachments need no storage.
      expect((yield* record(port, token, command())).status).toBe(201)
    }))

  it.scoped("disabled without RECEIPT_FROM: no receipt provider call at all, even with MAIL_PROVIDER_URL and MAIL_PROVIDER_TOKEN set; the effects stay pending", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      const { RECEIPT_FROM: _, ...env } = providerEnv(provider, { RECEIPT_RETRY_BASE: "100 millis" })
      const { backend, port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...env })
      const { token } = yield* tenantWithKey(port)
      const recorded = yield* record(port, token, command())
      expect(recorded.status).toBe(201)
      yield* Effect.sleep("1 second")
      expect((yield* provider.requests).length).toBe(0)
      expect((yield* effectsOf(recorded.json.receipt.id)).map((e) => [e.kind, e.state, e.attempt, e.frozen])).toEqual([["notify", "pending", 0, false]])
      expect(yield* backend.output).toContain("receipt delivery disabled")
    }))

  it.scoped("disabled with receipt provider configuration: the request's bounded post-commit attempt delivers the notification (one call); no worker runs, so a failed attempt stays pending and this process never retries it", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...providerEnv(provider, { RECEIPT_RETRY_BASE: "100 millis", RECEIPT_RETRY_CAP: "100 millis" }) })
      const { token } = yield* tenantWithKey(port)
      const delivered = yield* record(port, token, command())
      expect(delivered.status).toBe(201)
      // Done by the time the request answers: the attempt is the request's own.
      expect((yield* effectsOf(delivered.json.receipt.id)).map((e) => [e.state, e.attempt, e.frozen])).toEqual([["done", 1, true]])
      const [mail] = yield* provider.requests
      expect(mail!.idempotencyKey).toBe(delivered.json.effects[0].id)
      expect(JSON.parse(mail!.bodyText)).toMatchObject({ from: "receipts@acme.example", to: [`"${PAYER.name}" <${PAYER.email}>`] })
      // A replay answers from the command receipt and calls nobody.
      const replay = yield* record(port, token, { ...command(), commandId: delivered.json.receipt.commandId, reference: delivered.json.receipt.reference })
      expect([replay.status, replay.headers["idempotent-replayed"], replay.text]).toEqual([201, "true", delivered.text])
      expect((yield* provider.requests).length).toBe(1)

      yield* provider.script({ reply: LoopbackReply.status(500) })
      const failed = yield* record(port, token, command())
      expect(failed.status).toBe(201)
      const [effect] = yield* effectsOf(failed.json.receipt.id)
      expect([effect!.state, effect!.attempt, effect!.last_error]).toEqual(["pending", 1, expect.stringMatching(/^[a-z0-9-]+$/)])
      // Due again after 100 ms: a worker would have retried it many times by now.
      yield* Effect.sleep("1200 millis")
      expect((yield* provider.requests).length).toBe(2)
      expect((yield* effectsOf(failed.json.receipt.id)).map((e) => [e.state, e.attempt])).toEqual([["pending", 1]])
      expect(JSON.parse((yield* get(port, "/ready")).body).checks.workers.running).not.toContain("receipt-effects")
    }))

  it.scoped("enabled in ROLE=ingress: the internal ingress never starts the worker; the effects stay pending for a backend that runs it", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      const roots = yield* privateRoots
      // The request's own bounded attempt fails; only a worker could retry it.
      yield* provider.script({ times: 1, reply: LoopbackReply.status(500) })
      const env = { RECEIPT_DELIVERY: "enabled", ...rootsEnv(roots), ...providerEnv(provider, { RECEIPT_RETRY_BASE: "100 millis", RECEIPT_RETRY_CAP: "100 millis" }) }
      const ingress = yield* start({ ...env, ROLE: "ingress" })
      const { token } = yield* tenantWithKey(ingress.port)
      const recorded = yield* record(ingress.port, token, command())
      expect(recorded.status).toBe(201)
      yield* Effect.sleep("1 second")
      expect((yield* effectsOf(recorded.json.receipt.id)).map((e) => [e.state, e.attempt])).toEqual([["pending", 1]])
      expect((yield* provider.requests).length).toBe(1)
      expect(JSON.parse((yield* get(ingress.port, "/ready")).body).checks.workers).toMatchObject({ enabled: false, running: [] })
      yield* ingress.backend.signal("SIGTERM")
      expect(yield* ingress.backend.exitCode()).toBe(0)

      yield* start(env)
      yield* waitForEffects(recorded.json.receipt.id, (rows) => rows.every((e) => e.state === "done"), "reached done")
      const mails = yield* provider.requests
      expect(mails.map((m) => m.idempotencyKey)).toEqual([recorded.json.effects[0].id, recorded.json.effects[0].id])
      expect(mails[1]!.bodyText).toBe(mails[0]!.bodyText)
    }))

  it.scoped("RECEIPT_DELIVERY missing with DATABASE_URL stops start-up for every role: non-zero exit naming it, nothing listening", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      for (const role of ["backend", "ingress"]) {
        const port = yield* freePort
        const backend = yield* spawnBun(backendMain, { DATABASE_URL: db.url, PORT: String(port), PASSWORD_RESET_DELIVERY: "disabled", ROLE: role })
        expect(yield* backend.exitCode()).not.toBe(0)
        const output = yield* backend.output
        expect(output).toContain("RECEIPT_DELIVERY")
        expect(output).not.toContain("listening on")
        expect(yield* probePort(port)).toBe("refused")
      }
    }))

  it.scoped("enabled with incomplete receipt provider configuration or bad storage roots (missing, group-readable) stops start-up before the listener: non-zero exit, the variables named", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      const db = yield* TestDatabase
      const roots = yield* privateRoots
      const missing = join(roots.base, "missing")
      const open = join(roots.base, "open")
      mkdirSync(open)
      chmodSync(open, 0o750)
      const full: Record<string, string> = { RECEIPT_DELIVERY: "enabled", ...rootsEnv(roots), ...providerEnv(provider) }
      const { MAIL_PROVIDER_TOKEN: _token, RECEIPT_FROM: _from, ...withoutFromAndToken } = full
      const { RECEIPT_STAGING_ROOT: _staging, RECEIPT_STORAGE_ROOT: _storage, ...withoutRoots } = full
      const cases: ReadonlyArray<readonly [Record<string, string>, ReadonlyArray<string>]> = [
        [withoutFromAndToken, ["RECEIPT_FROM", "MAIL_PROVIDER_TOKEN"]],
        [withoutRoots, ["RECEIPT_STAGING_ROOT", "RECEIPT_STORAGE_ROOT"]],
        [{ ...full, RECEIPT_STAGING_ROOT: missing }, ["RECEIPT_STAGING_ROOT: missing"]],
        [{ ...full, RECEIPT_STORAGE_ROOT: open }, ["RECEIPT_STORAGE_ROOT: group-or-world-accessible"]]
      ]
      for (const [env, named] of cases) {
        const port = yield* freePort
        const backend = yield* spawnBun(backendMain, { DATABASE_URL: db.url, PORT: String(port), OPERATOR_TOKEN, PASSWORD_RESET_DELIVERY: "disabled", ...env })
        expect(yield* backend.exitCode()).not.toBe(0)
        const output = yield* backend.output
        for (const name of named) expect(output).toContain(name)
        expect(output).not.toContain("listening on")
        expect(output).not.toContain(MAIL_TOKEN)
        expect(yield* probePort(port)).toBe("refused")
      }
      expect(existsSync(missing)).toBe(false)
      expect(readdirSync(open)).toEqual([])
    }))

  it.scoped("SIGTERM while a notification call hangs: the call is aborted, the effect goes back to pending (interrupted) under the same identity, exit 0", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      yield* provider.script({ reply: LoopbackReply.hang() })
      const roots = yield* privateRoots
      const { backend, port } = yield* start({
        RECEIPT_DELIVERY: "enabled",
        ...rootsEnv(roots),
        ...providerEnv(provider, { MAIL_PROVIDER_TIMEOUT: "30 seconds", RECEIPT_INLINE_TIMEOUT: "200 millis" })
      })
      const { token } = yield* tenantWithKey(port)
      const recorded = yield* record(port, token, command())
      expect(recorded.status).toBe(201)
      const attempt = yield* hungClaim(provider, recorded.json.receipt.id)
      yield* backend.signal("SIGTERM")
      expect(yield* backend.exitCode()).toBe(0)
      // Every call was aborted (the request's own at RECEIPT_INLINE_TIMEOUT, the worker's at SIGTERM), all under one identity.
      const mails = yield* provider.awaitAborts(attempt)
      expect(mails.map((m) => m.idempotencyKey)).toEqual(Array.from({ length: attempt }, () => recorded.json.effects[0].id))
      for (const mail of mails) expect(mail.bodyText).toBe(mails[0]!.bodyText)
      expect((yield* effectsOf(recorded.json.receipt.id)).map((e) => [e.state, e.attempt, e.last_error, e.frozen])).toEqual([["pending", attempt, "interrupted", true]])
      const output = yield* backend.output
      expect(output).toContain("shutdown: worker receipt-effects interrupted and joined")
      for (const secret of [MAIL_TOKEN, PAYER.email]) expect(output).not.toContain(secret)
    }))

  it.scoped("A renamed private table while the worker runs stops the root worker: non-zero exit after orderly cleanup; a restarted process (table renamed back) recovers the work to done", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      const sql = yield* SqlClient.SqlClient
      yield* provider.reset
      yield* retireEarlierWork
      // The request's attempt fails once, so the effect waits its retry delay while the worker polls.
      yield* provider.script({ times: 1, reply: LoopbackReply.status(500) })
      const roots = yield* privateRoots
      const env = { RECEIPT_DELIVERY: "enabled", ...rootsEnv(roots), ...providerEnv(provider, { RECEIPT_RETRY_BASE: "1500 millis", RECEIPT_RETRY_CAP: "1500 millis" }) }
      const first = yield* start(env)
      const { token } = yield* tenantWithKey(first.port)
      const recorded = yield* record(first.port, token, command())
      expect(recorded.status).toBe(201)
      // The request's failed attempt is recorded (pending, attempt 1) before the table goes: under load that write can
      // land after the answer, and a rename in between would leave the claim running instead.
      yield* waitForEffects(recorded.json.receipt.id, ([e]) => e!.state === "pending" && e!.attempt === 1, "recorded the request's attempt")
      yield* sql`ALTER TABLE receipt_effects RENAME TO receipt_effects_away`
      yield* Effect.addFinalizer(() => Effect.orDie(sql`ALTER TABLE IF EXISTS receipt_effects_away RENAME TO receipt_effects`))
      expect(yield* first.backend.exitCode()).not.toBe(0)
      const output = yield* first.backend.output
      expect(output).toContain("worker receipt-effects failed: stopping the process")
      // Orderly: the listener closed and the other workers were interrupted and joined before the exit.
      expect(output).toMatch(/shutdown: worker \S+ interrupted and joined/)
      expect(yield* probePort(first.port)).toBe("refused")
      yield* sql`ALTER TABLE receipt_effects_away RENAME TO receipt_effects`
      expect((yield* effectsOf(recorded.json.receipt.id)).map((e) => [e.state, e.attempt])).toEqual([["pending", 1]])

      yield* start(env)
      const [done] = yield* waitForEffects(recorded.json.receipt.id, ([e]) => e!.state === "done", "reached done")
      expect(done!.attempt).toBe(2)
      const mails = yield* provider.requests
      expect(mails.map((m) => m.idempotencyKey)).toEqual([done!.id, done!.id])
      expect(mails[1]!.bodyText).toBe(mails[0]!.bodyText)
    }))

  it.scoped("SIGKILL mid-call cannot run cleanup: the next process returns the stale claim to the retry path (RECEIPT_STALE_CLAIM) and completes it with the same Idempotency-Key and body", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      // The request's attempt and the worker's both hang (the provider accepts the first); later calls get 200.
      yield* provider.script({ reply: LoopbackReply.hang({ accept: true }) })
      const roots = yield* privateRoots
      const env = { RECEIPT_DELIVERY: "enabled", ...rootsEnv(roots) }
      const first = yield* start({ ...env, ...providerEnv(provider, { MAIL_PROVIDER_TIMEOUT: "30 seconds", RECEIPT_INLINE_TIMEOUT: "200 millis" }) })
      const { token } = yield* tenantWithKey(first.port)
      const recorded = yield* record(first.port, token, command())
      expect(recorded.status).toBe(201)
      const attempt = yield* hungClaim(provider, recorded.json.receipt.id)
      yield* first.backend.signal("SIGKILL")
      yield* first.backend.exitCode()
      expect((yield* effectsOf(recorded.json.receipt.id)).map((e) => [e.state, e.attempt])).toEqual([["running", attempt]])
      const before = yield* provider.requests
      // From now on the provider answers 200.
      yield* provider.reset

      const next = yield* start({ ...env, ...providerEnv(provider, { MAIL_PROVIDER_TIMEOUT: "1 second", RECEIPT_STALE_CLAIM: "3 seconds" }) })
      const [done] = yield* waitForEffects(recorded.json.receipt.id, ([e]) => e!.state === "done", "reached done")
      expect(done!.attempt).toBe(attempt + 1)
      const mails = [...before, ...(yield* provider.requests)]
      expect(mails).toHaveLength(attempt + 1)
      for (const mail of mails) {
        expect(mail.idempotencyKey).toBe(done!.id)
        expect(mail.bodyText).toBe(mails[0]!.bodyText)
      }
      expect(yield* next.backend.output).toContain("stale claims back on the retry path")
    }))

  it.scoped("The operator view and GET /api/receipts/:id show the effects and their states without the payer's contact or the notification body; another tenant's receipt is 404", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* retireEarlierWork
      const roots = yield* privateRoots
      const { port } = yield* start({ RECEIPT_DELIVERY: "disabled", ...rootsEnv(roots), ...providerEnv(provider) })
      const { tenant, token } = yield* tenantWithKey(port)
      const other = yield* tenantWithKey(port)
      const file = yield* upload(port, token, randomBytes(500))
      const recorded = yield* record(port, token, command({ attachments: [file.json.fileId] }))
      expect(recorded.status).toBe(201)
      const id = recorded.json.receipt.id as string
      const [mail] = yield* provider.requests
      const body = JSON.parse(mail!.bodyText)

      const mine = yield* call(port, "GET", `/api/receipts/${id}`, { token })
      const operator = yield* call(port, "GET", `/operator/receipts/${tenant}/${id}`, op)
      for (const view of [mine, operator]) {
        expect(view.status).toBe(200)
        expect(view.json).toMatchObject({ id, tenant, reference: recorded.json.receipt.reference })
        expect(view.json.effects.map((e: any) => [e.kind, e.state, e.attempt])).toEqual([
          ["promote-file", "done", 1],
          ["delete-staged", "done", 1],
          ["audit-check", "done", 1],
          ["notify", "done", 1]
        ])
        expect(view.json.effects[3].frozen).toBe(true)
        for (const secret of [PAYER.email, PAYER.name, "Pat", body.text, body.html, "Consulting", MAIL_TOKEN]) {
          expect(view.text).not.toContain(secret)
        }
        expect(Object.keys(view.json).sort()).toEqual(["createdAt", "effects", "id", "reference", "tenant"])
      }
      expect(operator.json).toEqual(mine.json)

      expectRefusal(yield* call(port, "GET", `/api/receipts/${id}`, { token: other.token }), 404, "ReceiptNotFound", "receipt-not-found")
      expectRefusal(yield* call(port, "GET", `/operator/receipts/${other.tenant}/${id}`, op), 404, "ReceiptNotFound", "receipt-not-found")
      expectRefusal(yield* call(port, "GET", `/api/receipts/${randomUUID()}`, { token }), 404, "ReceiptNotFound", "receipt-not-found")
    }))
})
