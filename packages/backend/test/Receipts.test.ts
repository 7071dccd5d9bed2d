import { expect, layer } from "@effect/vitest"
import { LoopbackProvider } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { OPERATOR_TOKEN } from "./support/Backend.ts"
import { call } from "./support/Http.ts"
import { privateRoots, start, tenantWithKey } from "./support/Receipts.ts"

// Receipts through real backend processes (docs/receipts.md): upload, command, effects run in order (file promotion,
// staged-copy deletion, digest audit, notification), replay, and the operator's view of the effects.

const op = { token: OPERATOR_TOKEN }
const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`
const MAIL_TOKEN = `mail-${randomBytes(24).toString("base64url")}`

const Suite = Layer.merge(TestDatabaseLive, LoopbackProvider.Default)

layer(Suite, { excludeTestServices: true, timeout: 120_000 })("receipts through real backend processes", (it) => {
  it.scoped("end to end through `bun run start`: an upload is staged with its digest, a receipt command commits and its effects run in order (promote, delete staged, audit check, notify) until every effect is done; the file is kept under its digest and the payer is notified once; a replay answers the same and writes nothing", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      const sql = yield* SqlClient.SqlClient
      yield* provider.reset
      const roots = yield* privateRoots
      const { backend, port } = yield* start({
        RECEIPT_DELIVERY: "enabled",
        RECEIPT_FROM: "receipts@acme.example",
        RECEIPT_STAGING_ROOT: roots.staging,
        RECEIPT_STORAGE_ROOT: roots.storage,
        RECEIPT_POLL_INTERVAL: "100 millis",
        MAIL_PROVIDER_URL: provider.urlFor("/emails"),
        MAIL_PROVIDER_TOKEN: MAIL_TOKEN
      }, { script: true })
      const { tenant, token } = yield* tenantWithKey(port)
      const bytes = randomBytes(200_000)
      const upload = yield* call(port, "POST", "/api/receipts/files", { token, headers: { "content-type": "application/pdf" }, body: new Uint8Array(bytes) })
      expect(upload.status).toBe(201)
      const sha256 = createHash("sha256").update(bytes).digest("hex")
      expect(upload.json).toMatchObject({ sha256, size: bytes.length, contentType: "application/pdf" })
      expect(existsSync(join(roots.staging, upload.json.fileId))).toBe(true)

      const command = {
        commandId: unique("cmd"),
        reference: "R-2026-0001",
        currency: "EUR",
        paidAt: "2026-11-30T12:00:00.000Z",
        payer: { name: "Bob Payer", email: "bob@example.com" },
        lines: [{ description: "Consulting", quantity: 2, unitMinor: 12_500 }],
        attachments: [upload.json.fileId]
      }
      const recorded = yield* call(port, "POST", "/api/receipts", { token, body: command })
      expect(recorded.status).toBe(201)
      expect(recorded.json.receipt).toMatchObject({ tenant, reference: "R-2026-0001", totalMinor: 25_000, attachments: 1 })
      expect(recorded.json.effects.map((e: { kind: string }) => e.kind)).toEqual(["promote-file", "delete-staged", "audit-check", "notify"])
      const id = recorded.json.receipt.id as string

      let state: any
      for (let i = 0; i < 100; i++) {
        state = (yield* call(port, "GET", `/api/receipts/${id}`, { token })).json
        if (state.effects.every((e: { state: string }) => e.state === "done")) break
        yield* Effect.sleep("100 millis")
      }
      expect(state.effects.map((e: { state: string }) => e.state)).toEqual(["done", "done", "done", "done"])
      expect(readFileSync(join(roots.storage, sha256)).equals(bytes)).toBe(true)
      expect(existsSync(join(roots.staging, upload.json.fileId))).toBe(false)
      const mails = yield* provider.requests
      expect(mails).toHaveLength(1)
      expect(mails[0]!.idempotencyKey).toBe(recorded.json.effects[3].id)
      expect(JSON.parse(mails[0]!.bodyText)).toMatchObject({ to: ["\"Bob Payer\" <bob@example.com>"], subject: "Receipt R-2026-0001" })

      const replay = yield* call(port, "POST", "/api/receipts", { token, body: command })
      expect([replay.status, replay.headers["idempotent-replayed"], replay.text]).toEqual([201, "true", recorded.text])
      const conflict = yield* call(port, "POST", "/api/receipts", { token, body: { ...command, reference: "R-2026-0002" } })
      expect([conflict.status, conflict.json.reason]).toEqual([409, "command-id-reused"])
      const [counts] = yield* sql<{ receipts: number; audit: number; effects: number }>`
        SELECT (SELECT count(*)::int FROM receipts WHERE tenant_id = ${tenant}) AS receipts,
               (SELECT count(*)::int FROM receipt_audit WHERE tenant_id = ${tenant}) AS audit,
               (SELECT count(*)::int FROM receipt_effects WHERE tenant_id = ${tenant}) AS effects`
      expect(counts).toEqual({ receipts: 1, audit: 1, effects: 4 })

      const operatorView = yield* call(port, "GET", `/operator/receipts/${tenant}/${id}`, op)
      expect(operatorView.status).toBe(200)
      expect(operatorView.text).not.toContain("bob@example.com")
      yield* backend.signal("SIGTERM")
      expect(yield* backend.exitCode()).toBe(0)
    }))
})
