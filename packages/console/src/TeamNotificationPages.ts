import { type ApplicationAuditEntry, DeliveryState, type NotificationItem, TeamApplications } from "@delivery/team-applications"
import { TenantId } from "@delivery/signer"
import { Effect, Option, Schema } from "effect"
import { htmlResponse, pathParams, queryParams, refuse, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime, layout } from "./Layout.ts"

const optionalOr = <A, I>(schema: Schema.Schema<A, I>) => Schema.optional(Schema.Union(schema, Schema.Literal("")))
const present = <A>(value: A | "" | undefined): A | undefined => (value === "" ? undefined : value)

const ListQuery = Schema.Struct({
  tenant: optionalOr(TenantId),
  state: optionalOr(DeliveryState),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(200))),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))
})

/** Notifications per page unless the address asks for 1..100. */
const PAGE_SIZE = 50

const NotificationPath = Schema.Struct({
  tenant: TenantId,
  id: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/))
})

const notificationPath = (n: { readonly tenant: string; readonly effectId: string }) =>
  `/console/team-notifications/${encodeURIComponent(n.tenant)}/${n.effectId}`

interface ListQuery {
  readonly tenant: string
  readonly state?: DeliveryState | undefined
  readonly cursor?: string | undefined
  readonly limit?: number | undefined
}

const listUrl = (query: ListQuery, live = false) => {
  const params = new URLSearchParams({ tenant: query.tenant })
  if (query.state !== undefined) params.set("state", query.state)
  if (query.limit !== undefined) params.set("limit", String(query.limit))
  if (query.cursor !== undefined) params.set("cursor", query.cursor)
  return `/console/team-notifications${live ? "/live" : ""}?${params}`
}

const filters = (query: { readonly tenant?: string | undefined; readonly state?: string | undefined }) =>
  html`<form class="filters" method="get" action="/console/team-notifications">
<label>Tenant <input name="tenant" value="${query.tenant ?? ""}" required pattern="[a-z0-9][a-z0-9_\\-]{0,63}"></label>
<label>State <select name="state"><option value="">any</option>${DeliveryState.literals.map((s) =>
  html`<option value="${s}"${s === query.state ? html` selected` : ""}>${s}</option>`)}</select></label>
<button type="submit">Show</button>
</form>`

// As team_application_delivery_state computes them: a failed notification waits for its retry, a processing one holds
// the queue's lease; pending ones are due as soon as a worker takes them.
const nextAttempt = (n: NotificationItem) => {
  if (n.state === "processing") return `lease until ${formatTime(n.leaseExpiresAt)}`
  if (n.state === "failed") return formatTime(n.nextAttemptAt)
  if (n.state === "pending") return "when a worker takes it"
  return "—"
}

const notificationRows = (items: ReadonlyArray<NotificationItem>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No notifications match.</p>`
    : html`<table class="items"><thead><tr><th>notification</th><th>application</th><th>audience</th><th>state</th><th class="num">attempts</th><th>next attempt</th><th>last code</th><th>created</th></tr></thead><tbody>
${items.map((n) => html`<tr data-id="${n.effectId}" data-state="${n.state}" data-application="${n.applicationId}"><td><a href="${notificationPath(n)}"><code>${n.effectId}</code></a></td><td><code>${n.applicationId}</code></td><td>${n.audience}</td><td class="state-${n.state}">${n.state}</td><td class="num">${n.attempts}</td><td>${nextAttempt(n)}</td><td>${n.lastError ?? "—"}</td><td>${formatTime(n.createdAt)}</td></tr>`)}
</tbody></table>`

const auditTable = (audit: ReadonlyArray<ApplicationAuditEntry>): Html =>
  audit.length === 0
    ? html`<p class="muted">No audit row.</p>`
    : html`<table class="audit"><thead><tr><th>at</th><th>action</th><th>actor</th><th>correlation id</th></tr></thead><tbody>
${audit.map((a) => html`<tr><td>${formatTime(a.at)}</td><td>${a.action}</td><td>${a.actor}</td><td><code>${a.correlationId}</code></td></tr>`)}
</tbody></table>`

interface Sibling {
  readonly effectId: string
  readonly audience: string
  readonly state: string
  readonly attempts: number
}

const siblingsTable = (tenant: string, current: string, notifications: ReadonlyArray<Sibling>): Html =>
  html`<table class="items"><thead><tr><th>audience</th><th>state</th><th class="num">attempts</th></tr></thead><tbody>
${notifications.map((n) => html`<tr data-audience="${n.audience}" data-state="${n.state}"><td>${n.effectId === current ? html`<strong>${n.audience}</strong>` : html`<a href="${notificationPath({ tenant, effectId: n.effectId })}">${n.audience}</a>`}</td><td class="state-${n.state}">${n.state}</td><td class="num">${n.attempts}</td></tr>`)}
</tbody></table>`

export const makeTeamNotificationPages = Effect.gen(function* () {
  const applications = yield* TeamApplications

  const listSection = (query: ListQuery & { readonly tenant: TenantId }) =>
    Effect.map(applications.notifications(query.tenant, { ...query, limit: query.limit ?? PAGE_SIZE }), (page) =>
      html`<section id="list" hx-get="${listUrl(query, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${notificationRows(page.items)}
<p class="pager">${query.cursor === undefined ? "" : html`<a href="${listUrl({ ...query, cursor: undefined })}">First page</a>`}${page.nextCursor === null ? "" : html`<a rel="next" href="${listUrl({ ...query, cursor: page.nextCursor })}">Next page</a>`}</p>
</section>`)

  const readQuery = Effect.map(queryParams(ListQuery), (q) => ({
    tenant: present(q.tenant),
    state: present(q.state),
    cursor: q.cursor,
    limit: q.limit
  }))

  /** One tenant's team-application notifications, optionally in one delivery state, oldest first, by keyset. */
  const list = signedInPage((viewer) =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const body = query.tenant === undefined
        ? html`<h1>Team-application notifications</h1>${filters(query)}<p class="muted">Choose a tenant.</p>`
        : html`<h1>Team-application notifications · ${query.tenant}</h1>${filters(query)}${yield* listSection({ ...query, tenant: query.tenant })}`
      return htmlResponse(layout({ title: "Team-application notifications", current: "/console/team-notifications", viewer, body }))
    }))

  const listLive = signedInPage(() =>
    Effect.gen(function* () {
      const query = yield* readQuery
      if (query.tenant === undefined) return htmlResponse(html``)
      return htmlResponse(yield* listSection({ ...query, tenant: query.tenant }))
    }))

  const readNotification = Effect.gen(function* () {
    const path = yield* pathParams(NotificationPath)
    const found = yield* applications.notification(path.tenant, path.id)
    if (Option.isNone(found)) return yield* refuse(404, "notification-not-found", "No such team-application notification")
    const application = yield* applications.state(path.tenant, found.value.applicationId)
    const audit = yield* applications.applicationAudit(path.tenant, found.value.applicationId)
    return {
      notification: found.value,
      team: Option.map(application, (a) => a.team),
      siblings: Option.match(application, { onNone: () => [], onSome: (a) => a.notifications }),
      audit
    }
  })

  const detailSection = (
    n: NotificationItem,
    team: Option.Option<string>,
    siblings: ReadonlyArray<Sibling>,
    audit: ReadonlyArray<ApplicationAuditEntry>
  ) =>
    html`<section id="detail" hx-get="${notificationPath(n)}/live" hx-trigger="every 5s" hx-swap="outerHTML">
<dl>
<dt>tenant / application</dt><dd>${n.tenant} / <code>${n.applicationId}</code></dd>
<dt>team</dt><dd>${Option.getOrElse(team, () => "—")}</dd>
<dt>audience</dt><dd data-audience="${n.audience}">${n.audience}</dd>
<dt>state</dt><dd class="state state-${n.state}" data-state="${n.state}">${n.state}</dd>
<dt>attempts</dt><dd data-attempts="${n.attempts}">${n.attempts} started, ${n.failures} failed</dd>
<dt>next attempt</dt><dd>${nextAttempt(n)}</dd>
<dt>last code</dt><dd data-last-error="${n.lastError ?? ""}">${n.lastError ?? "—"}</dd>
<dt>created</dt><dd>${formatTime(n.createdAt)}</dd>
<dt>outcome at</dt><dd>${formatTime(n.outcomeAt)}</dd>
</dl>
<p class="muted">The addresses, names, message and envelope stay in the outbox; the console never shows them.</p>
<h2>Notifications of the application</h2>
${siblingsTable(n.tenant, n.effectId, siblings)}
<h2>Audit trail</h2>
<p class="muted">The application's business audit, newest first (at most 100). Delivery writes none.</p>
${auditTable(audit)}
</section>`

  /** A notification's delivery state, attempts, codes and times, its application's notifications and audit rows. */
  const detail = signedInPage((viewer) =>
    Effect.map(readNotification, ({ audit, notification, siblings, team }) =>
      htmlResponse(layout({
        title: "Team-application notification",
        current: "/console/team-notifications",
        viewer,
        body: html`<h1>Notification <code>${notification.effectId}</code></h1>
${detailSection(notification, team, siblings, audit)}
<p><a href="${listUrl({ tenant: notification.tenant })}">Back to the list</a></p>`
      }))))

  const detailLive = signedInPage(() =>
    Effect.map(readNotification, ({ audit, notification, siblings, team }) => htmlResponse(detailSection(notification, team, siblings, audit))))

  return { list, listLive, detail, detailLive } as const
})
