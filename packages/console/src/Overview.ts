import { type QueueSnapshot, QueueViews, WorkerRegistry } from "@delivery/core"
import { Effect } from "effect"
import { type Html, html } from "./Html.ts"
import { completedChart, formatAge } from "./Layout.ts"

/** Where an operator goes from a family's card; families without a list page yet have none. */
const listPages: Readonly<Record<string, string>> = {
  outbox: "/console/outbox",
  "inbound-streams": "/console/streams",
  "reset-mail": "/console/reset-mail",
  "receipt-effects": "/console/receipt-effects",
  "team-applications": "/console/team-notifications",
  "connector-events": "/console/connector-events",
  "cloud-stacks": "/console/stacks",
  "cloud-connector-events": "/console/broker-events"
}

/** An oldest due item older than this is shown as late. */
const LATE_SECONDS = 300

const familyCard = (title: string, family: string, reading: QueueSnapshot | undefined): Html => {
  const link = listPages[family]
  if (reading === undefined) {
    return html`<article class="family" data-family="${family}"><h2>${title}</h2><p class="refusal" data-reason="storage-unavailable">Could not be read (<code>storage-unavailable</code>)</p></article>`
  }
  const due = reading.oldestDueAgeSeconds
  const total = reading.completedLastHour.reduce((sum, n) => sum + n, 0)
  return html`<article class="family" data-family="${family}">
<h2>${link === undefined ? title : html`<a href="${link}">${title}</a>`}</h2>
<table><thead><tr><th>state</th><th class="num">items</th></tr></thead><tbody>
${reading.states.map((s) => html`<tr data-state="${s.state}"><td${s.count > 0 ? html` class="state-${s.state}"` : ""}>${s.state}</td><td class="num count">${s.count}</td></tr>`)}
</tbody></table>
<p class="due${due !== null && due > LATE_SECONDS ? " late" : ""}" data-oldest-due="${due === null ? "" : String(Math.round(due))}">Oldest due: ${formatAge(due)}</p>
<p>${completedChart(reading.completedLastHour, `${title} completed`)} <span class="muted completed" data-completed="${total}">${total} in the last hour</span></p>
</article>`
}

/**
 * The overview's live part: every queue family's counts by state, oldest due age and last hour, then this
 * process's workers. htmx replaces it every five seconds with a fresh copy of itself.
 */
export const overviewSection = Effect.gen(function* () {
  const views = yield* QueueViews
  const registry = yield* WorkerRegistry
  const readings = yield* Effect.forEach(views, (view) =>
    view.snapshot.pipe(
      Effect.map((snapshot): QueueSnapshot | undefined => snapshot),
      Effect.catchAll(() => Effect.succeed(undefined))
    ), { concurrency: 4 })
  const workers = yield* registry.snapshot
  return html`<section id="overview" hx-get="/console/overview/live" hx-trigger="every 5s" hx-swap="outerHTML">
<div class="families">
${views.map((view, i) => familyCard(view.title, view.family, readings[i]))}
</div>
<h2>Workers of this process</h2>
${workers.length === 0
    ? html`<p class="muted">This process runs no delivery workers (its role or configuration).</p>`
    : html`<table class="workers"><thead><tr><th>worker</th><th>status</th></tr></thead><tbody>
${workers.map((w) => html`<tr data-worker="${w.name}"><td>${w.name}</td><td class="state-${w.status === "running" ? "running" : "failed"}">${w.status}</td></tr>`)}
</tbody></table>`}
<p class="muted">Read at ${new Date().toISOString()}; refreshed every 5 seconds.</p>
</section>`
})
