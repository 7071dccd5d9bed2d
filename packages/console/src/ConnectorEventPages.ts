import { ConnectorEventInbox, ConnectorId, type RecordedConnectorEvent } from "@delivery/idle-wake"
import { Effect, Option, Schema } from "effect"
import { pathParams, refuse } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime } from "./Layout.ts"
import { detailPages, listPages, listQuery, listUrl, UUID } from "./ListPages.ts"

const PATH = "/console/connector-events"

/** A GitHub event name, as the tenant records it (X-GitHub-Event). */
const EventName = Schema.String.pipe(Schema.pattern(/^[a-z_]{1,64}$/))

const EventPath = Schema.Struct({ id: UUID })

const eventPath = (e: { readonly eventId: string }) => `${PATH}/${e.eventId}`

const eventRows = (items: ReadonlyArray<RecordedConnectorEvent>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No recorded events match.</p>`
    : html`<table class="items"><thead><tr><th>event</th><th>connector instance</th><th>endpoint</th><th>GitHub event</th><th class="num">cloud attempt</th><th>received</th></tr></thead><tbody>
${items.map((e) => html`<tr data-id="${e.eventId}" data-state="recorded" data-connector="${e.connectorInstance}"><td><a href="${eventPath(e)}"><code>${e.eventId}</code></a></td><td>${e.connectorInstance}</td><td>${e.endpoint}</td><td>${e.event}</td><td class="num">${e.cloudAttempt}</td><td>${formatTime(e.receivedAt)}</td></tr>`)}
</tbody></table>`

export const makeConnectorEventPages = Effect.gen(function* () {
  const inbox = yield* ConnectorEventInbox

  /** The connector events this stack recorded, newest first, optionally one instance's and one event name's, by keyset. */
  const lists = listPages({
    title: "Connector events",
    path: PATH,
    query: listQuery({ connector: Schema.optional(ConnectorId), event: Schema.optional(EventName) }),
    filters: [
      { name: "connector", label: "Connector instance (optional)", kind: "id" },
      { name: "event", label: "GitHub event (optional)", kind: "text", pattern: "[a-z_]{1,64}" }
    ],
    // Every filter is optional: the whole stack's events are a list already.
    scope: (query) => query,
    heading: (query) => {
      const scope = [query.connector, query.event].filter((part) => part !== undefined).join(" · ")
      return `Connector events${scope === "" ? "" : ` · ${scope}`}`
    },
    intro: html`<p class="muted">The GitHub events this stack received from the cloud's broker and recorded, newest first. Each is recorded once; its undelivered events wait in the cloud's queue.</p>`,
    page: (_, query) => inbox.recordedEvents(query),
    rows: eventRows
  })

  /** A recorded event's ids, instance, endpoint, event name, attempt and time. */
  const details = detailPages({
    title: "Connector event",
    current: PATH,
    read: Effect.gen(function* () {
      const path = yield* pathParams(EventPath)
      const found = yield* inbox.recordedEvent(path.id)
      if (Option.isNone(found)) return yield* refuse(404, "event-not-found", "No such recorded connector event")
      return found.value
    }),
    path: eventPath,
    heading: (e) => html`Connector event <code>${e.eventId}</code>`,
    section: (e) => html`<dl>
<dt>state</dt><dd class="state" data-state="recorded">recorded (final: a redelivery of it is a duplicate)</dd>
<dt>connector instance / endpoint</dt><dd data-connector="${e.connectorInstance}">${e.connectorInstance} / ${e.endpoint}</dd>
<dt>GitHub event</dt><dd>${e.event} (delivery <code>${e.deliveryId}</code>)</dd>
<dt>cloud attempt</dt><dd data-attempt="${e.cloudAttempt}">${e.cloudAttempt} (the cloud's claim that delivered it)</dd>
<dt>received</dt><dd>${formatTime(e.receivedAt)}</dd>
</dl>
<p class="muted">The event's payload stays in the stack's database; the console never shows it. Connector events keep no audit trail of their own.</p>`,
    footer: (e) => html`<p><a href="${listUrl(PATH, { connector: e.connectorInstance })}">Back to the list</a></p>`
  })

  return { ...lists, ...details } as const
})
