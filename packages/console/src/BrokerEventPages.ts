import { type ConnectorEventView, ConnectorEvents, StackId } from "@delivery/idle-wake"
import { Effect, Option, Schema } from "effect"
import { htmlResponse, pathParams, queryParams, refuse, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime, layout } from "./Layout.ts"

const optionalOr = <A, I>(schema: Schema.Schema<A, I>) => Schema.optional(Schema.Union(schema, Schema.Literal("")))
const present = <A>(value: A | "" | undefined): A | undefined => (value === "" ? undefined : value)

const EventState = Schema.Literal("pending", "delivered", "dead")
type EventState = typeof EventState.Type

const ListQuery = Schema.Struct({
  stack: optionalOr(StackId),
  state: optionalOr(EventState),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(128))),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))
})

/** Events per page unless the address asks for 1..100. */
const PAGE_SIZE = 50

const EventPath = Schema.Struct({
  stack: StackId,
  id: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/))
})

const eventPath = (e: { readonly stack: string; readonly id: string }) =>
  `/console/broker-events/${encodeURIComponent(e.stack)}/${e.id}`

interface ListQuery {
  readonly stack: string
  readonly state?: EventState | undefined
  readonly cursor?: string | undefined
  readonly limit?: number | undefined
}

const listUrl = (query: ListQuery, live = false) => {
  const params = new URLSearchParams({ stack: query.stack })
  if (query.state !== undefined) params.set("state", query.state)
  if (query.limit !== undefined) params.set("limit", String(query.limit))
  if (query.cursor !== undefined) params.set("cursor", query.cursor)
  return `/console/broker-events${live ? "/live" : ""}?${params}`
}

const filters = (query: { readonly stack?: string | undefined; readonly state?: string | undefined }) =>
  html`<form class="filters" method="get" action="/console/broker-events">
<label>Stack <input name="stack" value="${query.stack ?? ""}" required pattern="[a-z0-9][a-z0-9_\\-]{0,63}"></label>
<label>State <select name="state"><option value="">any</option>${EventState.literals.map((s) =>
  html`<option value="${s}"${s === query.state ? html` selected` : ""}>${s}</option>`)}</select></label>
<button type="submit">Show</button>
</form>`

/** A pending event's next claim (or the lease a delivery holds now); a settled event has none. */
const nextAttempt = (e: ConnectorEventView) => {
  if (e.state !== "pending") return "—"
  if (e.leaseExpiresAt !== null && e.leaseExpiresAt.getTime() > Date.now()) return `lease until ${formatTime(e.leaseExpiresAt)}`
  return formatTime(e.availableAt)
}

const eventRows = (items: ReadonlyArray<ConnectorEventView>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No events match.</p>`
    : html`<table class="items"><thead><tr><th>event</th><th>GitHub event</th><th>state</th><th class="num">attempts</th><th>next attempt</th><th>last code</th><th>received</th></tr></thead><tbody>
${items.map((e) => html`<tr data-id="${e.id}" data-state="${e.state}"><td><a href="${eventPath(e)}"><code>${e.id}</code></a></td><td>${e.event}</td><td class="state-${e.state}">${e.state}</td><td class="num">${e.attempt}</td><td>${nextAttempt(e)}</td><td>${e.lastCode ?? "—"}</td><td>${formatTime(e.receivedAt)}</td></tr>`)}
</tbody></table>`

export const makeBrokerEventPages = Effect.gen(function* () {
  const events = yield* ConnectorEvents

  const listSection = (query: ListQuery & { readonly stack: StackId }) =>
    Effect.map(events.events(query.stack, { ...query, limit: query.limit ?? PAGE_SIZE }), (page) =>
      html`<section id="list" hx-get="${listUrl(query, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${eventRows(page.items)}
<p class="pager">${query.cursor === undefined ? "" : html`<a href="${listUrl({ ...query, cursor: undefined })}">First page</a>`}${page.nextCursor === null ? "" : html`<a rel="next" href="${listUrl({ ...query, cursor: page.nextCursor })}">Next page</a>`}</p>
</section>`)

  const readQuery = Effect.map(queryParams(ListQuery), (q) => ({
    stack: present(q.stack),
    state: present(q.state),
    cursor: q.cursor,
    limit: q.limit
  }))

  /** One stack's broker events, optionally in one state, oldest first, a page at a time by keyset. */
  const list = signedInPage((viewer) =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const body = query.stack === undefined
        ? html`<h1>Broker events</h1>${filters(query)}<p class="muted">Choose a stack.</p>`
        : html`<h1>Broker events · ${query.stack}</h1>${filters(query)}${yield* listSection({ ...query, stack: query.stack })}`
      return htmlResponse(layout({ title: "Broker events", current: "/console/broker-events", viewer, body }))
    }))

  const listLive = signedInPage(() =>
    Effect.gen(function* () {
      const query = yield* readQuery
      if (query.stack === undefined) return htmlResponse(html``)
      return htmlResponse(yield* listSection({ ...query, stack: query.stack }))
    }))

  const readEvent = Effect.gen(function* () {
    const path = yield* pathParams(EventPath)
    const found = yield* events.event(path.stack, path.id)
    if (Option.isNone(found)) return yield* refuse(404, "event-not-found", "No such broker event")
    return found.value
  })

  const detailSection = (e: ConnectorEventView) =>
    html`<section id="detail" hx-get="${eventPath(e)}/live" hx-trigger="every 5s" hx-swap="outerHTML">
<dl>
<dt>stack</dt><dd>${e.stack}</dd>
<dt>connector instance / endpoint</dt><dd>${e.connectorInstance} / ${e.endpoint}</dd>
<dt>GitHub event</dt><dd>${e.event} (delivery <code>${e.deliveryId}</code>)</dd>
<dt>state</dt><dd class="state state-${e.state}" data-state="${e.state}">${e.state}</dd>
<dt>attempts</dt><dd data-attempt="${e.attempt}">${e.attempt} claims, ${e.failures} failed deliveries</dd>
<dt>last code</dt><dd data-last-code="${e.lastCode ?? ""}">${e.lastCode ?? "—"}</dd>
<dt>next attempt</dt><dd>${nextAttempt(e)}</dd>
<dt>received</dt><dd>${formatTime(e.receivedAt)}</dd>
<dt>settled</dt><dd>${formatTime(e.settledAt)}</dd>
</dl>
<p class="muted">The event's payload and GitHub's signature are delivered to the tenant only; the console never shows them.</p>
</section>`

  /** An event's state, attempts, codes and times. */
  const detail = signedInPage((viewer) =>
    Effect.map(readEvent, (e) =>
      htmlResponse(layout({
        title: "Broker event",
        current: "/console/broker-events",
        viewer,
        body: html`<h1>Broker event <code>${e.id}</code></h1>
${detailSection(e)}
<p><a href="${listUrl({ stack: e.stack })}">Back to the list</a></p>`
      }))))

  const detailLive = signedInPage(() => Effect.map(readEvent, (e) => htmlResponse(detailSection(e))))

  return { list, listLive, detail, detailLive } as const
})
