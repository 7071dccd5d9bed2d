import { COMPLETED_WINDOW_SECONDS } from "@delivery/core"
import { Context } from "effect"
import { type Html, html } from "./Html.ts"

/** A page of the navigation. */
export interface Section {
  readonly path: string
  readonly title: string
}

/**
 * The navigation of this process's console: each role lists the sections it serves (the backend its delivery
 * families, the cloud role its stacks), and a later capability adds its section here with its pages.
 */
export class ConsoleSections extends Context.Tag("@delivery/console/ConsoleSections")<ConsoleSections, ReadonlyArray<Section>>() {}

export const BACKEND_SECTIONS: ReadonlyArray<Section> = [
  { path: "/console/overview", title: "Overview" },
  { path: "/console/outbox", title: "Outbox" },
  { path: "/console/streams", title: "Inbound streams" },
  { path: "/console/signing-keys", title: "Signing keys" },
  { path: "/console/reset-mail", title: "Reset mail" },
  { path: "/console/receipt-effects", title: "Receipt effects" },
  { path: "/console/team-notifications", title: "Team notifications" },
  { path: "/console/connector-events", title: "Connector events" }
]

/** The cloud role's console: its stacks and its broker event queue; the tenant's delivery families live in the stacks. */
export const CLOUD_SECTIONS: ReadonlyArray<Section> = [
  { path: "/console/overview", title: "Overview" },
  { path: "/console/stacks", title: "Stacks" },
  { path: "/console/broker-events", title: "Broker events" }
]

/** Who is looking: the session's CSRF token for its forms, and the navigation to show. */
export interface Viewer {
  readonly csrf: string
  readonly sections: ReadonlyArray<Section>
}

// htmx reads its settings from this element: no inline styles for its indicators (the policy forbids them),
// no eval, no scripts taken from answers.
const htmxConfig = JSON.stringify({ includeIndicatorStyles: false, allowEval: false, allowScriptTags: false, historyCacheSize: 0 })

/** Every console page: the stylesheet and htmx from the console's own assets, the navigation, sign-out. */
export const layout = (options: {
  readonly title: string
  readonly current?: string | undefined
  readonly viewer?: Viewer | undefined
  readonly body: Html
}): Html =>
  html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="htmx-config" content="${htmxConfig}">
<title>${options.title} · delivery console</title>
<link rel="stylesheet" href="/console/assets/console.css">
<link rel="icon" href="/console/assets/favicon.svg" type="image/svg+xml">
<script src="/console/assets/htmx.min.js" defer></script>
</head>
<body>
<header>
<span class="brand">delivery console</span>
${options.viewer === undefined ? "" : html`<nav>${options.viewer.sections.map((section) =>
  html`<a href="${section.path}"${section.path === options.current ? html` aria-current="page"` : ""}>${section.title}</a>`)}</nav>
<form method="post" action="/console/sign-out">${csrfField(options.viewer)}<button type="submit">Sign out</button></form>`}
</header>
<main>
${options.body}
</main>
</body>
</html>`

/** The hidden field every state-changing form carries. */
export const csrfField = (viewer: Viewer): Html => html`<input type="hidden" name="csrf" value="${viewer.csrf}">`

/** Twelve bars, oldest first: items completed per five minutes in the last hour. */
export const completedChart = (windows: ReadonlyArray<number>, label: string): Html => {
  const max = Math.max(1, ...windows)
  const barWidth = 10
  const height = 36
  const total = windows.reduce((sum, n) => sum + n, 0)
  return html`<svg class="chart" role="img" width="${windows.length * (barWidth + 2)}" height="${height}" viewBox="0 0 ${windows.length * (barWidth + 2)} ${height}" aria-label="${label}: ${total} in the last hour">
${windows.map((count, i) => {
    const h = count === 0 ? 1 : Math.max(2, Math.round((count / max) * height))
    const minutesAgo = (windows.length - i) * (COMPLETED_WINDOW_SECONDS / 60)
    return html`<rect${count === 0 ? html` class="empty"` : ""} x="${i * (barWidth + 2)}" y="${height - h}" width="${barWidth}" height="${h}"><title>${count} from ${minutesAgo} to ${minutesAgo - 5} minutes ago</title></rect>`
  })}
</svg>`
}

export const formatAge = (seconds: number | null): string => {
  if (seconds === null) return "nothing due"
  if (seconds < 90) return `${Math.round(seconds)} s`
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`
  return `${(seconds / 3600).toFixed(1)} h`
}

export const formatTime = (date: Date | null | undefined): string => (date === null || date === undefined ? "—" : date.toISOString())

/** A refusal as a page: the stable reason and the correlation id, as every refusal of the backend carries them. */
export const refusalBody = (refusal: { readonly reason: string; readonly message: string; readonly correlationId: string }): Html =>
  html`<div class="refusal" data-reason="${refusal.reason}">
<h1>${refusal.message}</h1>
<p>Reason: <code class="reason">${refusal.reason}</code></p>
<p>Correlation id: <code class="correlation-id">${refusal.correlationId}</code></p>
</div>`
