import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { OPERATOR_TOKEN, startBackend } from "./support/Backend.ts"
import { call } from "./support/Http.ts"

// Provisioning over HTTP (docs/operations.md, "Provisioning"), against the real backend process: every change
// audited in its own transaction, refusals in the documented shape, tokens shown once, nothing secret kept.

const op = { token: OPERATOR_TOKEN }
const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`

const auditOf = (tenant: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ action: string; subject: string; outcome: string; actor: string; correlation_id: string }>`
      SELECT action, subject, outcome, actor, correlation_id FROM identity_audit
      WHERE tenant = ${tenant} ORDER BY audit_id`.withoutTransform)

/** A refusal in the documented shape: `_tag`, stable `reason`, the correlation id in body and header. */
const refusal = (answer: { status: number; headers: Record<string, string>; json: any }, status: number, tag: string, reason: string) => {
  expect({ status: answer.status, tag: answer.json?._tag, reason: answer.json?.reason }).toEqual({ status, tag, reason })
  expect(answer.json.correlationId).toBe(answer.headers["x-correlation-id"])
}

layer(TestDatabaseLive, { excludeTestServices: true })("provisioning routes in a real backend process", (it) => {
  it.scoped("tenants: created once (201, audited with the request's correlation id), a taken id is 409 tenant-exists, a bad id 400, no operator token 401; listed by id in pages", () =>
    Effect.gen(function* () {
      const { port } = yield* startBackend()
      const tenant = unique("t")
      expect((yield* call(port, "POST", "/operator/tenants", { body: { id: tenant } })).status).toBe(401)
      const created = yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: tenant } })
      expect(created.status).toBe(201)
      expect(created.json).toMatchObject({ tenant: { id: tenant }, correlationId: created.headers["x-correlation-id"] })
      refusal(yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: tenant } }), 409, "ProvisioningConflict", "tenant-exists")
      expect(yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: "Not Valid" } })).toMatchObject({
        status: 400,
        json: { reason: "request-invalid", issues: [{ path: "/id", problem: "invalid" }] }
      })
      expect(yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: unique("t"), extra: 1 } })).toMatchObject({ status: 400 })

      // One row for the one change; the refused repeat and the bad requests left none.
      expect(yield* auditOf(tenant)).toEqual([{
        action: "tenant-create",
        subject: tenant,
        outcome: "applied",
        actor: "operator:environment",
        correlation_id: created.json.correlationId
      }])

      const others = [unique("u"), unique("u"), unique("u")].sort()
      for (const id of others) expect((yield* call(port, "POST", "/operator/tenants", { ...op, body: { id } })).status).toBe(201)
      const first = yield* call(port, "GET", `/operator/tenants?limit=2&after=${others[0]!.slice(0, 1)}`, op)
      expect(first.status).toBe(200)
      expect(first.json.items.map((t: any) => t.id)).toEqual(others.slice(0, 2))
      expect(first.json.next).toBe(others[1])
      const second = yield* call(port, "GET", `/operator/tenants?limit=2&after=${first.json.next}`, op)
      expect(second.json.items.map((t: any) => t.id)[0]).toBe(others[2])
      expect((yield* call(port, "GET", "/operator/tenants?limit=101", op)).status).toBe(400)
      expect((yield* call(port, "GET", "/operator/tenants?limit=0", op)).status).toBe(400)
    }))

  it.scoped("accounts: e-mail unique per tenant case-insensitively (409 account-email-taken), unknown tenant 404, password bounds 422; lists never show a hash; a disabled account's credentials are 401 disabled until enabled again; repeats are unchanged", () =>
    Effect.gen(function* () {
      const { port, backend } = yield* startBackend()
      const tenant = unique("t")
      yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: tenant } })
      const accounts = `/operator/tenants/${tenant}/accounts`
      const password = `pw-${randomBytes(12).toString("base64url")}`
      const withPassword = yield* call(port, "POST", accounts, { ...op, body: { email: "Alice@Example.com", password } })
      expect(withPassword).toMatchObject({ status: 201, json: { account: { tenant, email: "alice@example.com", enabled: true, hasPassword: true } } })
      const keysOnly = yield* call(port, "POST", accounts, { ...op, body: { email: "bob@example.com" } })
      expect(keysOnly.json.account.hasPassword).toBe(false)

      refusal(yield* call(port, "POST", accounts, { ...op, body: { email: "ALICE@example.COM" } }), 409, "ProvisioningConflict", "account-email-taken")
      refusal(yield* call(port, "POST", `/operator/tenants/${unique("nobody")}/accounts`, { ...op, body: { email: "c@example.com" } }), 404, "ProvisioningNotFound", "tenant-not-found")
      const short = yield* call(port, "POST", accounts, { ...op, body: { email: "c@example.com", password: "short" } })
      refusal(short, 422, "PasswordRefused", "password-too-short")
      expect(short.json).toMatchObject({ minLength: 12, maxLength: 1024 })
      refusal(yield* call(port, "POST", accounts, { ...op, body: { email: "c@example.com", password: "x".repeat(1025) } }), 422, "PasswordRefused", "password-too-long")
      expect((yield* call(port, "POST", accounts, { ...op, body: { email: "not-an-address" } })).status).toBe(400)

      const listed = yield* call(port, "GET", accounts, op)
      expect(listed.json.items.map((a: any) => a.email).sort()).toEqual(["alice@example.com", "bob@example.com"])
      expect(listed.text).not.toContain("argon2")
      expect(Object.keys(listed.json.items[0]).sort()).toEqual(["createdAt", "email", "enabled", "hasPassword", "id", "tenant"])

      const account = withPassword.json.account.id
      const device = yield* call(port, "POST", `/operator/tenants/${tenant}/device-credentials`, { ...op, body: { account, device: "laptop-1" } })
      const apiKey = yield* call(port, "POST", `/operator/tenants/${tenant}/api-keys`, { ...op, body: { account, kind: "board", name: "ci" } })
      const whoami = (token: string) => call(port, "GET", "/api/whoami", { token })
      expect((yield* whoami(device.json.token)).status).toBe(200)

      const disabled = yield* call(port, "POST", `${accounts}/${account}/disable`, op)
      expect(disabled.json).toMatchObject({ outcome: "disabled", account: { enabled: false } })
      for (const token of [device.json.token, apiKey.json.token]) {
        expect(yield* whoami(token)).toMatchObject({ status: 401, json: { reason: "disabled" } })
      }
      expect((yield* call(port, "POST", `${accounts}/${account}/disable`, op)).json.outcome).toBe("unchanged")
      expect((yield* call(port, "POST", `${accounts}/${account}/enable`, op)).json).toMatchObject({ outcome: "enabled", account: { enabled: true } })
      expect((yield* whoami(apiKey.json.token)).status).toBe(200)
      refusal(yield* call(port, "POST", `${accounts}/0000000000/disable`, op), 404, "ProvisioningNotFound", "account-not-found")

      expect((yield* auditOf(tenant)).map((r) => [r.action, r.outcome])).toEqual([
        ["tenant-create", "applied"],
        ["account-create", "applied"],
        ["account-create", "applied"],
        ["device-credential-issue", "applied"],
        ["api-key-issue", "applied"],
        ["account-disable", "applied"],
        ["account-disable", "unchanged"],
        ["account-enable", "applied"]
      ])
      // Neither the password nor the e-mail address is in an audit row or the log.
      const rows = JSON.stringify(yield* auditOf(tenant))
      expect(rows).not.toContain("alice")
      const output = yield* backend.output
      expect(output).not.toContain(password)
      expect(output).not.toContain(device.json.token)
    }))

  it.scoped("API keys and device credentials: the token is in the issuing answer only (never listed, stored or logged); it authenticates until revoked (401 revoked) or expired (401 expired); revoking twice keeps the first time; another tenant's account or key is 404", () =>
    Effect.gen(function* () {
      const { port, backend } = yield* startBackend()
      const sql = yield* SqlClient.SqlClient
      const [a, b] = [unique("a"), unique("b")]
      const accountOf = Effect.fnUntraced(function* (tenant: string) {
        yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: tenant } })
        return (yield* call(port, "POST", `/operator/tenants/${tenant}/accounts`, { ...op, body: { email: `ops@${tenant}.example` } })).json.account.id as string
      })
      const [accountA, accountB] = [yield* accountOf(a), yield* accountOf(b)]
      const keys = `/operator/tenants/${a}/api-keys`

      const issued = yield* call(port, "POST", keys, { ...op, body: { account: accountA, kind: "agent", name: "scheduler", permissions: ["outbox:enqueue"] } })
      expect(issued.status).toBe(201)
      expect(issued.json.apiKey).toMatchObject({ tenant: a, account: accountA, kind: "agent", name: "scheduler", permissions: ["outbox:enqueue"], state: "active", expiresAt: null, revokedAt: null })
      const token: string = issued.json.token
      expect(token).toMatch(new RegExp(`^agent_${issued.json.apiKey.id}_[A-Za-z0-9_-]{43}$`))
      expect((yield* call(port, "GET", "/api/whoami", { token })).json).toMatchObject({ _tag: "ApiKey", tenant: a, keyId: issued.json.apiKey.id })

      // Never readable again: not in a list, not in any row, not in the log.
      // The secret is the last 43 characters; it may itself contain `_`.
      const secret = token.slice(-43)
      const listed = yield* call(port, "GET", keys, op)
      expect(listed.json.items.map((k: any) => k.id)).toEqual([issued.json.apiKey.id])
      expect(listed.text).not.toContain(secret)
      const dump = yield* sql<{ row: string }>`
        SELECT row_to_json(k)::text AS row FROM identity_api_keys k
        UNION ALL SELECT row_to_json(a)::text FROM identity_audit a`.withoutTransform
      expect(dump.map((r) => r.row).join("\n")).not.toContain(secret)

      // Another tenant's objects do not exist for this tenant's routes.
      refusal(yield* call(port, "POST", keys, { ...op, body: { account: accountB, kind: "board", name: "x" } }), 404, "ProvisioningNotFound", "account-not-found")
      refusal(yield* call(port, "POST", `/operator/tenants/${b}/api-keys/${issued.json.apiKey.id}/revoke`, op), 404, "ProvisioningNotFound", "api-key-not-found")
      expect((yield* call(port, "GET", `/operator/tenants/${b}/api-keys`, op)).json.items).toEqual([])
      expect((yield* call(port, "GET", "/api/whoami", { token })).status).toBe(200)

      const revoked = yield* call(port, "POST", `${keys}/${issued.json.apiKey.id}/revoke`, op)
      expect(revoked.json).toMatchObject({ outcome: "revoked", apiKey: { state: "revoked" } })
      expect(yield* call(port, "GET", "/api/whoami", { token })).toMatchObject({ status: 401, json: { reason: "revoked" } })
      const again = yield* call(port, "POST", `${keys}/${issued.json.apiKey.id}/revoke`, op)
      expect(again.json.outcome).toBe("unchanged")
      expect(again.json.apiKey.revokedAt).toBe(revoked.json.apiKey.revokedAt)

      // Device credentials, with an expiry.
      const devices = `/operator/tenants/${a}/device-credentials`
      const shortLived = yield* call(port, "POST", devices, { ...op, body: { account: accountA, device: "laptop-1", expiresInSeconds: 1 } })
      expect(shortLived.json.deviceCredential).toMatchObject({ device: "laptop-1", state: "active" })
      expect(shortLived.json.token).toMatch(/^device_/)
      expect((yield* call(port, "GET", "/api/whoami", { token: shortLived.json.token })).json).toMatchObject({ _tag: "Device", device: "laptop-1" })
      yield* Effect.sleep("1100 millis")
      expect(yield* call(port, "GET", "/api/whoami", { token: shortLived.json.token })).toMatchObject({ status: 401, json: { reason: "expired" } })
      expect((yield* call(port, "GET", `${devices}?account=${accountA}`, op)).json.items).toMatchObject([{ state: "expired" }])
      expect((yield* call(port, "POST", devices, { ...op, body: { account: accountA, device: "laptop-1", expiresInSeconds: 0 } })).status).toBe(400)
      const revokedDevice = yield* call(port, "POST", `${devices}/${shortLived.json.deviceCredential.id}/revoke`, op)
      expect(revokedDevice.json).toMatchObject({ outcome: "revoked", deviceCredential: { state: "revoked" } })

      expect((yield* auditOf(a)).filter((r) => r.action.includes("-issue") || r.action.includes("-revoke")).map((r) => [r.action, r.outcome])).toEqual([
        ["api-key-issue", "applied"],
        ["api-key-revoke", "applied"],
        ["api-key-revoke", "unchanged"],
        ["device-credential-issue", "applied"],
        ["device-credential-revoke", "applied"]
      ])
      expect((yield* auditOf(b)).map((r) => r.action)).toEqual(["tenant-create", "account-create"])
      const output = yield* backend.output
      expect(output).not.toContain(secret)
      expect(output).not.toContain(shortLived.json.token)
    }))

  it.scoped("inbound streams: an unknown stream is 404 stream-not-found; the floor is raised (audited), never lowered (unchanged, audited); an unknown tenant is 404 and creates no stream", () =>
    Effect.gen(function* () {
      const { port } = yield* startBackend()
      const sql = yield* SqlClient.SqlClient
      const tenant = unique("t")
      yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: tenant } })
      const stream = `/operator/tenants/${tenant}/streams/website/laptop-7`
      refusal(yield* call(port, "GET", stream, op), 404, "StreamNotFound", "stream-not-found")

      const raised = yield* call(port, "POST", `${stream}/replay-floor`, { ...op, body: { floor: 5 } })
      expect(raised.json).toMatchObject({ outcome: "raised", stream: { tenant, project: "website", producer: "laptop-7", cursor: 5, replayFloor: 5, highSequence: 0 } })
      const lower = yield* call(port, "POST", `${stream}/replay-floor`, { ...op, body: { floor: 2 } })
      expect(lower.json).toMatchObject({ outcome: "unchanged", stream: { replayFloor: 5 } })
      expect((yield* call(port, "GET", stream, op)).json).toEqual({ tenant, project: "website", producer: "laptop-7", cursor: 5, replayFloor: 5, highSequence: 0 })
      expect((yield* call(port, "POST", `${stream}/replay-floor`, { ...op, body: { floor: -1 } })).status).toBe(400)
      expect((yield* call(port, "POST", `${stream}/replay-floor`, { ...op, body: { floor: 1.5 } })).status).toBe(400)
      expect((yield* call(port, "POST", `${stream}/replay-floor`, { body: { floor: 9 } })).status).toBe(401)

      const nobody = unique("nobody")
      refusal(yield* call(port, "POST", `/operator/tenants/${nobody}/streams/website/laptop-7/replay-floor`, { ...op, body: { floor: 3 } }), 404, "ProvisioningNotFound", "tenant-not-found")
      const audit = yield* sql<{ tenant: string; outcome: string; floor_before: string; floor_after: string; requested: string; actor: string; correlation_id: string }>`
        SELECT tenant, outcome, floor_before::text, floor_after::text, requested::text, actor, correlation_id
        FROM inbox_stream_audit WHERE tenant IN (${tenant}, ${nobody}) ORDER BY audit_id`.withoutTransform
      expect(audit.map((r) => [r.outcome, r.floor_before, r.floor_after, r.requested, r.actor])).toEqual([
        ["applied", "0", "5", "5", "operator:environment"],
        ["unchanged", "5", "5", "2", "operator:environment"]
      ])
      expect(audit[0]!.correlation_id).toBe(raised.json.correlationId)
      const streams = yield* sql<{ n: string }>`SELECT count(*)::text AS n FROM inbox_streams WHERE tenant = ${nobody}`.withoutTransform
      expect(streams[0]!.n).toBe("0")
    }))

  it.scoped("/openapi.json documents every provisioning and stream route: request body schema with an example, success schema, 401 and each route's stable refusals", () =>
    Effect.gen(function* () {
      const { port } = yield* startBackend()
      const document = (yield* call(port, "GET", "/openapi.json")).json
      const expected: Array<[string, string, Array<string>]> = [
        ["/operator/tenants", "post", ["201", "401", "409"]],
        ["/operator/tenants", "get", ["200", "401"]],
        ["/operator/tenants/{tenant}/accounts", "post", ["201", "401", "404", "409", "422"]],
        ["/operator/tenants/{tenant}/accounts", "get", ["200", "404"]],
        ["/operator/tenants/{tenant}/accounts/{account}/disable", "post", ["200", "404"]],
        ["/operator/tenants/{tenant}/accounts/{account}/enable", "post", ["200", "404"]],
        ["/operator/tenants/{tenant}/api-keys", "post", ["201", "404"]],
        ["/operator/tenants/{tenant}/api-keys", "get", ["200", "404"]],
        ["/operator/tenants/{tenant}/api-keys/{id}/revoke", "post", ["200", "404"]],
        ["/operator/tenants/{tenant}/device-credentials", "post", ["201", "404"]],
        ["/operator/tenants/{tenant}/device-credentials", "get", ["200", "404"]],
        ["/operator/tenants/{tenant}/device-credentials/{id}/revoke", "post", ["200", "404"]],
        ["/operator/tenants/{tenant}/streams/{project}/{producer}", "get", ["200", "404"]],
        ["/operator/tenants/{tenant}/streams/{project}/{producer}/replay-floor", "post", ["200", "404"]]
      ]
      for (const [path, method, statuses] of expected) {
        const operation = document.paths[path]?.[method]
        expect(operation, `${method} ${path}`).toBeDefined()
        for (const status of [...statuses, "401", "503"]) expect(Object.keys(operation.responses), `${method} ${path}`).toContain(status)
        expect(operation.security).toEqual([{ operatorBearer: [] }])
      }
      const schemas = document.components.schemas
      for (const name of ["CreateTenant", "CreateAccount", "IssueApiKey", "IssueDeviceCredential", "RaiseReplayFloor"]) {
        expect(schemas[name]?.examples?.length, name).toBeGreaterThan(0)
      }
      // The issuing answers say the token is shown once; the refusals list their stable reasons.
      expect(JSON.stringify(document.paths["/operator/tenants/{tenant}/api-keys"].post.responses["201"])).toContain("never readable again")
      expect(JSON.stringify(schemas.ProvisioningConflict)).toContain("account-email-taken")
      expect(JSON.stringify(schemas.PasswordRefused)).toContain("password-too-short")
    }))
})
