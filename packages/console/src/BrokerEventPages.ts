import { type ConnectorEventView, ConnectorEvents, StackId } from "@delivery/idle-wake"
import { Effect, Option, Schema } from "effect"
import { pathParams, refuse } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime } from "./Layout.ts"
import { detailPages, listPages, listQuery, listUrl, UUID } from "./ListPages.ts"

const PATH = "/console/broker-events"

const EventState = Schema.Literal("pending", "delivered", "dead")

// The broker's keyset positions are at most 128 characters; a longer one is not one of them.
const EventCursor = Schema.optional(Schema.String.pipe(Schema.maxLength(128)))

const EventPath = Schema.Struct({ stack: StackId, id: UUID })

const eventPath = (e: { readonly stack: string; readonly id: string }) => `${PATH}/${encodeURIComponent(e.stack)}/${e.id}`

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

  /** One stack's broker events, optionally in one state, oldest first, a page at a time by keyset. */
  const lists = listPages({
    title: "Broker events",
    path: PATH,
    query: listQuery({ stack: Schema.optional(StackId), state: Schema.optional(EventState) }, EventCursor),
    filters: [
      { name: "stack", label: "Stack", kind: "id", required: true },
      { name: "state", label: "State", kind: "select", options: EventState.literals }
    ],
    scope: (query) => query.stack,
    prompt: "Choose a stack.",
    heading: (stack) => `Broker events · ${stack}`,
    page: (stack, query) => events.events(stack, query),
    rows: eventRows
  })

  /** An event's state, attempts, codes and times. */
  const details = detailPages({
    title: "Broker event",
    current: PATH,
    read: Effect.gen(function* () {
      const path = yield* pathParams(EventPath)
      const found = yield* events.event(path.stack, path.id)
      if (Option.isNone(found)) return yield* refuse(404, "event-not-found", "No such broker event")
      return found.value
    }),
    path: eventPath,
    heading: (e) => html`Broker event <code>${e.id}</code>`,
    section: (e) => html`<dl>
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
<p class="muted">The event's payload and GitHub's signature are delivered to the tenant only; the console never shows them.</p>`,
    footer: (e) => html`<p><a href="${listUrl(PATH, { stack: e.stack })}">Back to the list</a></p>`
  })

  return { ...lists, ...details } as const
})
