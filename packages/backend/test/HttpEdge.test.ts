import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect } from "effect"
import { generateKeyPairSync } from "node:crypto"
import { annotation, logEntries, OPERATOR_TOKEN, startBackend, tenantWithCredentials } from "./support/Backend.ts"
import { rawExchange } from "@delivery/testing"
import { call } from "./support/Http.ts"

const ID = /^[0-9a-f]{32}$/
const operator = { token: OPERATOR_TOKEN }
const publicKey = () => generateKeyPairSync("ed25519").publicKey.export({ format: "jwk" }).x!
const chunked = (bytes: number) =>
  new ReadableStream<Uint8Array>({
    start(controller) {
      for (let sent = 0; sent < bytes; sent += 1024) controller.enqueue(new TextEncoder().encode(" ".repeat(1024)))
      controller.close()
    }
  })

layer(TestDatabaseLive, { excludeTestServices: true })("the HTTP edge", (it) => {
  it.scoped("the correlation id is one per request for the whole server: assigned at the edge, on every response as x-correlation-id (successes and refusals alike), the one handlers put in their audit rows and the one in every log line of the request", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const { device } = yield* tenantWithCredentials("corr")
      const { backend, port } = yield* startBackend({ LOG_LEVEL: "debug" })
      const answers = [
        yield* call(port, "GET", "/health"),
        yield* call(port, "GET", "/openapi.json"),
        yield* call(port, "GET", "/api/whoami"),
        yield* call(port, "GET", "/no/such/route"),
        yield* call(port, "GET", "/operator/tenants/corr/signing-keys")
      ]
      expect(answers.map((a) => a.status)).toEqual([200, 200, 401, 404, 401])
      for (const answer of answers) expect(answer.headers["x-correlation-id"]).toMatch(ID)
      expect(new Set(answers.map((a) => a.headers["x-correlation-id"])).size).toBe(answers.length)
      // A refusal of the edge itself carries the documented JSON shape.
      expect(answers[3]!.json).toEqual({ _tag: "RouteNotFound", reason: "route-not-found", correlationId: answers[3]!.headers["x-correlation-id"] })

      // The signer's operator routes: the audit row carries the edge's id; a client's own id is not taken.
      const registered = yield* call(port, "POST", "/operator/tenants/corr/signing-keys", {
        ...operator,
        headers: { "x-correlation-id": "ticket-4711" },
        body: { keyId: "k1", publicKey: publicKey() }
      })
      expect(registered.status).toBe(201)
      const signerId = registered.headers["x-correlation-id"]!
      expect(signerId).toMatch(ID)
      expect(registered.json.correlationId).toBe(signerId)
      const [audit] = yield* sql<{ readonly correlation_id: string }>`
        SELECT correlation_id FROM signer_key_audit WHERE tenant = 'corr'`.withoutTransform
      expect(audit!.correlation_id).toBe(signerId)

      // The inbox: an authenticated refusal is audited under the same id, and its log lines carry it.
      const foreign = yield* call(port, "POST", "/controlplane/v1/envelopes", {
        token: device,
        body: { type: "controlplane/v1", route: { tenant: "someone-else", project: "web", producer: "p" } }
      })
      expect([foreign.status, foreign.json.reason]).toEqual([403, "route-tenant-mismatch"])
      const inboxId = foreign.headers["x-correlation-id"]!
      expect(foreign.json.correlationId).toBe(inboxId)
      const [row] = yield* sql<{ readonly correlation_id: string }>`
        SELECT correlation_id FROM inbox_audit WHERE tenant = 'corr'`.withoutTransform
      expect(row!.correlation_id).toBe(inboxId)
      const entries = logEntries(yield* backend.output).filter((entry) => annotation(entry, "correlationId") === inboxId)
      expect(entries.some((entry) => entry.includes("envelope refused"))).toBe(true)
      expect(entries.some((entry) => entry.includes("request answered"))).toBe(true)
    }))

  it.scoped("refusals made below the router keep the contract: a body over MAX_REQUEST_BODY_BYTES, declared or chunked, is 413 body-too-large with the JSON reason and x-correlation-id; malformed framing is refused by Bun's own parser (400, Connection: close) before any code of the server runs", () =>
    Effect.gen(function* () {
      const { port } = yield* startBackend({ MAX_REQUEST_BODY_BYTES: "4096" })
      const declared = yield* call(port, "PUT", "/operator/outbox/targets/big/web", { ...operator, body: `{"endpoint":"${"x".repeat(5000)}"}` })
      const streamed = yield* call(port, "PUT", "/operator/outbox/targets/big/web", { ...operator, body: chunked(5000) })
      // Anonymous too: the limit is the edge's, before authentication.
      const anonymous = yield* call(port, "POST", "/api/outbox/messages", { body: "x".repeat(5000) })
      for (const answer of [declared, streamed, anonymous]) {
        expect([answer.status, answer.json]).toEqual([
          413,
          { _tag: "BodyTooLarge", reason: "body-too-large", correlationId: answer.headers["x-correlation-id"], limit: 4096 }
        ])
        expect(answer.headers["x-correlation-id"]).toMatch(ID)
      }
      // A body within the limit is read as usual.
      expect((yield* call(port, "PUT", "/operator/outbox/targets/big/web", { ...operator, body: { endpoint: "https://example.com/hook" } })).status).toBe(200)

      // Content-Length values Bun's HTTP parser refuses itself: no hook runs, so no JSON and no correlation id.
      for (const length of ["abc", "-1", "1e20", "18446744073709551616"]) {
        const answer = yield* rawExchange(port, `POST /api/outbox/messages HTTP/1.1\r\nHost: x\r\nContent-Length: ${length}\r\n\r\n{}`)
        expect([answer.status, answer.headers.connection, answer.body]).toEqual([400, "close", ""])
      }
      // An HTTP/1.0 request without Host reaches the edge in origin form and is served like any other.
      const old = yield* rawExchange(port, "GET /health HTTP/1.0\r\n\r\n")
      expect([old.status, old.headers["x-correlation-id"]?.length]).toEqual([200, 32])
      // A declared length Bun can parse reaches the edge, however large: the edge's JSON answer.
      const huge = yield* rawExchange(port, `POST /api/outbox/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000000000\r\n\r\n{}`, 500)
      expect(huge.status).toBe(413)
      expect(JSON.parse(huge.body)).toMatchObject({ reason: "body-too-large", correlationId: huge.headers["x-correlation-id"] })
    }))

  it.scoped("ambiguous paths are refused before routing with 400 path-invalid and change nothing: a final parameter is never cut at ';' (PUT /operator/outbox/targets/ta/ta;x), nor are encoded '/', ';', '\\' or '%', empty segments or over-long paths (414) routed", () =>
    Effect.gen(function* () {
      const { port } = yield* startBackend()
      const body = JSON.stringify({ endpoint: "https://example.com/hook" })
      // Raw requests: client libraries rewrite some of these paths before sending them.
      const put = (path: string) =>
        rawExchange(
          port,
          `PUT ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${OPERATOR_TOKEN}\r\nContent-Type: application/json\r\n` +
            `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`
        )
      const refusedPaths = [
        "/operator/outbox/targets/ta/ta;x",
        "/operator/outbox/targets/ta/ta%3Bx",
        "/operator/outbox/targets/ta/ta%3bx",
        "/operator/outbox/targets/ta%2Fx/ta",
        "/operator/outbox/targets/ta/ta%5Cx",
        "/operator/outbox/targets/ta/ta%252F",
        "/operator/outbox/targets/ta/ta%zz",
        "/operator/outbox/targets//ta",
        "/operator/outbox/targets/ta/ta/",
        "//operator/outbox/targets/ta/ta"
      ]
      for (const path of refusedPaths) {
        const answer = yield* put(path)
        expect([path, answer.status, JSON.parse(answer.body)]).toEqual([
          path,
          400,
          { _tag: "PathInvalid", reason: "path-invalid", correlationId: answer.headers["x-correlation-id"] }
        ])
      }
      const long = yield* call(port, "GET", `/operator/outbox/targets/ta/${"a".repeat(5000)}`, operator)
      expect([long.status, long.json]).toEqual([414, { _tag: "UriTooLong", reason: "uri-too-long", correlationId: long.headers["x-correlation-id"], limit: 2048 }])
      // Nothing was registered under any of those paths.
      expect((yield* call(port, "GET", "/operator/outbox/targets/ta/ta", operator)).status).toBe(404)
      // Dot segments never reach the server: Bun resolves them (and `\` as `/`) before any code runs.
      const dotted = yield* rawExchange(
        port,
        `GET /operator/outbox/targets/ta/x/../ta HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${OPERATOR_TOKEN}\r\nConnection: close\r\n\r\n`
      )
      expect(dotted.status).toBe(404)
      expect(JSON.parse(dotted.body)).toMatchObject({ reason: "delivery-target-not-found", project: "ta" })
    }))

  it.scoped("400 decode errors echo nothing back: { reason: request-invalid, correlationId, issues: [{ path, problem }] }, with member names the API declares and never a submitted value or key", () =>
    Effect.gen(function* () {
      const { port } = yield* startBackend()
      const answers = [
        yield* call(port, "PUT", "/operator/outbox/targets/ta/web", { ...operator, body: { endpoint: 31337031337 } }),
        yield* call(port, "PUT", "/operator/outbox/targets/ta/web", { ...operator, body: { endpoint: "https://example.com", "s3cret-member": 1 } }),
        yield* call(port, "GET", "/operator/outbox/messages/ta/web/not-a-uuid-s3cret", operator),
        yield* call(port, "GET", "/operator/outbox/dead-letters/ta/web?limit=-5s3cret", operator)
      ]
      expect(answers.map((a) => a.status)).toEqual([400, 400, 400, 400])
      expect(answers.map((a) => a.json.issues)).toEqual([
        [{ path: "/endpoint", problem: "invalid" }],
        [{ path: "", problem: "unexpected-member" }],
        [{ path: "/id", problem: "invalid" }],
        [{ path: "/limit", problem: "invalid" }]
      ])
      for (const answer of answers) {
        expect(answer.json).toMatchObject({ _tag: "RequestInvalid", reason: "request-invalid", correlationId: answer.headers["x-correlation-id"] })
        expect(answer.text).not.toMatch(/31337|s3cret/)
      }
    }))
})
