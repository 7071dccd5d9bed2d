import type { HttpServerResponse } from "@effect/platform"
import { Effect, Schema } from "effect"
import { htmlResponse, queryParams, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { layout } from "./Layout.ts"

/** Rows per page unless the address asks for 1..100. */
export const PAGE_SIZE = 50

/** The keyset position a page hands out, passed back as it came. */
export const Cursor = Schema.optional(Schema.String.pipe(Schema.maxLength(200)))
export const Limit = Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))

/** A list's filters with its paging: an empty form field means "any" and is dropped before decoding. */
export const listQuery = <F extends Schema.Struct.Fields>(fields: F) => Schema.Struct({ ...fields, cursor: Cursor, limit: Limit })

export const UUID = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/))

/** The address of a list (or of its live section) with the given filters, paging included; unset values left out. */
export const listUrl = (path: string, query: Readonly<Record<string, string | number | undefined>>, live = false) => {
  const params = new URLSearchParams()
  for (const [name, value] of Object.entries(query)) if (value !== undefined) params.set(name, String(value))
  return `${path}${live ? "/live" : ""}?${params}`
}

/** One field of a list's filters form. */
export type Filter =
  | { readonly name: string; readonly label: string; readonly kind: "id"; readonly required?: boolean }
  | { readonly name: string; readonly label: string; readonly kind: "text"; readonly maxLength: number }
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
        return html`<label>${filter.label} <input name="${filter.name}" value="${value}" maxlength="${filter.maxLength}"></label>`
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

/**
 * A list page and its live section, the shape every family's list has: filters decoded by a closed schema, the
 * scope the list needs (a tenant, a stack) or a prompt for it, one keyset page of rows, links to the first and the
 * next page, and a section that htmx refreshes every five seconds.
 */
export const listPages = <Q extends { readonly cursor?: string | undefined; readonly limit?: number | undefined }, QI, S, I, E, R>(list: {
  readonly title: string
  readonly path: string
  readonly query: Schema.Schema<Q, QI>
  readonly filters: ReadonlyArray<Filter>
  /** What the list is of, when the filters say enough (a tenant, a stack); otherwise the form asks with `prompt`. */
  readonly scope: (query: Q) => S | undefined
  readonly prompt?: string
  readonly heading: (scope: S) => Html | string
  readonly page: (scope: S, query: Q & { readonly limit: number }) => Effect.Effect<Page<I>, E, R>
  readonly rows: (items: ReadonlyArray<I>) => Html
}) => {
  const readQuery = queryParams(list.query as Schema.Schema<Q, any>)

  const section = (scope: S, query: Q) =>
    Effect.map(list.page(scope, { ...query, limit: query.limit ?? PAGE_SIZE }), (page) => {
      const at = (cursor: string | undefined) => listUrl(list.path, { ...(query as Record<string, string | number | undefined>), cursor })
      return html`<section id="list" hx-get="${listUrl(list.path, query as Record<string, string | number | undefined>, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${list.rows(page.items)}
<p class="pager">${query.cursor === undefined ? "" : html`<a href="${at(undefined)}">First page</a>`}${page.nextCursor === null ? "" : html`<a rel="next" href="${at(page.nextCursor)}">Next page</a>`}</p>
</section>`
    })

  const full = signedInPage((viewer) =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const scope = list.scope(query)
      const form = filtersForm(list.path, list.filters, query)
      const body = scope === undefined
        ? html`<h1>${list.title}</h1>${form}<p class="muted">${list.prompt ?? ""}</p>`
        : html`<h1>${list.heading(scope)}</h1>${form}${yield* section(scope, query)}`
      return htmlResponse(layout({ title: list.title, current: list.path, viewer, body }))
    }))

  const live = signedInPage(() =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const scope = list.scope(query)
      return htmlResponse(scope === undefined ? html`` : yield* section(scope, query))
    }))

  return { list: full, listLive: live } as const
}

/** An item's page and its live section: the part that changes is one section htmx refreshes every five seconds. */
export const detailPages = <I, E, R>(detail: {
  readonly title: string
  readonly current: string
  readonly read: Effect.Effect<I, E, R>
  /** The item's own address; its live section is at `${path}/live`. */
  readonly path: (item: I) => string
  readonly heading: (item: I) => Html
  readonly section: (item: I) => Html
  /** Below the live section: actions, links. */
  readonly footer?: (item: I) => Html
}) => {
  const liveSection = (item: I) =>
    html`<section id="detail" hx-get="${detail.path(item)}/live" hx-trigger="every 5s" hx-swap="outerHTML">
${detail.section(item)}
</section>`
  const page = signedInPage((viewer) =>
    Effect.map(detail.read, (item): HttpServerResponse.HttpServerResponse =>
      htmlResponse(layout({
        title: detail.title,
        current: detail.current,
        viewer,
        body: html`<h1>${detail.heading(item)}</h1>
${liveSection(item)}
${detail.footer?.(item) ?? ""}`
      }))))
  const live = signedInPage(() => Effect.map(detail.read, (item) => htmlResponse(liveSection(item))))
  return { detail: page, detailLive: live } as const
}
