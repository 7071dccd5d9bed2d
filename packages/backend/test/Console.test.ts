import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Identity } from "@delivery/identity"
import { LoopbackProvider, LoopbackReply, OPERATOR_TOKEN, startBackend } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { type ConsoleAnswer, consoleClient, csrfOf, eventually, outboxTenant, overviewCount, signedIn, signingKey } from "./support/Console.ts"

// The operator console (docs/operations.md, "Console") through the real backend process: sign-in and the session
// cookie, the CSRF and same-site checks of every state-changing form, the security headers, and the outbox pages
// against real deliveries. The browser's own view is in ConsoleBrowser.test.ts.

const TENANT = `con-${randomBytes(3).toString("hex")}`
const key = signingKey()

class Backend extends Context.Tag("Console.test/Backend")<Backend, {
  readonly baseUrl: string
  readonly enqueue: (sequence: number, marker: string) => Effect.Effect<string>
}>() {}

// One backend for the file, with one tenant whose project `web` delivers to the loopback receiver.
const SuiteLayer = Layer.scoped(
  Backend,
  Effect.gen(function* () {
    const { baseUrl } = yield* startBackend({ SIGNER_KEYS: `${TENANT}:k1:${key.seed}`, OUTBOX_POLL_INTERVAL: "100 millis", TRUSTED_PROXY_HOPS: "1" })
    const receiver = yield* LoopbackProvider
    const world = yield* outboxTenant(baseUrl, TENANT, key, receiver.urlFor("/hooks/console"))
    return { baseUrl, enqueue: world.enqueue }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Identity.Default, LoopbackProvider.Default)),
  Layer.provideMerge(TestDatabaseLive)
)

const CSP = /default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'/

layer(SuiteLayer, { excludeTestServices: true })("the operator console in a real backend process", (it) => {
  it.scoped("sign-in exchanges the operator token once for a session cookie (HttpOnly, SameSite=Strict, Path=/console, Secure only over TLS); a wrong or missing token is refused with its reason and correlation id and sets no cookie; without a session pages redirect to sign-in and fragments answer 401", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const sql = yield* SqlClient.SqlClient
      const anonymous = consoleClient(baseUrl)

      const overview = yield* anonymous.get("/console/overview")
      expect(overview.status).toBe(303)
      expect(overview.headers.get("location")).toBe("/console/sign-in")
      const fragment = yield* anonymous.get("/console/overview/live", { "hx-request": "true" })
      expect(fragment.status).toBe(401)
      expect(fragment.headers.get("hx-redirect")).toBe("/console/sign-in")
      expect(fragment.headers.get("x-console-refusal")).toBe("session-missing")

      const form = yield* anonymous.get("/console/sign-in")
      expect(form.status).toBe(200)
      expect(form.headers.get("content-security-policy")).toMatch(CSP)
      expect(form.headers.get("x-frame-options")).toBe("DENY")
      expect(form.body).toContain(`name="token"`)

      const before = (yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM console_sessions`.withoutTransform)[0]!.n
      const wrong = yield* anonymous.post("/console/sign-in", { token: `${OPERATOR_TOKEN}x` })
      expect(wrong.status).toBe(401)
      expect(wrong.headers.get("set-cookie")).toBeNull()
      expect(wrong.body).toContain(`data-reason="unknown"`)
      expect(wrong.body).toContain(`<code class="correlation-id">${wrong.headers.get("x-correlation-id")}</code>`)
      expect(wrong.body).not.toContain(OPERATOR_TOKEN)
      expect((yield* anonymous.post("/console/sign-in", {})).status).toBe(400)
      expect((yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM console_sessions`.withoutTransform)[0]!.n).toBe(before)

      const { client, setCookie } = yield* signedIn(baseUrl)
      expect(setCookie).toMatch(/^console_session=[A-Za-z0-9_-]{43}; /)
      expect(setCookie).toMatch(/; HttpOnly/)
      expect(setCookie).toMatch(/; SameSite=Strict/)
      expect(setCookie).toMatch(/; Path=\/console/)
      expect(setCookie).toMatch(/; Expires=/)
      expect(setCookie).not.toMatch(/; Secure/)
      expect(setCookie).not.toContain(OPERATOR_TOKEN)
      const page = yield* client.get("/console/overview")
      expect(page.status).toBe(200)
      expect(page.headers.get("content-security-policy")).toMatch(CSP)
      expect(page.headers.get("cache-control")).toBe("no-store")
      // No inline script or style anywhere, so the policy never has to allow one.
      expect(page.body).not.toMatch(/<script(?![^>]*\bsrc=)/)
      expect(page.body).not.toMatch(/\sstyle=|<style/)

      // Behind the one trusted proxy that terminated TLS, the cookie is Secure.
      const tls = yield* consoleClient(baseUrl).post("/console/sign-in", { token: OPERATOR_TOKEN }, { "x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.9" })
      expect(tls.status).toBe(303)
      expect(tls.headers.get("set-cookie")).toMatch(/; Secure/)
    }))

  it.scoped("sign-in and every request that presents a session cookie spend the peer's identity budget (IDENTITY_PEER_LIMIT, shared with the bearer checks): past it the console answers 429 with Retry-After and its reason; requests without a cookie cost no lookup and are not counted", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* startBackend({ IDENTITY_PEER_LIMIT: "3", IDENTITY_PEER_WINDOW: "1 hour" })
      const { client } = yield* signedIn(baseUrl)
      const anonymous = consoleClient(baseUrl)
      for (let i = 0; i < 5; i++) expect((yield* anonymous.get("/console/overview")).status).toBe(303)
      expect((yield* client.get("/console/overview")).status).toBe(200)
      expect((yield* client.get("/console/overview/live", { "hx-request": "true" })).status).toBe(200)
      const limited = yield* client.get("/console/overview")
      expect(limited.status).toBe(429)
      expect(limited.headers.get("x-console-refusal")).toBe("rate-limited")
      expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0)
      // The budget is the bearer checks' too: the operator API refuses this peer now as well.
      const api = yield* Effect.promise(() => fetch(`${baseUrl}/operator/tenants`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } }))
      expect(api.status).toBe(429)
      expect((yield* consoleClient(baseUrl).post("/console/sign-in", { token: OPERATOR_TOKEN })).status).toBe(429)
    }))

  it.scoped("every state-changing form needs the session's CSRF token and the same site: a POST without it, with another session's, or from another origin is refused 403 with its reason and changes nothing; sign-out ends the session in the database", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* Backend
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* LoopbackProvider
      yield* receiver.reset
      yield* receiver.script({ times: 1, reply: LoopbackReply.status(400) })
      const { enqueue } = yield* Backend
      const id = yield* enqueue(1, "csrf-marker")
      const deadState = sql<{ state: string; attempt_ceiling: number }>`SELECT state, attempt_ceiling FROM outbox_messages WHERE id = ${id}`.withoutTransform
      yield* eventually(deadState, (rows) => rows[0]?.state === "dead")

      const { client } = yield* signedIn(baseUrl)
      const other = yield* signedIn(baseUrl)
      const redrivePath = `/console/outbox/${TENANT}/web/${id}/redrive`
      const confirm = yield* client.get(redrivePath)
      expect(confirm.status).toBe(200)
      const csrf = csrfOf(confirm.body)!
      expect(csrf).toMatch(/^[A-Za-z0-9_-]{43}$/)
      const otherCsrf = csrfOf((yield* other.client.get(redrivePath)).body)!

      const missing = yield* client.post(redrivePath, {})
      expect(missing.status).toBe(403)
      expect(missing.headers.get("x-console-refusal")).toBe("csrf-token-invalid")
      expect((yield* client.post(redrivePath, { csrf: otherCsrf })).headers.get("x-console-refusal")).toBe("csrf-token-invalid")
      const crossSite = yield* client.post(redrivePath, { csrf }, { origin: "https://evil.example" })
      expect(crossSite.status).toBe(403)
      expect(crossSite.headers.get("x-console-refusal")).toBe("cross-site-request")
      expect((yield* client.post(redrivePath, { csrf }, { "sec-fetch-site": "cross-site" })).headers.get("x-console-refusal")).toBe("cross-site-request")
      // No session at all: refused before the form is read.
      expect((yield* consoleClient(baseUrl).post(redrivePath, { csrf })).status).toBe(401)
      expect(yield* deadState).toEqual([{ state: "dead", attempt_ceiling: 1 }])
      expect(yield* sql`SELECT 1 FROM outbox_audit WHERE message_id = ${id}`.withoutTransform).toEqual([])

      // Signing out needs the token too; afterwards the old cookie signs nobody in.
      const cookie = client.cookie()
      expect((yield* client.post("/console/sign-out", {})).status).toBe(403)
      const out = yield* client.post("/console/sign-out", { csrf })
      expect(out.status).toBe(303)
      expect(out.headers.get("set-cookie")).toMatch(/^console_session=; Max-Age=0/)
      client.setCookie(cookie)
      expect((yield* client.get("/console/overview")).status).toBe(303)
      expect((yield* client.post(redrivePath, { csrf })).headers.get("x-console-refusal")).toBe("session-expired")
    }))

  it.scoped("outbox pages: the overview's counts match the database; the list pages by keyset (every message once, in order) and filters by state; a message's detail shows attempts, codes and audit trail, never the payload or the target; a confirmed redrive is audited as operator:console and the message is delivered afterwards", () =>
    Effect.gen(function* () {
      const { baseUrl, enqueue } = yield* Backend
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* LoopbackProvider
      yield* receiver.reset
      const marker = `payload-marker-${randomBytes(4).toString("hex")}`
      const delivered: Array<string> = []
      for (let sequence = 10; sequence < 15; sequence++) delivered.push(yield* enqueue(sequence, marker))
      const state = (id: string) => sql<{ state: string }>`SELECT state FROM outbox_messages WHERE id = ${id}`.withoutTransform
      for (const id of delivered) yield* eventually(state(id), (rows) => rows[0]?.state === "delivered")
      yield* receiver.script({ times: 1, reply: LoopbackReply.status(422) })
      const dead = yield* enqueue(20, marker)
      yield* eventually(state(dead), (rows) => rows[0]?.state === "dead")
      const { client } = yield* signedIn(baseUrl)

      const counts = yield* sql<{ state: string; n: number }>`SELECT state, count(*)::int AS n FROM outbox_messages GROUP BY state`.withoutTransform
      const overview = yield* client.get("/console/overview")
      for (const s of ["pending", "delivering", "delivered", "dead"]) {
        expect(overviewCount(overview.body, "outbox", s), s).toBe(counts.find((row) => row.state === s)?.n ?? 0)
      }
      expect(overview.body).toContain(`hx-get="/console/overview/live"`)

      // Keyset paging, two to a page: every delivered message exactly once, oldest first.
      const expected = (yield* sql<{ id: string }>`
        SELECT id FROM outbox_messages WHERE tenant = ${TENANT} AND project = 'web' AND state = 'delivered' ORDER BY created_at, id`.withoutTransform)
        .map((row) => row.id)
      const seen: Array<string> = []
      let next: string | undefined = `/console/outbox?tenant=${TENANT}&project=web&state=delivered&limit=2`
      let pages = 0
      while (next !== undefined && pages < 10) {
        const page: ConsoleAnswer = yield* client.get(next)
        expect(page.status).toBe(200)
        const rows = [...page.body.matchAll(/<tr data-id="([0-9a-f-]{36})" data-state="([a-z]+)">/g)]
        expect(rows.length).toBeLessThanOrEqual(2)
        expect(rows.every((row) => row[2] === "delivered")).toBe(true)
        seen.push(...rows.map((row) => row[1]!))
        next = /<a rel="next" href="([^"]+)"/.exec(page.body)?.[1]?.replaceAll("&amp;", "&")
        pages++
      }
      expect(seen).toEqual(expected)
      expect(pages).toBe(Math.ceil(expected.length / 2))
      const deadList = yield* client.get(`/console/outbox?tenant=${TENANT}&project=web&state=dead`)
      expect(deadList.body).toContain(`<tr data-id="${dead}" data-state="dead">`)
      expect(deadList.body).not.toContain(delivered[0]!)
      expect((yield* client.get(`/console/outbox?tenant=${TENANT}&project=web&state=lost`)).status).toBe(400)
      expect((yield* client.get(`/console/outbox?tenant=${TENANT}&project=web&cursor=bm90LWEtY3Vyc29y`)).headers.get("x-console-refusal")).toBe("cursor-invalid")

      const detailPath = `/console/outbox/${TENANT}/web/${dead}`
      const detail = yield* client.get(detailPath)
      expect(detail.status).toBe(200)
      expect(detail.body).toContain(`data-state="dead"`)
      expect(detail.body).toContain("1 made, 1 allowed")
      expect(detail.body).toContain("No operator action yet.")
      for (const secret of [marker, receiver.urlFor("/hooks/console"), OPERATOR_TOKEN, key.seed]) expect(detail.body).not.toContain(secret)
      expect(detail.body).not.toMatch(/signature/i)
      expect((yield* client.get(`/console/outbox/${TENANT}/web/00000000-0000-4000-8000-000000000000`)).headers.get("x-console-refusal")).toBe("message-not-found")
      expect((yield* client.get(`/console/outbox/${TENANT}/other/${dead}`)).headers.get("x-console-refusal")).toBe("message-not-found")

      const confirm = yield* client.get(`${detailPath}/redrive`)
      const redriven = yield* client.post(`${detailPath}/redrive`, { csrf: csrfOf(confirm.body)! })
      expect(redriven.status).toBe(303)
      expect(redriven.headers.get("location")).toBe(`${detailPath}?done=redrive`)
      const audit = yield* sql<{ action: string; actor: string; attempt: number }>`
        SELECT action, actor, attempt FROM outbox_audit WHERE message_id = ${dead}`.withoutTransform
      expect(audit).toEqual([{ action: "redrive", actor: "operator:console", attempt: 1 }])
      yield* eventually(state(dead), (rows) => rows[0]?.state === "delivered")
      const after = yield* client.get(detailPath)
      expect(after.body).toContain(`data-state="delivered"`)
      expect(after.body).toMatch(/<td>redrive<\/td><td>operator:console<\/td>/)
      // A second redrive of what is no longer dead is refused with the route's own reason.
      const again = yield* client.post(`${detailPath}/redrive`, { csrf: csrfOf(confirm.body)! })
      expect(again.status).toBe(409)
      expect(again.headers.get("x-console-refusal")).toBe("message-not-dead")
    }))
})
