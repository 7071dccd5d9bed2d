import { EffectState, type ReceiptEffectItem, Receipts } from "@delivery/receipts"
import { TenantId } from "@delivery/signer"
import { Effect, Option, Schema } from "effect"
import { pathParams, refuse } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime } from "./Layout.ts"
import { auditTable, detailPages, listPages, listQuery, listUrl, UUID } from "./ListPages.ts"

const PATH = "/console/receipt-effects"

const EffectPath = Schema.Struct({ tenant: TenantId, id: UUID })

const effectPath = (e: { readonly tenant: string; readonly id: string }) => `${PATH}/${encodeURIComponent(e.tenant)}/${e.id}`

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

  /** One tenant's receipt effects, optionally in one state, oldest receipt first, a page at a time by keyset. */
  const lists = listPages({
    title: "Receipt effects",
    path: PATH,
    query: listQuery({ tenant: Schema.optional(TenantId), state: Schema.optional(EffectState) }),
    filters: [
      { name: "tenant", label: "Tenant", kind: "id", required: true },
      { name: "state", label: "State", kind: "select", options: EffectState.literals }
    ],
    scope: (query) => query.tenant,
    prompt: "Choose a tenant.",
    heading: (tenant) => `Receipt effects · ${tenant}`,
    page: (tenant, query) => receipts.effects(tenant, query),
    rows: effectRows
  })

  /** An effect's kind, state, attempts, codes and times, its receipt's effects and the receipt's audit rows. */
  const details = detailPages({
    title: "Receipt effect",
    current: PATH,
    read: Effect.gen(function* () {
      const path = yield* pathParams(EffectPath)
      const found = yield* receipts.effect(path.tenant, path.id)
      if (Option.isNone(found)) return yield* refuse(404, "receipt-effect-not-found", "No such receipt effect")
      const receipt = yield* receipts.state(path.tenant, found.value.receiptId)
      const audit = yield* receipts.receiptAudit(path.tenant, found.value.receiptId)
      return { effect: found.value, siblings: Option.match(receipt, { onNone: () => [], onSome: (r) => r.effects }), audit }
    }),
    path: ({ effect }) => effectPath(effect),
    heading: ({ effect }) => html`Receipt effect <code>${effect.id}</code>`,
    section: ({ audit, effect: e, siblings }) => html`<dl>
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
${auditTable(audit)}`,
    footer: ({ effect }) => html`<p><a href="${listUrl(PATH, { tenant: effect.tenant })}">Back to the list</a></p>`
  })

  return { ...lists, ...details } as const
})
