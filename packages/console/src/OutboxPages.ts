import { type MessageId, MessageId as MessageIdSchema, MessageState, Outbox, type OutboxMessage } from "@delivery/outbox"
import { ProjectId, TenantId } from "@delivery/signer"
import { Effect, Schema } from "effect"
import { htmlResponse, pathParams, redirect, signedInAction, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { csrfField, formatTime, layout } from "./Layout.ts"
import { detailPages, listPages, listQuery, listUrl } from "./ListPages.ts"
import { CONSOLE_ACTOR } from "./SignIn.ts"

const PATH = "/console/outbox"

// The outbox's keyset positions are at most 128 characters; a longer one is not one of them.
const MessageCursor = Schema.optional(Schema.String.pipe(Schema.maxLength(128)))

const MessagePath = Schema.Struct({ tenant: TenantId, project: ProjectId, id: MessageIdSchema })

const messagePath = (m: { readonly tenant: string; readonly project: string; readonly id: string }) =>
  `${PATH}/${encodeURIComponent(m.tenant)}/${encodeURIComponent(m.project)}/${m.id}`

const nextAttempt = (m: OutboxMessage) => (m.state === "pending" ? formatTime(m.dueAt) : m.state === "delivering" ? `lease until ${formatTime(m.dueAt)}` : "—")

const messageRows = (items: ReadonlyArray<OutboxMessage>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No messages match.</p>`
    : html`<table class="items"><thead><tr><th>message</th><th>state</th><th class="num">attempts</th><th>next attempt</th><th>last code</th><th>created</th></tr></thead><tbody>
${items.map((m) => html`<tr data-id="${m.id}" data-state="${m.state}"><td><a href="${messagePath(m)}"><code>${m.id}</code></a></td><td class="state-${m.state}">${m.state}</td><td class="num">${m.attempt} / ${m.attemptCeiling}</td><td>${nextAttempt(m)}</td><td>${m.lastError ?? m.deadReason ?? "—"}</td><td>${formatTime(m.createdAt)}</td></tr>`)}
</tbody></table>`

export const makeOutboxPages = Effect.gen(function* () {
  const outbox = yield* Outbox

  /** The messages of one tenant/project, filtered by state, oldest first, 100 to a page by keyset. */
  const lists = listPages({
    title: "Outbox",
    path: PATH,
    query: listQuery(
      { tenant: Schema.optional(TenantId), project: Schema.optional(ProjectId), state: Schema.optional(MessageState) },
      MessageCursor
    ),
    filters: [
      { name: "tenant", label: "Tenant", kind: "id", required: true },
      { name: "project", label: "Project", kind: "id", required: true },
      { name: "state", label: "State", kind: "select", options: MessageState.literals }
    ],
    // Messages belong to one tenant's project: neither alone names a list.
    scope: ({ project, tenant }) => (tenant === undefined || project === undefined ? undefined : { tenant, project }),
    prompt: "Choose a tenant and a project.",
    heading: ({ project, tenant }) => `Outbox · ${tenant} / ${project}`,
    page: ({ project, tenant }, query) => outbox.messages(tenant, project, query),
    rows: messageRows
  })

  const readMessage = Effect.gen(function* () {
    const path = yield* pathParams(MessagePath)
    const message = yield* outbox.message(path.tenant, path.project, path.id as MessageId)
    const audit = yield* outbox.messageAudit(path.tenant, path.project, path.id as MessageId)
    return { message, audit }
  })

  /** A message's state, attempts, codes, next attempt and audit trail; never its envelope or the target's URL. */
  const details = detailPages({
    title: "Outbox message",
    current: PATH,
    read: readMessage,
    path: ({ message }) => messagePath(message),
    heading: ({ message }) => html`Message <code>${message.id}</code>`,
    notice: {
      query: Schema.Struct({ done: Schema.optional(Schema.Literal("redrive")) }),
      show: ({ done }) => (done === undefined ? "" : html`<p class="notice" data-notice="redriven">Redriven: the message is pending again with new attempts.</p>`)
    },
    section: ({ audit, message: m }) => html`<dl>
<dt>tenant / project</dt><dd>${m.tenant} / ${m.project}</dd>
<dt>state</dt><dd class="state state-${m.state}" data-state="${m.state}">${m.state}</dd>
<dt>attempts</dt><dd>${m.attempt} made, ${m.attemptCeiling} allowed (${m.maxAttempts} per enqueue or redrive)</dd>
<dt>next attempt</dt><dd>${nextAttempt(m)}</dd>
<dt>last code</dt><dd>${m.lastError ?? "—"}</dd>
<dt>dead-letter reason</dt><dd>${m.deadReason ?? "—"}</dd>
<dt>idempotency key</dt><dd><code>${m.idempotencyKey}</code></dd>
<dt>created</dt><dd>${formatTime(m.createdAt)}</dd>
<dt>delivered</dt><dd>${formatTime(m.deliveredAt)}</dd>
<dt>dead since</dt><dd>${formatTime(m.deadAt)}</dd>
</dl>
<h2>Audit trail</h2>
${audit.length === 0 ? html`<p class="muted">No operator action yet.</p>` : html`<table class="audit"><thead><tr><th>at</th><th>action</th><th>actor</th><th class="num">attempt</th><th>code</th></tr></thead><tbody>
${audit.map((a) => html`<tr><td>${formatTime(a.at)}</td><td>${a.action}</td><td>${a.actor}</td><td class="num">${a.attempt ?? "—"}</td><td>${a.detail ?? "—"}</td></tr>`)}
</tbody></table>`}
${m.state === "dead" ? html`<p><a class="action" href="${messagePath(m)}/redrive">Redrive this dead letter…</a></p>` : ""}`,
    footer: ({ message: m }) => html`<p><a href="${listUrl(PATH, { tenant: m.tenant, project: m.project })}">Back to the list</a></p>`
  })

  /** The confirmation step: what redrive does, and the form that does it. */
  const confirmRedrive = signedInPage((viewer) =>
    Effect.gen(function* () {
      const { message } = yield* readMessage
      const body = html`<h1>Redrive dead letter <code>${message.id}</code>?</h1>
<p>The message becomes pending again with the same id, envelope and idempotency key; its attempt counter continues (now ${message.attempt}) and ${message.maxAttempts} more attempts are allowed. The redrive is recorded in the audit trail as <code>${CONSOLE_ACTOR}</code>.</p>
<form method="post" action="${messagePath(message)}/redrive">
${csrfField(viewer)}
<button type="submit" class="danger">Redrive</button> <a href="${messagePath(message)}">Cancel</a>
</form>`
      return htmlResponse(layout({ title: "Redrive", current: PATH, viewer, body }))
    }))

  /** Redrive through the same service call, transaction and audit row as `POST /operator/outbox/.../redrive`. */
  const redrive = signedInAction(Schema.Struct({}), () =>
    Effect.gen(function* () {
      const path = yield* pathParams(MessagePath)
      const message = yield* outbox.redrive(path.tenant, path.project, path.id as MessageId, CONSOLE_ACTOR)
      yield* Effect.logInfo("console action: outbox redrive").pipe(
        Effect.annotateLogs({ tenant: path.tenant, project: path.project, messageId: message.id, actor: CONSOLE_ACTOR })
      )
      return redirect(`${messagePath(message)}?done=redrive`)
    }))

  return { ...lists, ...details, confirmRedrive, redrive } as const
})
