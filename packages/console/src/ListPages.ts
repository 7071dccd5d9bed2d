import { Effect, Schema } from "effect"
import { htmlResponse, queryParams, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { formatTime, layout } from "./Layout.ts"

/** Rows per page unless the address asks for 1..100. */
export const PAGE_SIZE = 50

/** The keyset position a page hands out, passed back as it came. */
export const Cursor = Schema.optional(Schema.String.pipe(Schema.maxLength(200)))
export const Limit = Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))

/**
 * A list's filters with its paging: an empty form field means "any" and is dropped before decoding. A family whose
 * keyset position has a shape of its own (a stack id, a shorter token) passes it as `cursor`, so that a malformed one
 * is refused as the address's, not the service's.
 */
export const listQuery = <F extends Schema.Struct.Fields, C extends Schema.Struct.Field = typeof Cursor>(fields: F, cursor?: C) =>
  // Limit before cursor: the addresses a list hands out keep the filters first and the position last.
  Schema.Struct({ ...fields, limit: Limit, cursor: (cursor ?? Cursor) as C })

export const UUID = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/))

type Address = Readonly<Record<string, string | number | undefined>>

/** The address of a list (or of its live section) with the given filters, paging included; unset values left out. */
export const listUrl = (path: string, query: Address, live = false) => {
  const params = new URLSearchParams()
  for (const [name, value] of Object.entries(query)) if (value !== undefined) params.set(name, String(value))
  const search = params.toString()
  return `${path}${live ? "/live" : ""}${search === "" ? "" : `?${search}`}`
}

/** One field of a list's filters form. */
export type Filter =
  | { readonly name: string; readonly label: string; readonly kind: "id"; readonly required?: boolean }
  | { readonly name: string; readonly label: string; readonly kind: "text"; readonly maxLength?: number; readonly pattern?: string }
  | { readonly name: string; readonly label: string; readonly kind: "select"; readonly options: ReadonlyArray<string> }

// The pattern attribute is compiled with the v flag: a hyphen in a class must be escaped.
const idPattern = "[a-z0-9][a-z0-9_\\-]{0,63}"

export const filtersForm = (path: string, filters: ReadonlyArray<Filter>, query: Readonly<Record<string, unknown>>): Html =>
  html`<form class="filters" method="get" action="${path}">
${filters.map((filter) => {
    const value = typeof query[filter.name] === "string" ? (query[filter.name] as string) : ""
    switch (filter.kind) {
      case "id":
        return html`<label>${filter.label} <input name="${filter.name}" value="${value}"${filter.required === true ? html` required` : ""} pattern="${idPattern}"></label>`
      case "text":
        return html`<label>${filter.label} <input name="${filter.name}" value="${value}"${filter.maxLength === undefined ? "" : html` maxlength="${filter.maxLength}"`}${filter.pattern === undefined ? "" : html` pattern="${filter.pattern}"`}></label>`
      case "select":
        return html`<label>${filter.label} <select name="${filter.name}"><option value="">any</option>${filter.options.map((option) =>
          html`<option value="${option}"${option === value ? html` selected` : ""}>${option}</option>`)}</select></label>`
    }
  })}
<button type="submit">Show</button>
</form>`

export interface Page<I> {
  readonly items: ReadonlyArray<I>
  readonly nextCursor: string | null
}

/** What a list's page is of, and how its filters ask for it. */
interface Scoped<Q, QI, S> {
  readonly title: string
  readonly path: string
  readonly query: Schema.Schema<Q, QI>
  readonly filters: ReadonlyArray<Filter>
  /** What the list is of, when the filters say enough (a tenant, a stack); otherwise the form asks with `prompt`. */
  readonly scope: (query: Q) => S | undefined
  readonly prompt?: string
  readonly heading: (scope: S) => Html | string
  /** Above the form: what an action just did, from the query it redirected with (`?done=…`). */
  readonly notice?: (query: Q) => Html | ""
  /** Between the form and the live section. */
  readonly intro?: Html
}

/**
 * The page around a scope's section, and that section alone for htmx to refresh: the filters form, the heading
 * once the filters name the scope, the prompt until they do.
 */
export const scopedPages = <Q extends Readonly<Record<string, unknown>>, QI, S, E, R>(scoped: Scoped<Q, QI, S> & {
  readonly section: (scope: S, query: Q) => Effect.Effect<Html, E, R>
}) => {
  const readQuery = queryParams(scoped.query)

  const full = signedInPage((viewer) =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const scope = scoped.scope(query)
      const form = filtersForm(scoped.path, scoped.filters, query)
      const body = scope === undefined
        ? html`<h1>${scoped.title}</h1>${form}<p class="muted">${scoped.prompt ?? ""}</p>`
        : html`<h1>${scoped.heading(scope)}</h1>${scoped.notice?.(query) ?? ""}${form}${scoped.intro ?? ""}${yield* scoped.section(scope, query)}`
      return htmlResponse(layout({ title: scoped.title, current: scoped.path, viewer, body }))
    }))

  const live = signedInPage(() =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const scope = scoped.scope(query)
      return htmlResponse(scope === undefined ? html`` : yield* scoped.section(scope, query))
    }))

  return { list: full, listLive: live } as const
}

/**
 * A list page and its live section, the shape every family's list has: filters decoded by a closed schema, the
 * scope the list needs (a tenant, a stack) or a prompt for it, one keyset page of rows, links to the first and the
 * next page, and a section that htmx refreshes every five seconds.
 */
export const listPages = <Q extends Address & { readonly cursor?: string | undefined; readonly limit?: number | undefined }, QI, S, I, E, R>(list: Scoped<Q, QI, S> & {
  readonly page: (scope: S, query: Q & { readonly limit: number }) => Effect.Effect<Page<I>, E, R>
  readonly rows: (items: ReadonlyArray<I>) => Html
}) =>
  scopedPages({
    ...list,
    section: (scope, query) =>
      Effect.map(list.page(scope, { ...query, limit: query.limit ?? PAGE_SIZE }), (page) => {
        const at = (cursor: string | undefined) => listUrl(list.path, { ...query, cursor })
        return html`<section id="list" hx-get="${listUrl(list.path, query, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${list.rows(page.items)}
<p class="pager">${query.cursor === undefined ? "" : html`<a href="${at(undefined)}">First page</a>`}${page.nextCursor === null ? "" : html`<a rel="next" href="${at(page.nextCursor)}">Next page</a>`}</p>
</section>`
      })
  })

/** An item's page and its live section: the part that changes is one section htmx refreshes every five seconds. */
export const detailPages = <I, E, R, N = never, NI = never>(detail: {
  readonly title: string
  readonly current: string
  readonly read: Effect.Effect<I, E, R>
  /** The item's own address; its live section is at `${path}/live`. */
  readonly path: (item: I) => string
  readonly heading: (item: I) => Html | string
  readonly section: (item: I) => Html
  /** Above the live section, on the page only: what an action just did, from the query it redirected with (`?done=…`). */
  readonly notice?: { readonly query: Schema.Schema<N, NI>; readonly show: (query: N) => Html | "" }
  /** Below the live section: actions, links. */
  readonly footer?: (item: I) => Html
}) => {
  const liveSection = (item: I) =>
    html`<section id="detail" hx-get="${detail.path(item)}/live" hx-trigger="every 5s" hx-swap="outerHTML">
${detail.section(item)}
</section>`
  const page = signedInPage((viewer) =>
    Effect.gen(function* () {
      const item = yield* detail.read
      const notice = detail.notice === undefined ? "" : detail.notice.show(yield* queryParams(detail.notice.query))
      return htmlResponse(layout({
        title: detail.title,
        current: detail.current,
        viewer,
        body: html`<h1>${detail.heading(item)}</h1>
${notice}${liveSection(item)}
${detail.footer?.(item) ?? ""}`
      }))
    }))
  const live = signedInPage(() => Effect.map(detail.read, (item) => htmlResponse(liveSection(item))))
  return { detail: page, detailLive: live } as const
}

/** A business audit as a family's own service keeps it (newest first): who did what, when, under which request. */
export const auditTable = (
  audit: ReadonlyArray<{ readonly at: Date; readonly action: string; readonly actor: string; readonly correlationId: string }>
): Html =>
  audit.length === 0
    ? html`<p class="muted">No audit row.</p>`
    : html`<table class="audit"><thead><tr><th>at</th><th>action</th><th>actor</th><th>correlation id</th></tr></thead><tbody>
${audit.map((a) => html`<tr><td>${formatTime(a.at)}</td><td>${a.action}</td><td>${a.actor}</td><td><code>${a.correlationId}</code></td></tr>`)}
</tbody></table>`
