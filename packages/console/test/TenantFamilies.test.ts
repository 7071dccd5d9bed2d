import { HttpApi, HttpApiBuilder, HttpServer } from "@effect/platform"
import { BunContext, BunHttpServer } from "@effect/platform-bun"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { QueueViews, WorkerRegistry } from "@delivery/core"
import { EnvelopeInbox } from "@delivery/envelope-inbox"
import { Email, Identity, OperatorCredentialLive, PasswordResets, PeerLimitLive, TenantId } from "@delivery/identity"
import { ConnectorEventInbox, DrainGate, IdleWakeSettingsTag } from "@delivery/idle-wake"
import { Outbox } from "@delivery/outbox"
import { Receipts } from "@delivery/receipts"
import { ResetMailRepo, ResetRequests } from "@delivery/reset-mail"
import { Signer } from "@delivery/signer"
import { TeamApplications, teamApplicationsLayer } from "@delivery/team-applications"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { ConfigProvider, type Context, DateTime, Duration, Effect, Layer, Option, Schema } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { ConsoleRoutesLive, ConsoleSessions } from "../src/index.ts"

// The pages of the four remaining tenant-side families (reset mail, receipt effects, team-application notifications,
// recorded connector events) through a real server, real services and a throwaway PostgreSQL: lists by keyset with
// their state filters and Next page links, details with their codes and audit rows, closed decoding of every address,
// and never an address, a name, a message or a payload that was seeded.

const OPERATOR_TOKEN = `op-${randomBytes(32).toString("base64url")}`
const RESET_TOKEN_KEY = randomBytes(32).toString("base64")
/** Seeded into every payload and contact the families store; no page may ever carry it. */
const MARKER = `marker${randomBytes(4).toString("hex")}`

const notInSuite = <I, S>(tag: Context.Tag<I, S>, name: string) =>
  Layer.succeed(tag, new Proxy({}, { get: (_, member) => { throw new Error(`${name}.${String(member)} is not part of this suite`) } }) as S)

const TeamApplicationsLive = teamApplicationsLayer({
  mode: "disabled",
  defaulted: false,
  sender: Option.some({ address: "teams@club.example", name: "Club" }),
  provider: Option.none(),
  timing: { staleMs: 5_000, pollInterval: Duration.millis(20), maxAttempts: 3, retryBase: Duration.millis(100), retryCap: Duration.millis(100) }
})

const ConnectorEventInboxLive = ConnectorEventInbox.Default.pipe(
  Layer.provide(DrainGate.Default),
  Layer.provide(Layer.succeed(IdleWakeSettingsTag, { tenant: Option.none(), ingress: [] }))
)

const FamiliesLive = Layer.mergeAll(
  Receipts.Default,
  TeamApplicationsLive,
  ConnectorEventInboxLive,
  ResetRequests.Default.pipe(Layer.provide(ResetMailRepo.Default))
).pipe(Layer.provideMerge(PasswordResets.Default))

// The overview's cards of these families, read from the same services.
const QueueViewsLive = Layer.effect(
  QueueViews,
  Effect.gen(function* () {
    return [
      (yield* ResetRequests).queueView,
      (yield* Receipts).queueView,
      (yield* TeamApplications).queueView,
      (yield* ConnectorEventInbox).queueView
    ]
  })
)

const ServicesLive = Layer.mergeAll(
  ConsoleSessions.Default,
  Identity.Default,
  OperatorCredentialLive,
  PeerLimitLive,
  WorkerRegistry.Default,
  notInSuite(Outbox, "Outbox"),
  notInSuite(EnvelopeInbox, "EnvelopeInbox"),
  notInSuite(Signer, "Signer"),
  BunContext.layer
).pipe(
  Layer.provideMerge(QueueViewsLive),
  Layer.provideMerge(FamiliesLive),
  Layer.provideMerge(TestDatabaseLive),
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([
    ["OPERATOR_TOKEN", OPERATOR_TOKEN],
    ["PASSWORD_RESET_TOKEN_KEY", RESET_TOKEN_KEY]
  ]))))
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
  // Every page this browser was shown, for the check that none carries a seeded contact or payload.
  const shown: Array<Answer> = []
  const get = (path: string) => Effect.tap(request("GET", path), (answer) => Effect.sync(() => shown.push(answer)))
  return { get, shown }
})
type Browser = Effect.Effect.Success<typeof browser>

const refusalOf = (answer: Answer) => [answer.status, answer.headers.get("x-console-refusal")]

/** The ids and states of a list page's rows, in the order shown. */
const rowsShown = (page: string) => [...page.matchAll(/<tr data-id="([^"]+)" data-state="([^"]+)"/g)].map((m) => [m[1]!, m[2]!])
const idsShown = (page: string) => rowsShown(page).map((row) => row[0]!)
const nextLink = (page: string) => /<a rel="next" href="([^"]+)"/.exec(page)?.[1]?.replaceAll("&amp;", "&")

/** Follows the Next page links from `path`: every id shown, and how many pages it took. */
const walk = (b: Browser, path: string) =>
  Effect.gen(function* () {
    const seen: Array<string> = []
    let next: string | undefined = path
    let pages = 0
    while (next !== undefined && pages < 10) {
      const page: Answer = yield* b.get(next)
      expect(page.status).toBe(200)
      seen.push(...idsShown(page.body))
      next = nextLink(page.body)
      pages++
    }
    return { seen, pages }
  })

const expectNothingSeeded = (b: Browser) => {
  expect(b.shown.length).toBeGreaterThan(0)
  for (const answer of b.shown) expect(answer.body).not.toContain(MARKER)
}

const freshTenant = (prefix: string) => TenantId.make(`${prefix}-${randomBytes(4).toString("hex")}`)

const badQueries = (b: Browser, path: string, extra: Record<string, string>) =>
  Effect.gen(function* () {
    for (const query of [
      { ...extra, state: "bogus" },
      { ...extra, limit: "0" },
      { ...extra, limit: "101" },
      { ...extra, limit: "ten" }
    ]) {
      expect([query, ...refusalOf(yield* b.get(`${path}?${new URLSearchParams(query)}`))]).toEqual([query, 400, "request-invalid"])
    }
  })

layer(SuiteLive, { excludeTestServices: true })("console: reset mail, receipt effects, team notifications and connector events", (it) => {
  it.effect("reset mail: one tenant's rows oldest first by keyset with Next page links, a state filter, a row's state and codes; never the address", () =>
    Effect.gen(function* () {
      const b = yield* browser
      const identity = yield* Identity
      const requests = yield* ResetRequests
      const sql = yield* SqlClient.SqlClient
      const tenant = freshTenant("mail")
      yield* identity.createTenant(tenant)
      const email = Schema.decodeSync(Email)(`${MARKER}.alice@example.com`)
      yield* identity.createAccount({ tenant, email })
      for (let i = 0; i < 3; i++) expect(yield* requests.request({ tenant, email })).toBe(true)
      const rows = (yield* requests.mails(tenant)).items.map((m) => m.id)
      expect(rows.length).toBe(3)
      yield* sql`UPDATE reset_mail_outbox SET state = 'quarantined', reason = 'provider-timeout', attempt = 1 WHERE id = ${rows[1]!}`

      expect((yield* b.get("/console/reset-mail")).body).toContain("Choose a tenant")
      const first = yield* b.get(`/console/reset-mail?tenant=${tenant}&limit=2`)
      expect(first.status).toBe(200)
      expect(rowsShown(first.body)).toEqual([[rows[0], "pending"], [rows[1], "quarantined"]])
      expect(first.body).toContain(`hx-get="/console/reset-mail/live?tenant=${tenant}&amp;limit=2" hx-trigger="every 5s" hx-swap="outerHTML"`)
      expect(first.body).toContain(`aria-current="page">Reset mail</a>`)
      expect(yield* walk(b, `/console/reset-mail?tenant=${tenant}&limit=2`)).toEqual({ seen: rows, pages: 2 })

      const quarantined = yield* b.get(`/console/reset-mail?tenant=${tenant}&state=quarantined`)
      expect(rowsShown(quarantined.body)).toEqual([[rows[1], "quarantined"]])
      expect(quarantined.body).toContain("provider-timeout")
      const live = yield* b.get(`/console/reset-mail/live?tenant=${tenant}&state=pending`)
      expect(live.body.startsWith(`<section id="list"`)).toBe(true)
      expect(idsShown(live.body)).toEqual([rows[0], rows[2]])

      const detail = yield* b.get(`/console/reset-mail/${tenant}/${rows[1]}`)
      expect(detail.status).toBe(200)
      expect(detail.body).toContain(`data-state="quarantined"`)
      expect(detail.body).toContain(`data-reason="provider-timeout"`)
      expect(detail.body).toContain(`data-attempt="1"`)
      expect(detail.body).toContain(`hx-get="/console/reset-mail/${tenant}/${rows[1]}/live"`)
      expect((yield* b.get(`/console/reset-mail/${tenant}/${rows[1]}/live`)).body.startsWith(`<section id="detail"`)).toBe(true)

      expect(refusalOf(yield* b.get(`/console/reset-mail/${freshTenant("other")}/${rows[1]}`))).toEqual([404, "reset-mail-not-found"])
      expect(refusalOf(yield* b.get(`/console/reset-mail/${tenant}/not-a-uuid`))).toEqual([400, "request-invalid"])
      expect(refusalOf(yield* b.get("/console/reset-mail?tenant=Not%20A%20Tenant"))).toEqual([400, "request-invalid"])
      yield* badQueries(b, "/console/reset-mail", { tenant })
      expect(refusalOf(yield* b.get(`/console/reset-mail?tenant=${tenant}&cursor=forged`))).toEqual([400, "cursor-invalid"])
      expectNothingSeeded(b)
    }))

  it.effect("receipt effects: one tenant's effects oldest receipt first by keyset, a state filter, an effect's kind, attempts, codes, its receipt's effects and audit row; never the payer or the reference", () =>
    Effect.gen(function* () {
      const b = yield* browser
      const receipts = yield* Receipts
      const sql = yield* SqlClient.SqlClient
      const tenant = freshTenant("rcpt")
      const correlationId = randomBytes(16).toString("hex")
      const recorded: Array<string> = []
      for (let i = 0; i < 3; i++) {
        const { response } = yield* receipts.record({
          commandId: `cmd-${randomBytes(6).toString("hex")}`,
          reference: `INV-${MARKER}`,
          currency: "EUR",
          paidAt: DateTime.unsafeMake("2026-03-04T05:06:07Z") as DateTime.Utc,
          payer: { name: `Paula ${MARKER}`, email: `${MARKER}@payer.example` },
          lines: [{ description: `Widget ${MARKER}`, quantity: 2, unitMinor: 1250 }],
          attachments: []
        }, { tenant, account: "acct-1", actor: "api-key:k1", correlationId })
        recorded.push(response.effects[0]!.id)
        yield* sql`UPDATE receipt_effects SET created_at = '2026-05-01T00:00:00Z'::timestamptz + ${i} * interval '1 second'
                   WHERE id = ${response.effects[0]!.id}`
      }
      yield* sql`UPDATE receipt_effects SET attempt = 2, last_error = 'provider-5xx' WHERE id = ${recorded[0]!}`
      yield* sql`UPDATE receipt_effects SET state = 'done', attempt = 1, completed_at = now() WHERE id = ${recorded[2]!}`

      expect((yield* b.get("/console/receipt-effects")).body).toContain("Choose a tenant")
      const first = yield* b.get(`/console/receipt-effects?tenant=${tenant}&limit=2`)
      expect(rowsShown(first.body)).toEqual([[recorded[0], "pending"], [recorded[1], "pending"]])
      expect(first.body).toContain(`hx-get="/console/receipt-effects/live?tenant=${tenant}&amp;limit=2" hx-trigger="every 5s" hx-swap="outerHTML"`)
      expect(yield* walk(b, `/console/receipt-effects?tenant=${tenant}&limit=2`)).toEqual({ seen: recorded, pages: 2 })
      expect(rowsShown((yield* b.get(`/console/receipt-effects?tenant=${tenant}&state=done`)).body)).toEqual([[recorded[2], "done"]])
      expect(idsShown((yield* b.get(`/console/receipt-effects/live?tenant=${tenant}&state=pending`)).body)).toEqual([recorded[0], recorded[1]])

      const path = `/console/receipt-effects/${tenant}/${recorded[0]}`
      const detail = yield* b.get(path)
      expect(detail.status).toBe(200)
      expect(detail.body).toContain(`data-kind="notify"`)
      expect(detail.body).toContain(`data-state="pending"`)
      expect(detail.body).toContain(`data-attempt="2"`)
      expect(detail.body).toContain(`data-last-error="provider-5xx"`)
      expect(detail.body).toContain(`<tr data-seq="1" data-state="pending">`)
      expect(detail.body).toContain("receipt-recorded")
      expect(detail.body).toContain("api-key:k1")
      expect(detail.body).toContain(`<code>${correlationId}</code>`)
      expect(detail.body).toContain(`hx-get="${path}/live"`)
      expect((yield* b.get(`${path}/live`)).body.startsWith(`<section id="detail"`)).toBe(true)

      expect(refusalOf(yield* b.get(`/console/receipt-effects/${freshTenant("other")}/${recorded[0]}`))).toEqual([404, "receipt-effect-not-found"])
      expect(refusalOf(yield* b.get(`/console/receipt-effects/${tenant}/${randomUUID().toUpperCase()}`))).toEqual([400, "request-invalid"])
      yield* badQueries(b, "/console/receipt-effects", { tenant })
      expect(refusalOf(yield* b.get(`/console/receipt-effects?tenant=${tenant}&cursor=forged`))).toEqual([400, "cursor-invalid"])
      expectNothingSeeded(b)
    }))

  it.effect("team notifications: one tenant's notifications oldest first by keyset, a delivery-state filter, a notification's state, attempts, codes, its application's notifications and audit row; never an address, a name or the message", () =>
    Effect.gen(function* () {
      const b = yield* browser
      const applications = yield* TeamApplications
      const sql = yield* SqlClient.SqlClient
      const tenant = freshTenant("team")
      const correlationId = randomBytes(16).toString("hex")
      const submitted: Array<{ readonly id: string; readonly effects: ReadonlyArray<string> }> = []
      for (let i = 0; i < 2; i++) {
        const { response } = yield* applications.submit({
          commandId: `cmd-${randomBytes(6).toString("hex")}`,
          team: { slug: "rowing", name: `Rowing ${MARKER}`, email: `board.${MARKER}@rowing.example` },
          applicant: { name: `Alex ${MARKER}`, email: `alex.${MARKER}@applicant.example` },
          message: `I row on weekends ${MARKER}.`
        }, { tenant, account: "acct-1", actor: "api-key:k1", correlationId })
        yield* sql`UPDATE team_application_outbox SET created_at = '2026-05-01T00:00:00Z'::timestamptz + ${i} * interval '1 second'
                   WHERE application_id = ${response.application.id}::uuid`
        submitted.push({ id: response.application.id, effects: response.notifications.map((n) => n.effectId).sort() })
      }
      const all = submitted.flatMap((s) => s.effects)
      const failed = all[1]!
      yield* sql`UPDATE effect_queue SET attempts = 1, last_failure = 'provider-5xx', available_at = now() + interval '1 minute' WHERE id = ${failed}`
      yield* sql`UPDATE team_application_outbox SET failures = 1, last_error = 'provider-5xx' WHERE effect_id = ${failed}::uuid`

      expect((yield* b.get("/console/team-notifications")).body).toContain("Choose a tenant")
      const first = yield* b.get(`/console/team-notifications?tenant=${tenant}&limit=3`)
      expect(rowsShown(first.body)).toEqual([[all[0], "pending"], [all[1], "failed"], [all[2], "pending"]])
      expect(first.body).toContain(`hx-get="/console/team-notifications/live?tenant=${tenant}&amp;limit=3" hx-trigger="every 5s" hx-swap="outerHTML"`)
      expect(yield* walk(b, `/console/team-notifications?tenant=${tenant}&limit=3`)).toEqual({ seen: all, pages: 2 })
      expect(rowsShown((yield* b.get(`/console/team-notifications?tenant=${tenant}&state=failed`)).body)).toEqual([[failed, "failed"]])
      expect(idsShown((yield* b.get(`/console/team-notifications/live?tenant=${tenant}&state=pending`)).body)).toEqual([all[0], all[2], all[3]])

      const path = `/console/team-notifications/${tenant}/${failed}`
      const detail = yield* b.get(path)
      expect(detail.status).toBe(200)
      expect(detail.body).toContain(`data-state="failed"`)
      expect(detail.body).toContain(`data-attempts="1"`)
      expect(detail.body).toContain(`data-last-error="provider-5xx"`)
      expect(detail.body).toContain("rowing")
      expect(detail.body).toContain(`<tr data-audience="applicant"`)
      expect(detail.body).toContain(`<tr data-audience="team"`)
      expect(detail.body).toContain("application-submitted")
      expect(detail.body).toContain(`<code>${correlationId}</code>`)
      expect((yield* b.get(`${path}/live`)).body.startsWith(`<section id="detail"`)).toBe(true)

      expect(refusalOf(yield* b.get(`/console/team-notifications/${freshTenant("other")}/${failed}`))).toEqual([404, "notification-not-found"])
      expect(refusalOf(yield* b.get(`/console/team-notifications/${tenant}/12345`))).toEqual([400, "request-invalid"])
      yield* badQueries(b, "/console/team-notifications", { tenant })
      expect(refusalOf(yield* b.get(`/console/team-notifications?tenant=${tenant}&cursor=forged`))).toEqual([400, "cursor-invalid"])
      expectNothingSeeded(b)
    }))

  it.effect("connector events: the events the stack recorded newest first by keyset, filtered by connector instance and event name, an event's ids, attempt and time; never the payload", () =>
    Effect.gen(function* () {
      const b = yield* browser
      const sql = yield* SqlClient.SqlClient
      const connector = `conn-${randomBytes(4).toString("hex")}`
      const ids: Array<string> = []
      for (const [i, event] of [[0, "issues"], [1, "push"], [2, "issues"]] as const) {
        const id = randomUUID()
        ids.push(id)
        yield* sql`
          INSERT INTO idle_wake_connector_events
            (event_id, delivery_id, connector_instance, endpoint_id, event, payload, cloud_attempt, received_at)
          VALUES (${id}, ${`d-${randomBytes(6).toString("hex")}`}, ${connector}, 'endpoint-1', ${event},
                  ${Buffer.from(`{"marker":"${MARKER}"}`)}, 3, '2026-05-01T00:00:00Z'::timestamptz + ${i} * interval '1 second')`
      }
      const newestFirst = [...ids].reverse()

      const first = yield* b.get(`/console/connector-events?connector=${connector}&limit=2`)
      expect(first.status).toBe(200)
      expect(rowsShown(first.body)).toEqual([[newestFirst[0], "recorded"], [newestFirst[1], "recorded"]])
      expect(first.body).toContain(`hx-get="/console/connector-events/live?connector=${connector}&amp;limit=2" hx-trigger="every 5s" hx-swap="outerHTML"`)
      expect(yield* walk(b, `/console/connector-events?connector=${connector}&limit=2`)).toEqual({ seen: newestFirst, pages: 2 })
      expect(idsShown((yield* b.get(`/console/connector-events?connector=${connector}&event=issues`)).body)).toEqual([ids[2], ids[0]])
      expect(idsShown((yield* b.get(`/console/connector-events/live?connector=${connector}&event=push`)).body)).toEqual([ids[1]])
      expect((yield* b.get("/console/connector-events")).body).toContain(`data-id="${ids[2]}"`)

      const detail = yield* b.get(`/console/connector-events/${ids[1]}`)
      expect(detail.status).toBe(200)
      expect(detail.body).toContain(`data-state="recorded"`)
      expect(detail.body).toContain(`data-connector="${connector}"`)
      expect(detail.body).toContain(`data-attempt="3"`)
      expect(detail.body).toContain("push")
      expect((yield* b.get(`/console/connector-events/${ids[1]}/live`)).body.startsWith(`<section id="detail"`)).toBe(true)

      expect(refusalOf(yield* b.get(`/console/connector-events/${randomUUID()}`))).toEqual([404, "event-not-found"])
      expect(refusalOf(yield* b.get("/console/connector-events/not-an-id"))).toEqual([400, "request-invalid"])
      for (const query of ["connector=Not%20An%20Id", "event=Push", "limit=0", "limit=101", "limit=ten"]) {
        expect([query, ...refusalOf(yield* b.get(`/console/connector-events?${query}`))]).toEqual([query, 400, "request-invalid"])
      }
      expect(refusalOf(yield* b.get(`/console/connector-events?cursor=forged`))).toEqual([400, "cursor-invalid"])
      expectNothingSeeded(b)
    }))

  it.effect("the navigation lists the four sections and the overview links each family's card to its list", () =>
    Effect.gen(function* () {
      const b = yield* browser
      const overview = yield* b.get("/console/overview")
      for (const [path, title] of [
        ["/console/reset-mail", "Reset mail"],
        ["/console/receipt-effects", "Receipt effects"],
        ["/console/team-notifications", "Team notifications"],
        ["/console/connector-events", "Connector events"]
      ]) {
        expect(overview.body).toContain(`<a href="${path}">${title}</a>`)
      }
      for (const [family, path, title] of [
        ["reset-mail", "/console/reset-mail", "Password-reset mail"],
        ["receipt-effects", "/console/receipt-effects", "Receipt effects"],
        ["team-applications", "/console/team-notifications", "Team-application notifications"],
        ["connector-events", "/console/connector-events", "Connector events"]
      ]) {
        expect(overview.body).toMatch(new RegExp(`<article class="family" data-family="${family}">\\s*<h2><a href="${path}">${title}</a></h2>`))
      }
    }))
})
