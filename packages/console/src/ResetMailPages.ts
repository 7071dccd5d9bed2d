import { type ResetMailItem, ResetMailState, ResetRequests } from "@delivery/reset-mail"
import { TenantId } from "@delivery/signer"
import { Effect, Option, Schema } from "effect"
import { htmlResponse, pathParams, queryParams, refuse, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime, layout } from "./Layout.ts"

type State = typeof ResetMailState.Type

const optionalOr = <A, I>(schema: Schema.Schema<A, I>) => Schema.optional(Schema.Union(schema, Schema.Literal("")))
const present = <A>(value: A | "" | undefined): A | undefined => (value === "" ? undefined : value)

const ListQuery = Schema.Struct({
  tenant: optionalOr(TenantId),
  state: optionalOr(ResetMailState),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(200))),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))
})

/** Rows per page unless the address asks for 1..100. */
const PAGE_SIZE = 50

const MailPath = Schema.Struct({
  tenant: TenantId,
  id: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/))
})

const mailPath = (m: { readonly tenant: string; readonly id: string }) => `/console/reset-mail/${encodeURIComponent(m.tenant)}/${m.id}`

interface ListQuery {
  readonly tenant: string
  readonly state?: State | undefined
  readonly cursor?: string | undefined
  readonly limit?: number | undefined
}

const listUrl = (query: ListQuery, live = false) => {
  const params = new URLSearchParams({ tenant: query.tenant })
  if (query.state !== undefined) params.set("state", query.state)
  if (query.limit !== undefined) params.set("limit", String(query.limit))
  if (query.cursor !== undefined) params.set("cursor", query.cursor)
  return `/console/reset-mail${live ? "/live" : ""}?${params}`
}

const filters = (query: { readonly tenant?: string | undefined; readonly state?: string | undefined }) =>
  html`<form class="filters" method="get" action="/console/reset-mail">
<label>Tenant <input name="tenant" value="${query.tenant ?? ""}" required pattern="[a-z0-9][a-z0-9_\\-]{0,63}"></label>
<label>State <select name="state"><option value="">any</option>${ResetMailState.literals.map((s) =>
  html`<option value="${s}"${s === query.state ? html` selected` : ""}>${s}</option>`)}</select></label>
<button type="submit">Show</button>
</form>`

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

  const listSection = (query: ListQuery & { readonly tenant: TenantId }) =>
    Effect.map(requests.mails(query.tenant, { ...query, limit: query.limit ?? PAGE_SIZE }), (page) =>
      html`<section id="list" hx-get="${listUrl(query, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${mailRows(page.items)}
<p class="pager">${query.cursor === undefined ? "" : html`<a href="${listUrl({ ...query, cursor: undefined })}">First page</a>`}${page.nextCursor === null ? "" : html`<a rel="next" href="${listUrl({ ...query, cursor: page.nextCursor })}">Next page</a>`}</p>
</section>`)

  const readQuery = Effect.map(queryParams(ListQuery), (q) => ({
    tenant: present(q.tenant),
    state: present(q.state),
    cursor: q.cursor,
    limit: q.limit
  }))

  /** One tenant's reset mail, optionally in one state, oldest first, a page at a time by keyset. */
  const list = signedInPage((viewer) =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const body = query.tenant === undefined
        ? html`<h1>Password-reset mail</h1>${filters(query)}<p class="muted">Choose a tenant.</p>`
        : html`<h1>Password-reset mail · ${query.tenant}</h1>${filters(query)}${yield* listSection({ ...query, tenant: query.tenant })}`
      return htmlResponse(layout({ title: "Password-reset mail", current: "/console/reset-mail", viewer, body }))
    }))

  const listLive = signedInPage(() =>
    Effect.gen(function* () {
      const query = yield* readQuery
      if (query.tenant === undefined) return htmlResponse(html``)
      return htmlResponse(yield* listSection({ ...query, tenant: query.tenant }))
    }))

  const readMail = Effect.gen(function* () {
    const path = yield* pathParams(MailPath)
    const found = yield* requests.mail(path.tenant, path.id)
    if (Option.isNone(found)) return yield* refuse(404, "reset-mail-not-found", "No such reset mail")
    return found.value
  })

  const detailSection = (m: ResetMailItem) =>
    html`<section id="detail" hx-get="${mailPath(m)}/live" hx-trigger="every 5s" hx-swap="outerHTML">
<dl>
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
<p class="muted">The address, the token and the mail are read live by each attempt and never stored with the row; the console never shows them. A rejected, quarantined or stopped reset is not sent again: the user's new request is the remedy. Reset mail keeps no audit trail of its own.</p>
</section>`

  /** A row's state, attempts, codes and times. */
  const detail = signedInPage((viewer) =>
    Effect.map(readMail, (m) =>
      htmlResponse(layout({
        title: "Password-reset mail",
        current: "/console/reset-mail",
        viewer,
        body: html`<h1>Reset mail <code>${m.id}</code></h1>
${detailSection(m)}
<p><a href="${listUrl({ tenant: m.tenant })}">Back to the list</a></p>`
      }))))

  const detailLive = signedInPage(() => Effect.map(readMail, (m) => htmlResponse(detailSection(m))))

  return { list, listLive, detail, detailLive } as const
})
