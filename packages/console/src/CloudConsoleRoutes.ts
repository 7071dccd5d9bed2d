import { type AdmissionCounters, CloudStacks } from "@delivery/idle-wake"
import { Effect } from "effect"
import { makeBrokerEventPages } from "./BrokerEventPages.ts"
import { makeCloudStackPages } from "./CloudStackPages.ts"
import { htmlResponse, signedInPage } from "./ConsoleHttp.ts"
import { consoleRoutes, listAndDetailRoutes } from "./ConsoleRoutes.ts"
import { type Html, html } from "./Html.ts"
import { CLOUD_SECTIONS } from "./Layout.ts"

const COUNTERS: ReadonlyArray<readonly [keyof Omit<AdmissionCounters, "refusals">, string]> = [
  ["waiting", "requests holding a waiting slot now"],
  ["waitingStacks", "stacks with a held request now"],
  ["preparations", "provider preparations pending now"],
  ["admitted", "requests given a waiting slot"],
  ["wakesStarted", "wakes claimed and started (provider starts)"]
]

const admissionSection = (counters: AdmissionCounters): Html => {
  const refusals = Object.entries(counters.refusals)
  return html`<section id="admission" hx-get="/console/admission/live" hx-trigger="every 5s" hx-swap="outerHTML">
<h2>Wake admission of this process</h2>
<p class="muted">Since this process started. The waiting and preparation slots and the budgets are per process: another cloud process counts its own.</p>
<table class="admission"><tbody>
${COUNTERS.map(([name, label]) => html`<tr data-counter="${name}"><td>${label}</td><td class="num count">${counters[name]}</td></tr>`)}
</tbody></table>
<h2>Refusals by reason</h2>
${refusals.length === 0
    ? html`<p class="muted empty">No refusal yet.</p>`
    : html`<table class="refusals"><thead><tr><th>reason</th><th class="num">refusals</th></tr></thead><tbody>
${refusals.map(([reason, count]) => html`<tr data-refusal="${reason}"><td><code>${reason}</code></td><td class="num count">${count}</td></tr>`)}
</tbody></table>`}
</section>`
}

/**
 * The cloud role's console: the overview of its stacks and connector event queue with this process's wake admission,
 * the stacks with their confirmed operator actions, and the broker event queue. Needs `CloudStacks` and
 * `ConnectorEvents`, besides what every role's console needs.
 */
export const CloudConsoleRoutesLive = consoleRoutes(CLOUD_SECTIONS, (router, withServices) =>
  Effect.gen(function* () {
    const cloud = yield* CloudStacks
    const admission = Effect.map(cloud.admission, admissionSection)
    yield* router.get("/console/admission/live", withServices(signedInPage(() => Effect.map(admission, (section) => htmlResponse(section)))))
    const stacks = yield* makeCloudStackPages
    yield* listAndDetailRoutes(router, withServices, { list: "/console/stacks", item: "/console/stack/:stack" }, stacks)
    yield* router.get("/console/stack/:stack/:action", withServices(stacks.confirm))
    yield* router.post("/console/stack/:stack/:action", withServices(stacks.act))
    const events = yield* makeBrokerEventPages
    yield* listAndDetailRoutes(router, withServices, { list: "/console/broker-events", item: "/console/broker-events/:stack/:id" }, events)
    return { overview: admission }
  }))
