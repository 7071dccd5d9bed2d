import { HttpApi, HttpApiBuilder, HttpServer } from "@effect/platform"
import { BunContext, BunHttpServer } from "@effect/platform-bun"
import { expect, layer } from "@effect/vitest"
import { QueueViews, WorkerRegistry } from "@delivery/core"
import { EnvelopeInbox, EnvelopeInboxLive } from "@delivery/envelope-inbox"
import { Identity, OperatorCredentialLive, PasswordResets, PeerLimitLive } from "@delivery/identity"
import { ConnectorEventInbox } from "@delivery/idle-wake"
import { Outbox } from "@delivery/outbox"
import { Receipts } from "@delivery/receipts"
import { TeamApplications } from "@delivery/team-applications"
import { KeyId, KeySource, RawPublicKey, rawPublicKey, Signer, TenantId } from "@delivery/signer"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, type Context, Effect, Layer } from "effect"
import { generateKeyPairSync, randomBytes } from "node:crypto"
import { ConsoleRoutesLive, ConsoleSessions } from "../src/index.ts"

// The inbound-stream and signing-key sections through a real server, real services and a throwaway PostgreSQL:
// what the pages show, and that each action goes through the service with the console's actor and its audit row.

const OPERATOR_TOKEN = `op-${randomBytes(32).toString("base64url")}`

// The console builds every family's pages at start-up; nothing here reaches the ones of the other suites.
const notInSuite = <I, S>(tag: Context.Tag<I, S>, name: string) =>
  Layer.succeed(tag, new Proxy({}, { get: (_, member) => { throw new Error(`${name}.${String(member)} is not part of this suite`) } }) as S)
const NoOutbox = notInSuite(Outbox, "Outbox")
const NoOtherFamilies = Layer.mergeAll(
  notInSuite(Receipts, "Receipts"),
  notInSuite(TeamApplications, "TeamApplications"),
  notInSuite(ConnectorEventInbox, "ConnectorEventInbox"),
  // The reset-mail pages build their own ResetRequests, which keeps a reference to this service.
  PasswordResets.Default
)

const ServicesLive = Layer.mergeAll(
  ConsoleSessions.Default,
  EnvelopeInboxLive,
  Identity.Default,
  OperatorCredentialLive,
  PeerLimitLive,
  WorkerRegistry.Default,
  Layer.succeed(QueueViews, []),
  NoOutbox,
  NoOtherFamilies,
  BunContext.layer
).pipe(
  Layer.provideMerge(Signer.Default),
  Layer.provide(KeySource.layerNone),
  Layer.provideMerge(TestDatabaseLive),
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["OPERATOR_TOKEN", OPERATOR_TOKEN]]))))
)

const SuiteLive = HttpApiBuilder.serve().pipe(
  Layer.provide(ConsoleRoutesLive),
  Layer.provide(HttpApiBuilder.api(HttpApi.make("console-test"))),
  Layer.provideMerge(BunHttpServer.layerTest),
  Layer.provideMerge(ServicesLive)
)

interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly body: string
}

/** A browser of its own: its session cookie, no redirects followed. */
const browser = Effect.gen(function* () {
  const server = yield* HttpServer.HttpServer
  const address = server.address as HttpServer.TcpAddress
  const base = `http://127.0.0.1:${address.port}`
  let cookie: string | undefined
  const request = (method: "GET" | "POST", path: string, form?: Record<string, string>) =>
    Effect.promise(async (): Promise<Answer> => {
      const headers: Record<string, string> = { connection: "close" }
      if (cookie !== undefined) headers.cookie = cookie
      if (form !== undefined) headers["content-type"] = "application/x-www-form-urlencoded"
      const response = await fetch(`${base}${path}`, {
        method,
        headers,
        redirect: "manual",
        ...(form === undefined ? {} : { body: new URLSearchParams(form).toString() })
      })
      const set = response.headers.get("set-cookie")
      if (set !== null) cookie = set.split(";")[0]
      return { status: response.status, headers: response.headers, body: await response.text() }
    })
  const signIn = yield* request("POST", "/console/sign-in", { token: OPERATOR_TOKEN })
  expect(signIn.status).toBe(303)
  const overview = yield* request("GET", "/console/overview")
  const csrf = /name="csrf" value="([^"]+)"/.exec(overview.body)![1]!
  return {
    get: (path: string) => request("GET", path),
    post: (path: string, form: Record<string, string> = {}) => request("POST", path, { csrf, ...form }),
    postWithoutCsrf: (path: string, form: Record<string, string>) => request("POST", path, form)
  }
})

const refusalOf = (answer: Answer) => [answer.status, answer.headers.get("x-console-refusal")]

const tenant = (prefix: string) =>
  Effect.gen(function* () {
    const id = TenantId.make(`${prefix}-${randomBytes(4).toString("hex")}`)
    yield* (yield* Identity).createTenant(id)
    return id
  })

/** The producers of a list page, in the order shown. */
const producersShown = (page: string) => [...page.matchAll(/data-producer="([^"]+)"/g)].map((m) => m[1])

layer(SuiteLive, { excludeTestServices: true })("console: inbound streams and signing keys", (it) => {
  it.effect("the streams list shows one tenant's streams by project and producer, a page at a time with a Next page link, and refreshes itself", () =>
    Effect.gen(function* () {
      const b = yield* browser
      const inbox = yield* EnvelopeInbox
      const t = yield* tenant("list")
      for (const [project, producer] of [["web", "b"], ["api", "z"], ["web", "a"]]) {
        yield* inbox.raiseReplayFloor({ tenant: t, project: project!, producer: producer! }, 2)
      }
      const empty = yield* b.get("/console/streams")
      expect([empty.status, empty.body.includes("Choose a tenant")]).toEqual([200, true])

      const first = yield* b.get(`/console/streams?tenant=${t}&limit=2`)
      expect(first.status).toBe(200)
      expect(producersShown(first.body)).toEqual(["z", "a"])
      expect(first.body).toContain(`hx-get="/console/streams/live?tenant=${t}&amp;limit=2"`)
      expect(first.body).toContain(`hx-trigger="every 5s"`)
      const next = /<a rel="next" href="([^"]+)"/.exec(first.body)![1]!.replaceAll("&amp;", "&")
      const second = yield* b.get(next)
      expect(producersShown(second.body)).toEqual(["b"])
      expect(second.body).not.toContain(`rel="next"`)

      const live = yield* b.get(`/console/streams/live?tenant=${t}&project=web`)
      expect(live.body.startsWith(`<section id="list"`)).toBe(true)
      expect(producersShown(live.body)).toEqual(["a", "b"])
      expect(live.body).toContain(`href="/console/streams/${t}/web/a"`)

      expect(refusalOf(yield* b.get("/console/streams?tenant=Not%20A%20Tenant"))).toEqual([400, "request-invalid"])
      expect(refusalOf(yield* b.get(`/console/streams?tenant=${t}&cursor=forged`))).toEqual([400, "cursor-invalid"])
    }))

  it.effect("raising a replay floor: a confirmation page, then the inbox's own call as operator:console with the request's correlation id, a 303 to the stream with a notice, and the audit row on the page", () =>
    Effect.gen(function* () {
      const b = yield* browser
      const inbox = yield* EnvelopeInbox
      const t = yield* tenant("floor")
      const key = { tenant: t, project: "web", producer: "laptop-7" }
      const path = `/console/streams/${t}/web/laptop-7`
      expect(refusalOf(yield* b.get(path))).toEqual([404, "stream-not-found"])

      const confirm = yield* b.get(`${path}/replay-floor`)
      expect(confirm.status).toBe(200)
      expect(confirm.body).toContain("never lowered")
      expect(confirm.body).toContain(`<form method="post" action="${path}/replay-floor">`)
      expect(confirm.body).toContain(`name="floor"`)

      const raised = yield* b.post(`${path}/replay-floor`, { floor: "7" })
      expect([raised.status, raised.headers.get("location")]).toEqual([303, `${path}?done=raise-floor&outcome=raised`])
      const correlationId = raised.headers.get("x-correlation-id")
      expect(correlationId).toMatch(/^[0-9a-f]{32}$/)
      const [row] = yield* inbox.streamAudit(key)
      expect({ ...row, at: undefined }).toEqual({
        action: "replay-floor-raise", outcome: "applied", floorBefore: 0, floorAfter: 7, requested: 7,
        actor: "operator:console", correlationId, at: undefined
      })

      const detail = yield* b.get(`${path}?done=raise-floor&outcome=raised`)
      expect(detail.body).toContain(`data-notice="raise-floor"`)
      expect(detail.body).toContain(`data-replay-floor="7"`)
      expect(detail.body).toContain(`data-cursor="7"`)
      expect(detail.body).toContain(`<code>${correlationId}</code>`)
      expect(detail.body).toContain(`hx-get="${path}/live"`)

      const lower = yield* b.post(`${path}/replay-floor`, { floor: "3" })
      expect(lower.headers.get("location")).toBe(`${path}?done=raise-floor&outcome=unchanged`)
      expect((yield* b.get(lower.headers.get("location")!)).body).toContain(`data-notice="raise-floor-unchanged"`)
      expect((yield* inbox.streamAudit(key)).map((entry) => [entry.outcome, entry.requested])).toEqual([["unchanged", 3], ["applied", 7]])

      // Refusals change nothing.
      expect(refusalOf(yield* b.postWithoutCsrf(`${path}/replay-floor`, { floor: "9" }))).toEqual([403, "csrf-token-invalid"])
      for (const floor of ["", "-1", "1e3", "1.5", "9007199254740992"]) {
        expect([floor, ...refusalOf(yield* b.post(`${path}/replay-floor`, { floor }))]).toEqual([floor, 400, "request-invalid"])
      }
      expect((yield* inbox.streamAudit(key)).length).toBe(2)
      const nobody = yield* b.post("/console/streams/no-such-tenant/web/laptop-7/replay-floor", { floor: "5" })
      expect(refusalOf(nobody)).toEqual([404, "tenant-not-found"])
      expect(nobody.body).toContain(`class="correlation-id"`)
      expect(yield* inbox.streamSummary({ ...key, tenant: "no-such-tenant" })).toMatchObject({ _tag: "None" })
    }))

  it.effect("signing keys: ids, states and times without key material, the audit trail, rotation and revocation through the signer as operator:console", () =>
    Effect.gen(function* () {
      const b = yield* browser
      const signer = yield* Signer
      const t = yield* tenant("keys")
      const k1 = rawPublicKey(generateKeyPairSync("ed25519").privateKey)
      const k2 = Buffer.from(rawPublicKey(generateKeyPairSync("ed25519").privateKey)).toString("base64url")
      yield* signer.registerKey(t, KeyId.make("k1"), RawPublicKey.make(k1))
      const listUrl = `/console/signing-keys?tenant=${t}`

      const page = yield* b.get(listUrl)
      expect(page.status).toBe(200)
      expect(page.body).toContain(`data-key-id="k1" data-state="active"`)
      expect(page.body).not.toContain(Buffer.from(k1).toString("base64url"))
      expect(page.body).toContain(`hx-get="/console/signing-keys/live?tenant=${t}"`)
      expect(page.body).toContain("system:signer")

      const form = yield* b.get(`/console/signing-keys/${t}/rotate`)
      expect(form.body).toContain(`<form method="post" action="/console/signing-keys/${t}/rotate">`)
      expect(form.body).toContain("<code>k1</code> is retired")
      expect(refusalOf(yield* b.post(`/console/signing-keys/${t}/rotate`, { keyId: "k2", publicKey: "too-short" }))).toEqual([400, "request-invalid"])
      expect(refusalOf(yield* b.postWithoutCsrf(`/console/signing-keys/${t}/rotate`, { keyId: "k2", publicKey: k2 }))).toEqual([403, "csrf-token-invalid"])
      expect((yield* signer.keys(t)).length).toBe(1)

      const rotated = yield* b.post(`/console/signing-keys/${t}/rotate`, { keyId: "k2", publicKey: k2 })
      expect([rotated.status, rotated.headers.get("location")]).toEqual([303, `${listUrl}&done=rotate&outcome=rotated`])
      const correlationId = rotated.headers.get("x-correlation-id")
      expect((yield* signer.keys(t)).map((k) => [k.keyId, k.state])).toEqual([["k1", "retired"], ["k2", "active"]])
      expect((yield* signer.keyAudit(t)).slice(0, 2).map((a) => [a.keyId, a.action, a.actor, a.correlationId])).toEqual([
        ["k2", "rotate", "operator:console", correlationId],
        ["k1", "retire", "operator:console", correlationId]
      ])
      const after = yield* b.get(rotated.headers.get("location")!)
      expect(after.body).toContain(`data-notice="rotated"`)
      expect(after.body).toContain(`data-key-id="k1" data-state="retired"`)
      expect(after.body).not.toContain(k2)

      // A retired key is never made active again.
      const back = yield* b.post(`/console/signing-keys/${t}/rotate`, { keyId: "k1", publicKey: Buffer.from(k1).toString("base64url") })
      expect(refusalOf(back)).toEqual([409, "key-conflict"])
      expect(back.body).toContain("key-not-active")

      const confirm = yield* b.get(`/console/signing-keys/${t}/k1/revoke`)
      expect(confirm.body).toContain(`<form method="post" action="/console/signing-keys/${t}/k1/revoke">`)
      const revoked = yield* b.post(`/console/signing-keys/${t}/k1/revoke`)
      expect(revoked.headers.get("location")).toBe(`${listUrl}&done=revoke&outcome=revoked`)
      const again = yield* b.post(`/console/signing-keys/${t}/k1/revoke`)
      expect(again.headers.get("location")).toBe(`${listUrl}&done=revoke&outcome=unchanged`)
      expect((yield* signer.keyAudit(t)).slice(0, 2).map((a) => [a.keyId, a.action, a.outcome, a.actor])).toEqual([
        ["k1", "revoke", "unchanged", "operator:console"],
        ["k1", "revoke", "applied", "operator:console"]
      ])
      expect(refusalOf(yield* b.post(`/console/signing-keys/${t}/k9/revoke`))).toEqual([404, "key-unknown"])
      expect(refusalOf(yield* b.get(`/console/signing-keys/${t}/k9/revoke`))).toEqual([404, "key-unknown"])

      const live = yield* b.get(`/console/signing-keys/live?tenant=${t}`)
      expect(live.body.startsWith(`<section id="keys"`)).toBe(true)
      expect(live.body).toContain(`data-key-id="k1" data-state="revoked"`)
    }))
})
