import { ConnectorEventInbox, ConnectorId, type RecordedConnectorEvent } from "@delivery/idle-wake"
import { Effect, Option, Schema } from "effect"
import { htmlResponse, pathParams, queryParams, refuse, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime, layout } from "./Layout.ts"

const optionalOr = <A, I>(schema: Schema.Schema<A, I>) => Schema.optional(Schema.Union(schema, Schema.Literal("")))
const present = <A>(value: A | "" | undefined): A | undefined => (value === "" ? undefined : value)

/** A GitHub event name, as the tenant records it (X-GitHub-Event). */
const EventName = Schema.String.pipe(Schema.pattern(/^[a-z_]{1,64}$/))

const ListQuery = Schema.Struct({
  connector: optionalOr(ConnectorId),
  event: optionalOr(EventName),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(200))),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))
})

/** Events per page unless the address asks for 1..100. */
const PAGE_SIZE = 50

const EventPath = Schema.Struct({
  id: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/))
})

const eventPath = (e: { readonly eventId: string }) => `/console/connector-events/${e.eventId}`

interface ListQuery {
  readonly connector?: string | undefined
  readonly event?: string | undefined
  readonly cursor?: string | undefined
  readonly limit?: number | undefined
}

const listUrl = (query: ListQuery, live = false) => {
  const params = new URLSearchParams()
  if (query.connector !== undefined) params.set("connector", query.connector)
  if (query.event !== undefined) params.set("event", query.event)
  if (query.limit !== undefined) params.set("limit", String(query.limit))
  if (query.cursor !== undefined) params.set("cursor", query.cursor)
  const search = params.toString()
  return `/console/connector-events${live ? "/live" : ""}${search === "" ? "" : `?${search}`}`
}

const filters = (query: ListQuery) =>
  html`<form class="filters" method="get" action="/console/connector-events">
<label>Connector instance (optional) <input name="connector" value="${query.connector ?? ""}" pattern="[a-z0-9][a-z0-9_\\-]{0,63}"></label>
<label>GitHub event (optional) <input name="event" value="${query.event ?? ""}" pattern="[a-z_]{1,64}"></label>
<button type="submit">Show</button>
</form>`

const eventRows = (items: ReadonlyArray<RecordedConnectorEvent>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No recorded events match.</p>`
    : html`<table class="items"><thead><tr><th>event</th><th>connector instance</th><th>endpoint</th><th>GitHub event</th><th class="num">cloud attempt</th><th>received</th></tr></thead><tbody>
${items.map((e) => html`<tr data-id="${e.eventId}" data-state="recorded" data-connector="${e.connectorInstance}"><td><a href="${eventPath(e)}"><code>${e.eventId}</code></a></td><td>${e.connectorInstance}</td><td>${e.endpoint}</td><td>${e.event}</td><td class="num">${e.cloudAttempt}</td><td>${formatTime(e.receivedAt)}</td></tr>`)}
</tbody></table>`

export const makeConnectorEventPages = Effect.gen(function* () {
  const inbox = yield* ConnectorEventInbox

  const listSection = (query: ListQuery) =>
    Effect.map(inbox.recordedEvents({ ...query, limit: query.limit ?? PAGE_SIZE }), (page) =>
      html`<section id="list" hx-get="${listUrl(query, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${eventRows(page.items)}
<p class="pager">${query.cursor === undefined ? "" : html`<a href="${listUrl({ ...query, cursor: undefined })}">First page</a>`}${page.nextCursor === null ? "" : html`<a rel="next" href="${listUrl({ ...query, cursor: page.nextCursor })}">Next page</a>`}</p>
</section>`)

  const readQuery = Effect.map(queryParams(ListQuery), (q) => ({
    connector: present(q.connector),
    event: present(q.event),
    cursor: q.cursor,
    limit: q.limit
  }))

  /** The connector events this stack recorded, newest first, optionally one instance's and one event name's, by keyset. */
  const list = signedInPage((viewer) =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const scope = [query.connector, query.event].filter((part) => part !== undefined).join(" · ")
      const body = html`<h1>Connector events${scope === "" ? "" : ` · ${scope}`}</h1>
${filters(query)}
<p class="muted">The GitHub events this stack received from the cloud's broker and recorded, newest first. Each is recorded once; its undelivered events wait in the cloud's queue.</p>
${yield* listSection(query)}`
      return htmlResponse(layout({ title: "Connector events", current: "/console/connector-events", viewer, body }))
    }))

  const listLive = signedInPage(() => Effect.flatMap(readQuery, (query) => Effect.map(listSection(query), htmlResponse)))

  const readEvent = Effect.gen(function* () {
    const path = yield* pathParams(EventPath)
    const found = yield* inbox.recordedEvent(path.id)
    if (Option.isNone(found)) return yield* refuse(404, "event-not-found", "No such recorded connector event")
    return found.value
  })

  const detailSection = (e: RecordedConnectorEvent) =>
    html`<section id="detail" hx-get="${eventPath(e)}/live" hx-trigger="every 5s" hx-swap="outerHTML">
<dl>
<dt>state</dt><dd class="state" data-state="recorded">recorded (final: a redelivery of it is a duplicate)</dd>
<dt>connector instance / endpoint</dt><dd data-connector="${e.connectorInstance}">${e.connectorInstance} / ${e.endpoint}</dd>
<dt>GitHub event</dt><dd>${e.event} (delivery <code>${e.deliveryId}</code>)</dd>
<dt>cloud attempt</dt><dd data-attempt="${e.cloudAttempt}">${e.cloudAttempt} (the cloud's claim that delivered it)</dd>
<dt>received</dt><dd>${formatTime(e.receivedAt)}</dd>
</dl>
<p class="muted">The event's payload stays in the stack's database; the console never shows it. Connector events keep no audit trail of their own.</p>
</section>`

  /** A recorded event's ids, instance, endpoint, event name, attempt and time. */
  const detail = signedInPage((viewer) =>
    Effect.map(readEvent, (e) =>
      htmlResponse(layout({
        title: "Connector event",
        current: "/console/connector-events",
        viewer,
        body: html`<h1>Connector event <code>${e.eventId}</code></h1>
${detailSection(e)}
<p><a href="${listUrl({ connector: e.connectorInstance })}">Back to the list</a></p>`
      }))))

  const detailLive = signedInPage(() => Effect.map(readEvent, (e) => htmlResponse(detailSection(e))))

  return { list, listLive, detail, detailLive } as const
})
