import { EnvelopeInbox, type StreamAuditEntry, type StreamSummary } from "@delivery/envelope-inbox"
import { requestCorrelationId } from "@delivery/core"
import { Identity, ProvisioningNotFound } from "@delivery/identity"
import { ProducerId, ProjectId, TenantId } from "@delivery/signer"
import { Effect, Option, Schema } from "effect"
import { htmlResponse, pathParams, redirect, refuse, signedInAction, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { csrfField, formatTime, layout } from "./Layout.ts"
import { detailPages, listPages, listQuery, listUrl } from "./ListPages.ts"
import { CONSOLE_ACTOR } from "./SignIn.ts"

const PATH = "/console/streams"

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
  `${PATH}/${encodeURIComponent(s.tenant)}/${encodeURIComponent(s.project)}/${encodeURIComponent(s.producer)}`

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

  /** One tenant's inbound streams (optionally one project's), by project and producer, a page at a time by keyset. */
  const lists = listPages({
    title: "Inbound streams",
    path: PATH,
    query: listQuery({ tenant: Schema.optional(TenantId), project: Schema.optional(ProjectId) }),
    filters: [
      { name: "tenant", label: "Tenant", kind: "id", required: true },
      { name: "project", label: "Project (optional)", kind: "id" }
    ],
    scope: ({ project, tenant }) => (tenant === undefined ? undefined : { tenant, project }),
    prompt: "Choose a tenant.",
    heading: ({ project, tenant }) => `Inbound streams · ${tenant}${project === undefined ? "" : ` / ${project}`}`,
    page: ({ tenant }, query) => inbox.streams(tenant, query),
    rows: streamRows
  })

  const notices: Record<"raised" | "unchanged", Html> = {
    raised: html`<p class="notice" data-notice="raise-floor">Replay floor raised: the sequences up to it are closed.</p>`,
    unchanged: html`<p class="notice" data-notice="raise-floor-unchanged">Nothing changed: the floor was already at or above the requested one (a floor is never lowered). The request is in the audit trail.</p>`
  }

  /** A stream's position, its times and its replay-floor audit trail; never an envelope or a payload. */
  const details = detailPages({
    title: "Inbound stream",
    current: PATH,
    read: Effect.gen(function* () {
      const path = yield* pathParams(StreamPath)
      const found = yield* inbox.streamSummary(path)
      if (Option.isNone(found)) return yield* refuse(404, "stream-not-found", "No such stream: its producer has sent nothing and no floor was set")
      const audit = yield* inbox.streamAudit(path)
      return { stream: found.value, audit }
    }),
    path: ({ stream }) => streamPath(stream),
    heading: ({ stream }) => `Stream ${stream.project} / ${stream.producer}`,
    notice: { query: DoneQuery, show: ({ done, outcome }) => (done === undefined ? "" : notices[outcome ?? "raised"]) },
    section: ({ audit, stream: s }) => html`<dl>
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
<p><a class="action" href="${streamPath(s)}/replay-floor">Raise the replay floor…</a></p>`,
    footer: ({ stream: s }) => html`<p><a href="${listUrl(PATH, { tenant: s.tenant, project: s.project })}">Back to the list</a></p>`
  })

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
<p><button type="submit" class="danger">Raise the floor</button> <a href="${Option.isSome(found) ? streamPath(path) : listUrl(PATH, { tenant: path.tenant })}">Cancel</a></p>
</form>`
      return htmlResponse(layout({ title: "Raise the replay floor", current: PATH, viewer, body }))
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

  return { ...lists, ...details, confirmRaise, raiseFloor } as const
})
