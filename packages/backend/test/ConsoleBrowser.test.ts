import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Identity } from "@delivery/identity"
import { LoopbackProvider, LoopbackReply, OPERATOR_TOKEN, startBackend } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { browser, type BrowserPage, inPage, newPage } from "./support/Browser.ts"
import { eventually, outboxTenant, signingKey } from "./support/Console.ts"

// The operator console in a real browser (Debian's Chromium driven by playwright-core) against the real backend
// process and real deliveries: what an operator sees and clicks. A failed test leaves a screenshot in test-artifacts/.

const TENANT = `web-${randomBytes(3).toString("hex")}`
const key = signingKey()
const marker = `payload-marker-${randomBytes(4).toString("hex")}`

class World extends Context.Tag("ConsoleBrowser.test/World")<World, {
  readonly baseUrl: string
  readonly enqueue: (sequence: number, marker: string) => Effect.Effect<string>
  readonly browser: Effect.Effect.Success<typeof browser>
}>() {}

const SuiteLayer = Layer.scoped(
  World,
  Effect.gen(function* () {
    const { baseUrl } = yield* startBackend({ SIGNER_KEYS: `${TENANT}:k1:${key.seed}`, OUTBOX_POLL_INTERVAL: "100 millis" })
    const receiver = yield* LoopbackProvider
    const world = yield* outboxTenant(baseUrl, TENANT, key, receiver.urlFor("/hooks/browser"))
    return { baseUrl, enqueue: world.enqueue, browser: yield* browser }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Identity.Default, LoopbackProvider.Default)),
  Layer.provideMerge(TestDatabaseLive)
)

/** Signs in through the form, as an operator does. */
const signIn = (baseUrl: string, { page }: BrowserPage) =>
  inPage(async () => {
    await page.goto(`${baseUrl}/console`)
    await page.waitForURL(/\/console\/sign-in$/)
    await page.fill("input[name=token]", OPERATOR_TOKEN)
    await page.click("button[type=submit]")
    await page.waitForURL(/\/console\/overview$/)
  })

const shownCount = (page: BrowserPage["page"], family: string, state: string) =>
  inPage(async () => Number(await page.locator(`article[data-family="${family}"] tr[data-state="${state}"] td.count`).innerText()))

const outboxCounts = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ state: string; n: number }>`SELECT state, count(*)::int AS n FROM outbox_messages GROUP BY state`.withoutTransform)

/** Nothing a page shows may carry a payload, the operator token, a key seed or the receiver's address. */
const expectNoSecrets = (html: string, receiverUrl: string) => {
  for (const secret of [marker, OPERATOR_TOKEN, key.seed, receiverUrl]) expect(html).not.toContain(secret)
}

layer(SuiteLayer, { excludeTestServices: true, timeout: 120_000 })("the operator console in a real browser", (it) => {
  it.scoped("sign-in through the form; the overview's counts match the database and refresh by themselves without a reload; the page runs under its Content-Security-Policy without a violation and never contains a payload or token", () =>
    Effect.gen(function* () {
      const { baseUrl, browser: b, enqueue } = yield* World
      const receiver = yield* LoopbackProvider
      const tab = yield* newPage(b, "console-overview")
      yield* enqueue(1, marker)
      yield* signIn(baseUrl, tab)
      const counts = yield* outboxCounts
      const total = counts.reduce((sum, row) => sum + row.n, 0)
      expect(total).toBeGreaterThan(0)
      for (const state of ["pending", "delivering", "delivered", "dead"]) {
        expect(yield* shownCount(tab.page, "outbox", state), state).toBe(counts.find((row) => row.state === state)?.n ?? 0)
      }
      // The cookie is HttpOnly: the page's own scripts cannot read it.
      expect(yield* inPage(() => tab.page.evaluate("document.cookie"))).toBe("")

      // New work shows up on its own: htmx replaces the section, the page is not navigated again.
      const navigations = tab.navigations()
      const before = (yield* outboxCounts).find((row) => row.state === "delivered")?.n ?? 0
      for (let sequence = 2; sequence < 5; sequence++) yield* enqueue(sequence, marker)
      yield* eventually(outboxCounts, (rows) => (rows.find((row) => row.state === "delivered")?.n ?? 0) >= before + 3)
      const after = (yield* outboxCounts).find((row) => row.state === "delivered")!.n
      yield* inPage(() => tab.page.locator(`article[data-family="outbox"] tr[data-state="delivered"] td.count`).filter({ hasText: String(after) }).waitFor({ timeout: 15_000 }))
      expect(tab.navigations()).toBe(navigations)
      expect(tab.consoleErrors).toEqual([])
      expectNoSecrets(yield* inPage(() => tab.page.content()), receiver.urlFor("/hooks/browser"))
    }))

  it.scoped("the outbox list pages by keyset through its Next page link, every message once in order, and a message's page never contains its payload", () =>
    Effect.gen(function* () {
      const { baseUrl, browser: b, enqueue } = yield* World
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* LoopbackProvider
      for (let sequence = 10; sequence < 15; sequence++) yield* enqueue(sequence, marker)
      const expected = (yield* sql<{ id: string }>`
        SELECT id FROM outbox_messages WHERE tenant = ${TENANT} AND project = 'web' ORDER BY created_at, id`.withoutTransform).map((row) => row.id)
      const tab = yield* newPage(b, "console-paging")
      yield* signIn(baseUrl, tab)
      yield* inPage(() => tab.page.click("nav a[href='/console/outbox']"))
      yield* inPage(async () => {
        await tab.page.fill("input[name=tenant]", TENANT)
        await tab.page.fill("input[name=project]", "web")
        await tab.page.click("form.filters button[type=submit]")
        await tab.page.waitForSelector("#list")
      })
      // Two to a page from here on: the address takes the size as the filters' form does not show it.
      yield* inPage(() => tab.page.goto(`${tab.page.url()}&limit=2`))
      const seen: Array<string> = []
      for (let pages = 0; pages < 10; pages++) {
        const ids = yield* inPage(() => tab.page.locator("#list tr[data-id]").evaluateAll((rows: Array<{ getAttribute(name: string): string | null }>) => rows.map((row) => row.getAttribute("data-id")!)))
        expect(ids.length).toBeLessThanOrEqual(2)
        seen.push(...ids)
        const next = tab.page.locator("#list a[rel=next]")
        if ((yield* inPage(() => next.count())) === 0) break
        yield* inPage(async () => {
          await next.click()
          await tab.page.waitForLoadState()
        })
      }
      expect(seen).toEqual(expected)
      yield* inPage(async () => {
        await tab.page.goto(`${baseUrl}/console/outbox?tenant=${TENANT}&project=web&limit=2`)
        await tab.page.click(`#list tr[data-id="${expected[0]}"] a`)
        await tab.page.waitForSelector("#detail")
      })
      expectNoSecrets(yield* inPage(() => tab.page.content()), receiver.urlFor("/hooks/browser"))
      expect(tab.consoleErrors).toEqual([])
    }))

  it.scoped("a dead letter is redriven by clicks (detail, confirmation, Redrive): the page says so, the audit row names operator:console, and the message is delivered afterwards, shown without a reload", () =>
    Effect.gen(function* () {
      const { baseUrl, browser: b, enqueue } = yield* World
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* LoopbackProvider
      yield* receiver.script({ times: 1, reply: LoopbackReply.status(410) })
      const id = yield* enqueue(30, marker)
      const state = sql<{ state: string }>`SELECT state FROM outbox_messages WHERE id = ${id}`.withoutTransform
      yield* eventually(state, (rows) => rows[0]?.state === "dead")
      const tab = yield* newPage(b, "console-redrive")
      yield* signIn(baseUrl, tab)
      yield* inPage(async () => {
        await tab.page.goto(`${baseUrl}/console/outbox?tenant=${TENANT}&project=web&state=dead`)
        await tab.page.click(`#list tr[data-id="${id}"] a`)
        await tab.page.waitForSelector(`#detail [data-state="dead"]`)
        await tab.page.click("a.action")
        await tab.page.waitForSelector("button.danger")
        await tab.page.click("button.danger")
        await tab.page.waitForSelector(`[data-notice="redriven"]`)
      })
      expect(yield* sql<{ actor: string }>`SELECT actor FROM outbox_audit WHERE message_id = ${id}`.withoutTransform).toEqual([{ actor: "operator:console" }])
      const navigations = tab.navigations()
      yield* inPage(() => tab.page.waitForSelector(`#detail [data-state="delivered"]`, { timeout: 20_000 }))
      expect(tab.navigations()).toBe(navigations)
      expect(yield* state).toEqual([{ state: "delivered" }])
      expect(yield* inPage(() => tab.page.locator("#detail table.audit").innerText())).toContain("operator:console")
      expect(tab.consoleErrors).toEqual([])
    }))

  it.scoped("a POST without the CSRF token is refused: the form stripped of its token answers 403 csrf-token-invalid with a correlation id, and the dead letter stays dead", () =>
    Effect.gen(function* () {
      const { baseUrl, browser: b, enqueue } = yield* World
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* LoopbackProvider
      yield* receiver.script({ times: 1, reply: LoopbackReply.status(400) })
      const id = yield* enqueue(40, marker)
      const state = sql<{ state: string }>`SELECT state FROM outbox_messages WHERE id = ${id}`.withoutTransform
      yield* eventually(state, (rows) => rows[0]?.state === "dead")
      const tab = yield* newPage(b, "console-csrf")
      yield* signIn(baseUrl, tab)
      const status = yield* inPage(async () => {
        await tab.page.goto(`${baseUrl}/console/outbox/${TENANT}/web/${id}/redrive`)
        await tab.page.locator("form[action$='/redrive'] input[name=csrf]").evaluate((input: { remove(): void }) => input.remove())
        const [response] = await Promise.all([
          tab.page.waitForResponse((r) => r.request().method() === "POST"),
          tab.page.click("button.danger")
        ])
        await tab.page.waitForLoadState()
        return response.status()
      })
      expect(status).toBe(403)
      expect(yield* inPage(() => tab.page.locator("[data-reason]").getAttribute("data-reason"))).toBe("csrf-token-invalid")
      expect(yield* inPage(() => tab.page.locator("code.correlation-id").innerText())).toMatch(/^[0-9a-f]{32}$/)
      expect(yield* state).toEqual([{ state: "dead" }])
      expect(yield* sql`SELECT 1 FROM outbox_audit WHERE message_id = ${id}`.withoutTransform).toEqual([])
    }))
})
