import { EnvelopeInbox, type StreamAuditEntry, type StreamSummary } from "@delivery/envelope-inbox"
import { requestCorrelationId } from "@delivery/core"
import { Identity, ProvisioningNotFound } from "@delivery/identity"
import { ProducerId, ProjectId, TenantId } from "@delivery/signer"
import { Effect, Option, Schema } from "effect"
import { htmlResponse, pathParams, queryParams, redirect, refuse, signedInAction, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { csrfField, formatTime, layout } from "./Layout.ts"
import { CONSOLE_ACTOR } from "./SignIn.ts"

const optionalOr = <A, I>(schema: Schema.Schema<A, I>) => Schema.optional(Schema.Union(schema, Schema.Literal("")))
const present = <A>(value: A | "" | undefined): A | undefined => (value === "" ? undefined : value)

const ListQuery = Schema.Struct({
  tenant: optionalOr(TenantId),
  project: optionalOr(ProjectId),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(200))),
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100)))
})

/** Streams per page unless the address asks for 1..100. */
const PAGE_SIZE = 50

const StreamPath = Schema.Struct({ tenant: TenantId, project: ProjectId, producer: ProducerId })
type StreamPath = typeof StreamPath.Type

// The same bounds as the operator route's `RaiseReplayFloor`; digits only, so "1e3" or " 7" is not a floor.
const FloorForm = Schema.Struct({
  floor: Schema.compose(Schema.String.pipe(Schema.pattern(/^\d{1,16}$/)), Schema.NumberFromString).pipe(
    Schema.int(),
    Schema.between(0, Number.MAX_SAFE_INTEGER)
  )
})

const DoneQuery = Schema.Struct({
  done: Schema.optional(Schema.Literal("raise-floor")),
  outcome: Schema.optional(Schema.Literal("raised", "unchanged"))
})

const streamPath = (s: { readonly tenant: string; readonly project: string; readonly producer: string }) =>
  `/console/streams/${encodeURIComponent(s.tenant)}/${encodeURIComponent(s.project)}/${encodeURIComponent(s.producer)}`

interface ListQuery {
  readonly tenant: string
  readonly project?: string | undefined
  readonly cursor?: string | undefined
  readonly limit?: number | undefined
}

const listUrl = (query: ListQuery, live = false) => {
  const params = new URLSearchParams({ tenant: query.tenant })
  if (query.project !== undefined) params.set("project", query.project)
  if (query.limit !== undefined) params.set("limit", String(query.limit))
  if (query.cursor !== undefined) params.set("cursor", query.cursor)
  return `/console/streams${live ? "/live" : ""}?${params}`
}

const filters = (query: { tenant?: string | undefined; project?: string | undefined }) =>
  html`<form class="filters" method="get" action="/console/streams">
<label>Tenant <input name="tenant" value="${query.tenant ?? ""}" required pattern="[a-z0-9][a-z0-9_\\-]{0,63}"></label>
<label>Project (optional) <input name="project" value="${query.project ?? ""}" pattern="[a-z0-9][a-z0-9_\\-]{0,63}"></label>
<button type="submit">Show</button>
</form>`

// Sequences above the cursor are retained but not contiguous: some below them never arrived (yet).
const gaps = (s: StreamSummary) => (s.highSequence > s.cursor ? html` <span class="state-gaps" data-gaps="true">gaps above the cursor</span>` : "")

const streamRows = (items: ReadonlyArray<StreamSummary>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No streams match.</p>`
    : html`<table class="items"><thead><tr><th>project</th><th>producer</th><th class="num">contiguous cursor</th><th class="num">replay floor</th><th class="num">high sequence</th><th>last received</th></tr></thead><tbody>
${items.map((s) => html`<tr data-project="${s.project}" data-producer="${s.producer}"><td>${s.project}</td><td><a href="${streamPath(s)}">${s.producer}</a></td><td class="num">${s.cursor}</td><td class="num">${s.replayFloor}</td><td class="num">${s.highSequence}${gaps(s)}</td><td>${formatTime(s.lastReceivedAt)}</td></tr>`)}
</tbody></table>`

const auditTable = (audit: ReadonlyArray<StreamAuditEntry>): Html =>
  audit.length === 0
    ? html`<p class="muted">No floor request yet.</p>`
    : html`<table class="audit"><thead><tr><th>at</th><th>action</th><th>outcome</th><th class="num">floor before</th><th class="num">floor after</th><th class="num">requested</th><th>actor</th><th>correlation id</th></tr></thead><tbody>
${audit.map((a) => html`<tr><td>${formatTime(a.at)}</td><td>${a.action}</td><td>${a.outcome}</td><td class="num">${a.floorBefore}</td><td class="num">${a.floorAfter}</td><td class="num">${a.requested}</td><td>${a.actor}</td><td><code>${a.correlationId}</code></td></tr>`)}
</tbody></table>`

export const makeStreamPages = Effect.gen(function* () {
  const inbox = yield* EnvelopeInbox
  const identity = yield* Identity

  const listSection = (query: ListQuery & { readonly tenant: TenantId; readonly project?: ProjectId | undefined }) =>
    Effect.map(inbox.streams(query.tenant, { ...query, limit: query.limit ?? PAGE_SIZE }), (page) =>
      html`<section id="list" hx-get="${listUrl(query, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${streamRows(page.items)}
<p class="pager">${query.cursor === undefined ? "" : html`<a href="${listUrl({ ...query, cursor: undefined })}">First page</a>`}${page.nextCursor === null ? "" : html`<a rel="next" href="${listUrl({ ...query, cursor: page.nextCursor })}">Next page</a>`}</p>
</section>`)

  const readQuery = Effect.map(queryParams(ListQuery), (q) => ({
    tenant: present(q.tenant),
    project: present(q.project),
    cursor: q.cursor,
    limit: q.limit
  }))

  /** One tenant's inbound streams (optionally one project's), by project and producer, a page at a time by keyset. */
  const list = signedInPage((viewer) =>
    Effect.gen(function* () {
      const query = yield* readQuery
      const body = query.tenant === undefined
        ? html`<h1>Inbound streams</h1>${filters(query)}<p class="muted">Choose a tenant.</p>`
        : html`<h1>Inbound streams · ${query.tenant}${query.project === undefined ? "" : ` / ${query.project}`}</h1>${filters(query)}${yield* listSection({ ...query, tenant: query.tenant })}`
      return htmlResponse(layout({ title: "Inbound streams", current: "/console/streams", viewer, body }))
    }))

  const listLive = signedInPage(() =>
    Effect.gen(function* () {
      const query = yield* readQuery
      if (query.tenant === undefined) return htmlResponse(html``)
      return htmlResponse(yield* listSection({ ...query, tenant: query.tenant }))
    }))

  const detailSection = (s: StreamSummary, audit: ReadonlyArray<StreamAuditEntry>) =>
    html`<section id="detail" hx-get="${streamPath(s)}/live" hx-trigger="every 5s" hx-swap="outerHTML">
<dl>
<dt>tenant / project / producer</dt><dd>${s.tenant} / ${s.project} / ${s.producer}</dd>
<dt>contiguous cursor</dt><dd data-cursor="${s.cursor}">${s.cursor} (every sequence up to it is retained or closed by the floor)</dd>
<dt>replay floor</dt><dd data-replay-floor="${s.replayFloor}">${s.replayFloor} (sequences up to it are closed)</dd>
<dt>high sequence</dt><dd data-high-sequence="${s.highSequence}">${s.highSequence}${gaps(s)}</dd>
<dt>created</dt><dd>${formatTime(s.createdAt)}</dd>
<dt>last received</dt><dd>${formatTime(s.lastReceivedAt)}</dd>
</dl>
<h2>Audit trail</h2>
<p class="muted">Replay-floor requests, newest first (at most 100).</p>
${auditTable(audit)}
<p><a class="action" href="${streamPath(s)}/replay-floor">Raise the replay floor…</a></p>
</section>`

  const notices: Record<"raised" | "unchanged", Html> = {
    raised: html`<p class="notice" data-notice="raise-floor">Replay floor raised: the sequences up to it are closed.</p>`,
    unchanged: html`<p class="notice" data-notice="raise-floor-unchanged">Nothing changed: the floor was already at or above the requested one (a floor is never lowered). The request is in the audit trail.</p>`
  }

  const detailBody = (s: StreamSummary, audit: ReadonlyArray<StreamAuditEntry>, done: Html | "") =>
    html`<h1>Stream ${s.project} / ${s.producer}</h1>
${done}
${detailSection(s, audit)}
<p><a href="${listUrl({ tenant: s.tenant, project: s.project })}">Back to the list</a></p>`

  const readStream = Effect.gen(function* () {
    const path = yield* pathParams(StreamPath)
    const found = yield* inbox.streamSummary(path)
    if (Option.isNone(found)) return yield* refuse(404, "stream-not-found", "No such stream: its producer has sent nothing and no floor was set")
    const audit = yield* inbox.streamAudit(path)
    return { path, stream: found.value, audit }
  })

  /** A stream's position, its times and its replay-floor audit trail; never an envelope or a payload. */
  const detail = signedInPage((viewer) =>
    Effect.gen(function* () {
      const { audit, stream } = yield* readStream
      const done = yield* queryParams(DoneQuery)
      const notice = done.done === undefined ? "" : notices[done.outcome ?? "raised"]
      return htmlResponse(layout({ title: "Inbound stream", current: "/console/streams", viewer, body: detailBody(stream, audit, notice) }))
    }))

  const detailLive = signedInPage(() =>
    Effect.map(readStream, ({ audit, stream }) => htmlResponse(detailSection(stream, audit))))

  /**
   * The confirmation step: what a floor does (docs/controlplane-inbound.md, "Replay floor"), and the form. A stream
   * not seen yet can be given a floor up front, as the operator route allows.
   */
  const confirmRaise = signedInPage((viewer) =>
    Effect.gen(function* () {
      const path = yield* pathParams(StreamPath)
      const found = yield* inbox.streamSummary(path)
      const current = Option.match(found, {
        onNone: () => html`<p>This stream has received nothing yet: raising its floor creates it, with its cursor at the floor.</p>`,
        onSome: (s) => html`<p>Now: replay floor <strong data-replay-floor="${s.replayFloor}">${s.replayFloor}</strong>, contiguous cursor ${s.cursor}, high sequence ${s.highSequence}.</p>`
      })
      const body = html`<h1>Raise the replay floor of ${path.project} / ${path.producer}?</h1>
${current}
<p>A replay floor F closes sequences 1..F. From then on a sequence at or below F is acknowledged only as a duplicate of an identity retained before; anything else there is refused as <code>sequence-below-replay-floor</code>. Raising it writes off sequences the producer will never send (for example after a device was restored from an old backup and restarted its numbering above them): the contiguous cursor jumps to at least F and runs on through the retained sequences above it.</p>
<p>A floor is never lowered: a value at or below the current floor changes nothing (recorded as <code>unchanged</code>). Either way the request is recorded in the stream's audit trail as <code>${CONSOLE_ACTOR}</code>.</p>
<form method="post" action="${streamPath(path)}/replay-floor">
${csrfField(viewer)}
<label>New replay floor <input type="number" name="floor" required min="0" max="${Number.MAX_SAFE_INTEGER}" step="1"${Option.match(found, { onNone: () => "", onSome: (s) => html` value="${s.replayFloor}"` })}></label>
<p><button type="submit" class="danger">Raise the floor</button> <a href="${Option.isSome(found) ? streamPath(path) : listUrl({ tenant: path.tenant })}">Cancel</a></p>
</form>`
      return htmlResponse(layout({ title: "Raise the replay floor", current: "/console/streams", viewer, body }))
    }))

  /** The same tenant check, service call, transaction and audit row as `POST /operator/tenants/.../replay-floor`. */
  const raiseFloor = signedInAction(FloorForm, (_, form) =>
    Effect.gen(function* () {
      const path: StreamPath = yield* pathParams(StreamPath)
      const correlationId = yield* requestCorrelationId
      // A stream is created by its first floor; never for a tenant that does not exist.
      if (!(yield* identity.tenantExists(path.tenant))) {
        return yield* new ProvisioningNotFound({ reason: "tenant-not-found", correlationId })
      }
      const raised = yield* inbox.raiseReplayFloorAs(path, form.floor, { actor: CONSOLE_ACTOR, correlationId })
      const outcome = raised.outcome === "applied" ? "raised" : "unchanged"
      yield* Effect.logInfo(`console action: raise replay floor ${raised.outcome}`).pipe(
        Effect.annotateLogs({ tenant: path.tenant, project: path.project, producer: path.producer, actor: CONSOLE_ACTOR })
      )
      return redirect(`${streamPath(path)}?done=raise-floor&outcome=${outcome}`)
    }))

  return { list, listLive, detail, detailLive, confirmRaise, raiseFloor } as const
})
