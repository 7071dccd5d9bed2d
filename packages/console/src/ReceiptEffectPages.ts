import { EffectState, type ReceiptAuditEntry, type ReceiptEffectItem, Receipts } from "@delivery/receipts"
import { TenantId } from "@delivery/signer"
import { Effect, Option, Schema } from "effect"
import { htmlResponse, pathParams, queryParams, refuse, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime, layout } from "./Layout.ts"

type State = typeof EffectState.Type

const optionalOr = <A, I>(schema: Schema.Schema<A, I>) => Schema.optional(Schema.Union(schema, Schema.Literal("")))
const present = <A>(value: A | "" | undefined): A | undefined => (value === "" ? undefined : value)

const ListQuery = Schema.Struct({
  tenant: optionalOr(TenantId),
  state: optionalOr(EffectState),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(200))),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))
})

/** Effects per page unless the address asks for 1..100. */
const PAGE_SIZE = 50

const EffectPath = Schema.Struct({
  tenant: TenantId,
  id: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/))
})

const effectPath = (e: { readonly tenant: string; readonly id: string }) =>
  `/console/receipt-effects/${encodeURIComponent(e.tenant)}/${e.id}`

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
  return `/console/receipt-effects${live ? "/live" : ""}?${params}`
}

const filters = (query: { readonly tenant?: string | undefined; readonly state?: string | undefined }) =>
  html`<form class="filters" method="get" action="/console/receipt-effects">
<label>Tenant <input name="tenant" value="${query.tenant ?? ""}" required pattern="[a-z0-9][a-z0-9_\\-]{0,63}"></label>
<label>State <select name="state"><option value="">any</option>${EffectState.literals.map((s) =>
  html`<option value="${s}"${s === query.state ? html` selected` : ""}>${s}</option>`)}</select></label>
<button type="submit">Show</button>
</form>`

// A pending effect is claimed only once every earlier effect of its receipt is done; a running one holds a claim
// that goes back to pending when it is older than the stale-claim age.
const nextAttempt = (e: ReceiptEffectItem) => {
  if (e.state === "running") return `claimed at ${formatTime(e.claimedAt)}`
  if (e.state === "done") return "—"
  return e.waitingFor === null ? formatTime(e.nextAttemptAt) : `after effect ${e.waitingFor}, not before ${formatTime(e.nextAttemptAt)}`
}

const effectRows = (items: ReadonlyArray<ReceiptEffectItem>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No receipt effects match.</p>`
    : html`<table class="items"><thead><tr><th>effect</th><th>receipt</th><th class="num">seq</th><th>kind</th><th>state</th><th class="num">attempts</th><th>next attempt</th><th>last code</th><th>created</th></tr></thead><tbody>
${items.map((e) => html`<tr data-id="${e.id}" data-state="${e.state}" data-receipt="${e.receiptId}"><td><a href="${effectPath(e)}"><code>${e.id}</code></a></td><td><code>${e.receiptId}</code></td><td class="num">${e.seq}</td><td>${e.kind}</td><td class="state-${e.state}">${e.state}</td><td class="num">${e.attempt}</td><td>${nextAttempt(e)}</td><td>${e.lastError ?? "—"}</td><td>${formatTime(e.createdAt)}</td></tr>`)}
</tbody></table>`

const auditTable = (audit: ReadonlyArray<ReceiptAuditEntry>): Html =>
  audit.length === 0
    ? html`<p class="muted">No audit row.</p>`
    : html`<table class="audit"><thead><tr><th>at</th><th>action</th><th>actor</th><th>correlation id</th></tr></thead><tbody>
${audit.map((a) => html`<tr><td>${formatTime(a.at)}</td><td>${a.action}</td><td>${a.actor}</td><td><code>${a.correlationId}</code></td></tr>`)}
</tbody></table>`

interface Sibling {
  readonly id: string
  readonly seq: number
  readonly kind: string
  readonly state: string
  readonly attempt: number
}

// The receipt's effects in the order they run: seq, kind and state only (the receipt's reference, lines and payer stay
// out of the console).
const siblingsTable = (tenant: string, current: string, effects: ReadonlyArray<Sibling>): Html =>
  html`<table class="items"><thead><tr><th class="num">seq</th><th>kind</th><th>state</th><th class="num">attempts</th></tr></thead><tbody>
${effects.map((e) => html`<tr data-seq="${e.seq}" data-state="${e.state}"><td class="num">${e.seq}</td><td>${e.id === current ? html`<strong>${e.kind}</strong>` : html`<a href="${effectPath({ tenant, id: e.id })}">${e.kind}</a>`}</td><td class="state-${e.state}">${e.state}</td><td class="num">${e.attempt}</td></tr>`)}
</tbody></table>`

export const makeReceiptEffectPages = Effect.gen(function* () {
  const receipts = yield* Receipts

  const listSection = (query: ListQuery & { readonly tenant: TenantId }) =>
    Effect.map(receipts.effects(query.tenant, { ...query, limit: query.limit ?? PAGE_SIZE }), (page) =>
      html`<section id="list" hx-get="${listUrl(query, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${effectRows(page.items)}
<p class="pager">${query.cursor === undefined ? "" : html`<a href="${listUrl({ ...query, cursor: undefined })}">First page</a>`}${page.nextCursor === null ? "" : html`<a rel="next" href="${listUrl({ ...query, cursor: page.nextCursor })}">Next page</a>`}</p>
</section>`)

  const readQuery = Effect.map(queryParams(ListQuery), (q) => ({
    tenant: present(q.tenant),
    state: present(q.state),
    cursor: q.cursor,
    limit: q.limit
  }))

  /** One tenant's receipt effects, optionally in one state, oldest receipt first, a page at a time by keyset. */
  const list = signedInPage((viewer) =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const body = query.tenant === undefined
        ? html`<h1>Receipt effects</h1>${filters(query)}<p class="muted">Choose a tenant.</p>`
        : html`<h1>Receipt effects · ${query.tenant}</h1>${filters(query)}${yield* listSection({ ...query, tenant: query.tenant })}`
      return htmlResponse(layout({ title: "Receipt effects", current: "/console/receipt-effects", viewer, body }))
    }))

  const listLive = signedInPage(() =>
    Effect.gen(function* () {
      const query = yield* readQuery
      if (query.tenant === undefined) return htmlResponse(html``)
      return htmlResponse(yield* listSection({ ...query, tenant: query.tenant }))
    }))

  const readEffect = Effect.gen(function* () {
    const path = yield* pathParams(EffectPath)
    const found = yield* receipts.effect(path.tenant, path.id)
    if (Option.isNone(found)) return yield* refuse(404, "receipt-effect-not-found", "No such receipt effect")
    const receipt = yield* receipts.state(path.tenant, found.value.receiptId)
    const audit = yield* receipts.receiptAudit(path.tenant, found.value.receiptId)
    return { effect: found.value, siblings: Option.match(receipt, { onNone: () => [], onSome: (r) => r.effects }), audit }
  })

  const detailSection = (e: ReceiptEffectItem, siblings: ReadonlyArray<Sibling>, audit: ReadonlyArray<ReceiptAuditEntry>) =>
    html`<section id="detail" hx-get="${effectPath(e)}/live" hx-trigger="every 5s" hx-swap="outerHTML">
<dl>
<dt>tenant / receipt</dt><dd>${e.tenant} / <code>${e.receiptId}</code></dd>
<dt>kind</dt><dd data-kind="${e.kind}">${e.kind} (effect ${e.seq} of its receipt)</dd>
<dt>state</dt><dd class="state state-${e.state}" data-state="${e.state}">${e.state}</dd>
<dt>attempts</dt><dd data-attempt="${e.attempt}">${e.attempt}</dd>
<dt>next attempt</dt><dd>${nextAttempt(e)}</dd>
<dt>last code</dt><dd data-last-error="${e.lastError ?? ""}">${e.lastError ?? "—"}</dd>
${e.kind === "notify" ? html`<dt>notification</dt><dd>${e.frozen ? "frozen by its first attempt: every retry sends exactly it" : "not rendered yet"}</dd>` : ""}
<dt>created</dt><dd>${formatTime(e.createdAt)}</dd>
<dt>completed</dt><dd>${formatTime(e.completedAt)}</dd>
</dl>
<h2>Effects of the receipt</h2>
${siblingsTable(e.tenant, e.id, siblings)}
<h2>Audit trail</h2>
<p class="muted">The receipt's business audit, newest first (at most 100). Delivery writes none.</p>
${auditTable(audit)}
</section>`

  /** An effect's kind, state, attempts, codes and times, its receipt's effects and the receipt's audit rows. */
  const detail = signedInPage((viewer) =>
    Effect.map(readEffect, ({ audit, effect, siblings }) =>
      htmlResponse(layout({
        title: "Receipt effect",
        current: "/console/receipt-effects",
        viewer,
        body: html`<h1>Receipt effect <code>${effect.id}</code></h1>
${detailSection(effect, siblings, audit)}
<p><a href="${listUrl({ tenant: effect.tenant })}">Back to the list</a></p>`
      }))))

  const detailLive = signedInPage(() =>
    Effect.map(readEffect, ({ audit, effect, siblings }) => htmlResponse(detailSection(effect, siblings, audit))))

  return { list, listLive, detail, detailLive } as const
})
