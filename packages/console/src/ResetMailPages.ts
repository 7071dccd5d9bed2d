import { type ResetMailItem, ResetMailState, ResetRequests } from "@delivery/reset-mail"
import { TenantId } from "@delivery/signer"
import { Effect, Option, Schema } from "effect"
import { pathParams, refuse } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime } from "./Layout.ts"
import { detailPages, listPages, listQuery, listUrl, UUID } from "./ListPages.ts"

const PATH = "/console/reset-mail"

const MailPath = Schema.Struct({ tenant: TenantId, id: UUID })

const mailPath = (m: { readonly tenant: string; readonly id: string }) => `${PATH}/${encodeURIComponent(m.tenant)}/${m.id}`

// A sending row is never claimed again: the stale-claim rule quarantines it, since whether it reached the provider is
// unknown (docs/reset-mail.md).
const nextAttempt = (m: ResetMailItem) =>
  m.state === "pending" ? formatTime(m.nextAttemptAt) : m.state === "sending" ? `claimed at ${formatTime(m.claimedAt)}` : "—"

const code = (m: ResetMailItem) => m.reason ?? m.lastError ?? "—"

const mailRows = (items: ReadonlyArray<ResetMailItem>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No reset mail matches.</p>`
    : html`<table class="items"><thead><tr><th>row</th><th>state</th><th class="num">attempts</th><th>next attempt</th><th>code</th><th>created</th></tr></thead><tbody>
${items.map((m) => html`<tr data-id="${m.id}" data-state="${m.state}"><td><a href="${mailPath(m)}"><code>${m.id}</code></a></td><td class="state-${m.state}">${m.state}</td><td class="num">${m.attempt}</td><td>${nextAttempt(m)}</td><td>${code(m)}</td><td>${formatTime(m.createdAt)}</td></tr>`)}
</tbody></table>`

export const makeResetMailPages = Effect.gen(function* () {
  const requests = yield* ResetRequests

  /** One tenant's reset mail, optionally in one state, oldest first, a page at a time by keyset. */
  const lists = listPages({
    title: "Password-reset mail",
    path: PATH,
    query: listQuery({ tenant: Schema.optional(TenantId), state: Schema.optional(ResetMailState) }),
    filters: [
      { name: "tenant", label: "Tenant", kind: "id", required: true },
      { name: "state", label: "State", kind: "select", options: ResetMailState.literals }
    ],
    scope: (query) => query.tenant,
    prompt: "Choose a tenant.",
    heading: (tenant) => `Password-reset mail · ${tenant}`,
    page: (tenant, query) => requests.mails(tenant, query),
    rows: mailRows
  })

  /** A row's state, attempts, codes and times. */
  const details = detailPages({
    title: "Password-reset mail",
    current: PATH,
    read: Effect.gen(function* () {
      const path = yield* pathParams(MailPath)
      const found = yield* requests.mail(path.tenant, path.id)
      if (Option.isNone(found)) return yield* refuse(404, "reset-mail-not-found", "No such reset mail")
      return found.value
    }),
    path: mailPath,
    heading: (m) => html`Reset mail <code>${m.id}</code>`,
    section: (m) => html`<dl>
<dt>tenant</dt><dd>${m.tenant}</dd>
<dt>state</dt><dd class="state state-${m.state}" data-state="${m.state}">${m.state}</dd>
<dt>attempts</dt><dd data-attempt="${m.attempt}">${m.attempt}</dd>
<dt>next attempt</dt><dd>${nextAttempt(m)}</dd>
<dt>end reason</dt><dd data-reason="${m.reason ?? ""}">${m.reason ?? "—"}</dd>
<dt>last temporary failure</dt><dd data-last-error="${m.lastError ?? ""}">${m.lastError ?? "—"}</dd>
<dt>provider status</dt><dd>${m.providerStatus ?? "—"}</dd>
<dt>created</dt><dd>${formatTime(m.createdAt)}</dd>
<dt>last change</dt><dd>${formatTime(m.updatedAt)}</dd>
</dl>
<p class="muted">The address, the token and the mail are read live by each attempt and never stored with the row; the console never shows them. A rejected, quarantined or stopped reset is not sent again: the user's new request is the remedy. Reset mail keeps no audit trail of its own.</p>`,
    footer: (m) => html`<p><a href="${listUrl(PATH, { tenant: m.tenant })}">Back to the list</a></p>`
  })

  return { ...lists, ...details } as const
})
