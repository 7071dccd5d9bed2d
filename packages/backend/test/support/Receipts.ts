import { expect } from "@effect/vitest"
import { backendMain, freePort, spawnBun, spawnBunScript, TestDatabase } from "@delivery/testing"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { join } from "node:path"
import { OPERATOR_TOKEN } from "./Backend.ts"
import { call } from "./Http.ts"

// Shared by the receipts suites (Receipts.test.ts, ReceiptsProcess.test.ts): real backend processes on the
// suite's database, tenants with API keys over the operator routes, and private storage roots.

const op = { token: OPERATOR_TOKEN }
const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`

/** Two private roots of a throwaway folder under /tmp/rpt-*, removed with the scope. */
export const privateRoots = Effect.acquireRelease(
  Effect.sync(() => {
    const base = mkdtempSync("/tmp/rpt-")
    const staging = join(base, "staging")
    const storage = join(base, "storage")
    for (const dir of [staging, storage]) {
      mkdirSync(dir, { mode: 0o700 })
      chmodSync(dir, 0o700)
    }
    return { base, staging, storage }
  }),
  ({ base }) => Effect.sync(() => rmSync(base, { recursive: true, force: true }))
)

/** The real backend on the suite's database (`bun run start` when `script`), once it listens. */
export const start = (env: Record<string, string>, options: { readonly script?: boolean } = {}) =>
  Effect.gen(function* () {
    const db = yield* TestDatabase
    const port = yield* freePort
    const full = {
      DATABASE_URL: db.url,
      PORT: String(port),
      OPERATOR_TOKEN,
      IDENTITY_PEER_LIMIT: "1000000",
      PASSWORD_RESET_DELIVERY: "disabled",
      ...env
    }
    const backend = yield* (options.script === true ? spawnBunScript("start", full) : spawnBun(backendMain, full))
    yield* backend.waitForOutput(/listening on http:/)
    return { port, backend }
  })

/** A tenant with an account and an API key with `permissions` (by default allowed to record receipts). */
export const tenantWithKey = (port: number, permissions: ReadonlyArray<string> = ["receipts:write"]) =>
  Effect.gen(function* () {
    const tenant = unique("t")
    expect((yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: tenant } })).status).toBe(201)
    const account = yield* call(port, "POST", `/operator/tenants/${tenant}/accounts`, { ...op, body: { email: `ops@${tenant}.example` } })
    const key = yield* call(port, "POST", `/operator/tenants/${tenant}/api-keys`, {
      ...op,
      body: { account: account.json.account.id, kind: "agent", name: "receipts", permissions }
    })
    expect(key.status).toBe(201)
    return { tenant, account: account.json.account.id as string, token: key.json.token as string }
  })
