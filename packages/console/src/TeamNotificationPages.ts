import { DeliveryState, type NotificationItem, TeamApplications } from "@delivery/team-applications"
import { TenantId } from "@delivery/signer"
import { Effect, Option, Schema } from "effect"
import { pathParams, refuse } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime } from "./Layout.ts"
import { auditTable, detailPages, listPages, listQuery, listUrl, UUID } from "./ListPages.ts"

const PATH = "/console/team-notifications"

const NotificationPath = Schema.Struct({ tenant: TenantId, id: UUID })

const notificationPath = (n: { readonly tenant: string; readonly effectId: string }) =>
  `${PATH}/${encodeURIComponent(n.tenant)}/${n.effectId}`

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

  /** One tenant's team-application notifications, optionally in one delivery state, oldest first, by keyset. */
  const lists = listPages({
    title: "Team-application notifications",
    path: PATH,
    query: listQuery({ tenant: Schema.optional(TenantId), state: Schema.optional(DeliveryState) }),
    filters: [
      { name: "tenant", label: "Tenant", kind: "id", required: true },
      { name: "state", label: "State", kind: "select", options: DeliveryState.literals }
    ],
    scope: (query) => query.tenant,
    prompt: "Choose a tenant.",
    heading: (tenant) => `Team-application notifications · ${tenant}`,
    page: (tenant, query) => applications.notifications(tenant, query),
    rows: notificationRows
  })

  /** A notification's delivery state, attempts, codes and times, its application's notifications and audit rows. */
  const details = detailPages({
    title: "Team-application notification",
    current: PATH,
    read: Effect.gen(function* () {
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
    }),
    path: ({ notification }) => notificationPath(notification),
    heading: ({ notification }) => html`Notification <code>${notification.effectId}</code>`,
    section: ({ audit, notification: n, siblings, team }) => html`<dl>
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
${auditTable(audit)}`,
    footer: ({ notification }) => html`<p><a href="${listUrl(PATH, { tenant: notification.tenant })}">Back to the list</a></p>`
  })

  return { ...lists, ...details } as const
})
