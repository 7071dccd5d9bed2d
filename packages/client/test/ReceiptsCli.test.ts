import { expect, layer } from "@effect/vitest"
import { OPERATOR_TOKEN, runCli, startBackend } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"

// `bun run admin -- receipts get` against a real backend (docs/receipts.md): a receipt's effects in order with
// their states, never the payer's contact or a body.

const post = (baseUrl: string, path: string, body: unknown, token: string) =>
  Effect.promise(async () => {
    const response = await fetch(`${baseUrl}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body)
    })
    return { status: response.status, json: await response.json() as any }
  })

layer(TestDatabaseLive, { excludeTestServices: true, timeout: 60_000 })("delivery-admin receipts against a real backend", (it) => {
  it.scoped("receipts get prints the receipt's effects in order with their states (the notification not yet frozen), --json the operator answer; no contact details; an unknown receipt exits 3 receipt-not-found", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* startBackend()
      const tenant = `c-${randomBytes(4).toString("hex")}`
      expect((yield* post(baseUrl, "/operator/tenants", { id: tenant }, OPERATOR_TOKEN)).status).toBe(201)
      const account = yield* post(baseUrl, `/operator/tenants/${tenant}/accounts`, { email: `ops@${tenant}.example` }, OPERATOR_TOKEN)
      const key = yield* post(baseUrl, `/operator/tenants/${tenant}/api-keys`, {
        account: account.json.account.id,
        kind: "agent",
        name: "pos",
        permissions: ["receipts:write"]
      }, OPERATOR_TOKEN)
      const recorded = yield* post(baseUrl, "/api/receipts", {
        commandId: "cli-1",
        reference: "R-CLI-1",
        currency: "EUR",
        paidAt: "2026-11-30T12:00:00.000Z",
        payer: { name: "Carol Payer", email: "carol@example.com" },
        lines: [{ description: "Tea", quantity: 1, unitMinor: 350 }]
      }, key.json.token)
      expect(recorded.status).toBe(201)
      const id = recorded.json.receipt.id as string
      const env = { DELIVERY_URL: baseUrl, OPERATOR_TOKEN }

      const human = yield* runCli(["receipts", "get", tenant, id], env)
      expect(human).toMatchObject({ code: 0, stderr: "" })
      const lines = human.stdout.trimEnd().split("\n")
      expect(lines[0]).toContain(`receipt ${id} (R-CLI-1) of ${tenant}`)
      expect(lines[1]).toMatch(/^seq\s+effect\s+kind\s+state\s+attempts/)
      expect(lines[2]).toMatch(new RegExp(`^1\\s+${recorded.json.effects[0].id}\\s+notify\\s+pending\\s+0\\s+-\\s+\\S+\\s+no\\s+-`))
      const json = yield* runCli(["receipts", "get", tenant, id, "--json"], env)
      expect(JSON.parse(json.stdout)).toMatchObject({ id, tenant, reference: "R-CLI-1", effects: [{ kind: "notify", state: "pending", frozen: false }] })
      for (const run of [human, json]) expect(`${run.stdout}${run.stderr}`).not.toMatch(/carol|Carol|OPERATOR|op-/)

      const unknown = yield* runCli(["receipts", "get", tenant, "00000000-0000-4000-8000-000000000000"], env)
      expect(unknown.code).toBe(3)
      expect(unknown.stderr).toMatch(/^refused: receipt-not-found \(ReceiptNotFound, HTTP 404, correlation id [0-9a-f]+\)/)
      const usage = yield* runCli(["receipts", "get", tenant, "not-an-id"], env)
      expect(usage.code).toBe(2)
    }))
})
