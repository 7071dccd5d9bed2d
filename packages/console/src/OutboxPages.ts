import { type MessageId, MessageId as MessageIdSchema, MessageState, Outbox, type OutboxMessage } from "@delivery/outbox"
import { ProjectId, TenantId } from "@delivery/signer"
import { Effect, Schema } from "effect"
import { htmlResponse, pathParams, queryParams, redirect, signedInAction, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { csrfField, formatTime, layout } from "./Layout.ts"
import { CONSOLE_ACTOR } from "./SignIn.ts"

interface AuditEntry {
  readonly action: string
  readonly actor: string
  readonly attempt: number | null
  readonly detail: string | null
  readonly at: Date
}

const optionalOr = <A, I>(schema: Schema.Schema<A, I>) => Schema.optional(Schema.Union(schema, Schema.Literal("")))
const present = <A>(value: A | "" | undefined): A | undefined => (value === "" ? undefined : value)

const ListQuery = Schema.Struct({
  tenant: optionalOr(TenantId),
  project: optionalOr(ProjectId),
  state: optionalOr(MessageState),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(128))),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))
})

/** Rows per page unless the address asks for 1..100. */
const PAGE_SIZE = 50

const MessagePath = Schema.Struct({ tenant: TenantId, project: ProjectId, id: MessageIdSchema })

const messagePath = (m: { readonly tenant: string; readonly project: string; readonly id: string }) =>
  `/console/outbox/${encodeURIComponent(m.tenant)}/${encodeURIComponent(m.project)}/${m.id}`

interface ListQuery {
  readonly tenant: string
  readonly project: string
  readonly state?: string | undefined
  readonly cursor?: string | undefined
  readonly limit?: number | undefined
}

const listUrl = (query: ListQuery, live = false) => {
  const params = new URLSearchParams({ tenant: query.tenant, project: query.project })
  if (query.state !== undefined) params.set("state", query.state)
  if (query.limit !== undefined) params.set("limit", String(query.limit))
  if (query.cursor !== undefined) params.set("cursor", query.cursor)
  return `/console/outbox${live ? "/live" : ""}?${params}`
}

const filters = (query: { tenant?: string | undefined; project?: string | undefined; state?: string | undefined }) =>
  html`<form class="filters" method="get" action="/console/outbox">
<label>Tenant <input name="tenant" value="${query.tenant ?? ""}" required pattern="[a-z0-9][a-z0-9_\\-]{0,63}"></label>
<label>Project <input name="project" value="${query.project ?? ""}" required pattern="[a-z0-9][a-z0-9_\\-]{0,63}"></label>
<label>State <select name="state"><option value="">any</option>${MessageState.literals.map((s) =>
  html`<option value="${s}"${s === query.state ? html` selected` : ""}>${s}</option>`)}</select></label>
<button type="submit">Show</button>
</form>`

const nextAttempt = (m: OutboxMessage) => (m.state === "pending" ? formatTime(m.dueAt) : m.state === "delivering" ? `lease until ${formatTime(m.dueAt)}` : "—")

const messageRows = (items: ReadonlyArray<OutboxMessage>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No messages match.</p>`
    : html`<table class="items"><thead><tr><th>message</th><th>state</th><th class="num">attempts</th><th>next attempt</th><th>last code</th><th>created</th></tr></thead><tbody>
${items.map((m) => html`<tr data-id="${m.id}" data-state="${m.state}"><td><a href="${messagePath(m)}"><code>${m.id}</code></a></td><td class="state-${m.state}">${m.state}</td><td class="num">${m.attempt} / ${m.attemptCeiling}</td><td>${nextAttempt(m)}</td><td>${m.lastError ?? m.deadReason ?? "—"}</td><td>${formatTime(m.createdAt)}</td></tr>`)}
</tbody></table>`

export const makeOutboxPages = Effect.gen(function* () {
  const outbox = yield* Outbox

  const listSection = (query: ListQuery & { readonly tenant: TenantId; readonly project: ProjectId; readonly state?: MessageState | undefined }) =>
    Effect.map(outbox.messages(query.tenant, query.project, { ...query, limit: query.limit ?? PAGE_SIZE }), (page) =>
      html`<section id="list" hx-get="${listUrl(query, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${messageRows(page.items)}
<p class="pager">${query.cursor === undefined ? "" : html`<a href="${listUrl({ ...query, cursor: undefined })}">First page</a>`}${page.nextCursor === null ? "" : html`<a rel="next" href="${listUrl({ ...query, cursor: page.nextCursor })}">Next page</a>`}</p>
</section>`)

  const readQuery = Effect.map(queryParams(ListQuery), (q) => ({
    tenant: present(q.tenant),
    project: present(q.project),
    state: present(q.state),
    cursor: q.cursor,
    limit: q.limit
  }))

  /** The messages of one tenant/project, filtered by state, oldest first, 100 to a page by keyset. */
  const list = signedInPage((viewer) =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const body = query.tenant === undefined || query.project === undefined
        ? html`<h1>Outbox</h1>${filters(query)}<p class="muted">Choose a tenant and a project.</p>`
        : html`<h1>Outbox · ${query.tenant} / ${query.project}</h1>${filters(query)}${yield* listSection({ ...query, tenant: query.tenant, project: query.project })}`
      return htmlResponse(layout({ title: "Outbox", current: "/console/outbox", viewer, body }))
    }))

  const listLive = signedInPage(() =>
    Effect.gen(function* () {
      const query = yield* readQuery
      if (query.tenant === undefined || query.project === undefined) return htmlResponse(html``)
      return htmlResponse(yield* listSection({ ...query, tenant: query.tenant, project: query.project }))
    }))

  const detailSection = (m: OutboxMessage, audit: ReadonlyArray<AuditEntry>) =>
    html`<section id="detail" hx-get="${messagePath(m)}/live" hx-trigger="every 5s" hx-swap="outerHTML">
<dl>
<dt>tenant / project</dt><dd>${m.tenant} / ${m.project}</dd>
<dt>state</dt><dd class="state state-${m.state}" data-state="${m.state}">${m.state}</dd>
<dt>attempts</dt><dd>${m.attempt} made, ${m.attemptCeiling} allowed (${m.maxAttempts} per enqueue or redrive)</dd>
<dt>next attempt</dt><dd>${nextAttempt(m)}</dd>
<dt>last code</dt><dd>${m.lastError ?? "—"}</dd>
<dt>dead-letter reason</dt><dd>${m.deadReason ?? "—"}</dd>
<dt>idempotency key</dt><dd><code>${m.idempotencyKey}</code></dd>
<dt>created</dt><dd>${formatTime(m.createdAt)}</dd>
<dt>delivered</dt><dd>${formatTime(m.deliveredAt)}</dd>
<dt>dead since</dt><dd>${formatTime(m.deadAt)}</dd>
</dl>
<h2>Audit trail</h2>
${audit.length === 0 ? html`<p class="muted">No operator action yet.</p>` : html`<table class="audit"><thead><tr><th>at</th><th>action</th><th>actor</th><th class="num">attempt</th><th>code</th></tr></thead><tbody>
${audit.map((a) => html`<tr><td>${formatTime(a.at)}</td><td>${a.action}</td><td>${a.actor}</td><td class="num">${a.attempt ?? "—"}</td><td>${a.detail ?? "—"}</td></tr>`)}
</tbody></table>`}
${m.state === "dead" ? html`<p><a class="action" href="${messagePath(m)}/redrive">Redrive this dead letter…</a></p>` : ""}
</section>`

  const detailBody = (m: OutboxMessage, audit: ReadonlyArray<AuditEntry>, done: boolean) =>
    html`<h1>Message <code>${m.id}</code></h1>
${done ? html`<p class="notice" data-notice="redriven">Redriven: the message is pending again with new attempts.</p>` : ""}
${detailSection(m, audit)}
<p><a href="${listUrl({ tenant: m.tenant, project: m.project })}">Back to the list</a></p>`

  const readMessage = Effect.gen(function* () {
    const path = yield* pathParams(MessagePath)
    const message = yield* outbox.message(path.tenant, path.project, path.id as MessageId)
    const audit = yield* outbox.messageAudit(path.tenant, path.project, path.id as MessageId)
    return { path, message, audit }
  })

  /** A message's state, attempts, codes, next attempt and audit trail; never its envelope or the target's URL. */
  const detail = signedInPage((viewer) =>
    Effect.gen(function* () {
      const { message, audit } = yield* readMessage
      const done = (yield* queryParams(Schema.Struct({ done: Schema.optional(Schema.Literal("redrive")) }))).done !== undefined
      return htmlResponse(layout({ title: "Outbox message", current: "/console/outbox", viewer, body: detailBody(message, audit, done) }))
    }))

  const detailLive = signedInPage(() =>
    Effect.map(readMessage, ({ audit, message }) => htmlResponse(detailSection(message, audit))))

  /** The confirmation step: what redrive does, and the form that does it. */
  const confirmRedrive = signedInPage((viewer) =>
    Effect.gen(function* () {
      const { message } = yield* readMessage
      const body = html`<h1>Redrive dead letter <code>${message.id}</code>?</h1>
<p>The message becomes pending again with the same id, envelope and idempotency key; its attempt counter continues (now ${message.attempt}) and ${message.maxAttempts} more attempts are allowed. The redrive is recorded in the audit trail as <code>${CONSOLE_ACTOR}</code>.</p>
<form method="post" action="${messagePath(message)}/redrive">
${csrfField(viewer)}
<button type="submit" class="danger">Redrive</button> <a href="${messagePath(message)}">Cancel</a>
</form>`
      return htmlResponse(layout({ title: "Redrive", current: "/console/outbox", viewer, body }))
    }))

  /** Redrive through the same service call, transaction and audit row as `POST /operator/outbox/.../redrive`. */
  const redrive = signedInAction(Schema.Struct({}), () =>
    Effect.gen(function* () {
      const path = yield* pathParams(MessagePath)
      const message = yield* outbox.redrive(path.tenant, path.project, path.id as MessageId, CONSOLE_ACTOR)
      yield* Effect.logInfo("console action: outbox redrive").pipe(
        Effect.annotateLogs({ tenant: path.tenant, project: path.project, messageId: message.id, actor: CONSOLE_ACTOR })
      )
      return redirect(`${messagePath(message)}?done=redrive`)
    }))

  return { list, listLive, detail, detailLive, confirmRedrive, redrive } as const
})
