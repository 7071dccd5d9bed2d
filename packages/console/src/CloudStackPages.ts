import { requestCorrelationId } from "@delivery/core"
import { CloudStacks, type StackAuditView, StackId, StackState, type StackView } from "@delivery/idle-wake"
import { Effect, Option, Schema } from "effect"
import { htmlResponse, pathParams, redirect, refuse, signedInAction, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { csrfField, layout } from "./Layout.ts"
import { detailPages, listPages, listQuery } from "./ListPages.ts"
import { CONSOLE_ACTOR } from "./SignIn.ts"

const PATH = "/console/stacks"

// The keyset position is the last stack id of the page before.
const StackCursor = Schema.optional(StackId)

const StackPath = Schema.Struct({ stack: StackId })

/** The operator routes an operator may take from the console, each confirmed first. */
const StackAction = Schema.Literal("hold", "release", "suspend", "resume", "sleep", "recover", "archive")
type StackAction = typeof StackAction.Type
const ActionPath = Schema.Struct({ stack: StackId, action: StackAction })

/** What an action answered, as the detail page's notice shows it: a sleep's outcome or a stop's. */
const Outcome = Schema.Literal("done", "asleep", "refused", "stop-uncertain", "not-awake", "lease-lost", "stopped", "uncertain", "failed")
type Outcome = typeof Outcome.Type

const DoneQuery = Schema.Struct({
  done: Schema.optional(StackAction),
  outcome: Schema.optional(Outcome),
  code: Schema.optional(Schema.String.pipe(Schema.pattern(/^[a-z0-9-]{1,64}$/)))
})

// One stack's pages are under the singular, so that no stack id can collide with the list's own `/live`.
const stackPath = (stack: string) => `/console/stack/${encodeURIComponent(stack)}`

const receiptCell = (s: StackView) =>
  s.receipt === null ? html`<span data-receipt="none">none</span>` : html`<span data-receipt="stored">stored (${s.receipt.keys} keys, ${s.receipt.connectorBindings} connector bindings)</span>`

const stackRows = (items: ReadonlyArray<StackView>): Html =>
  items.length === 0
    ? html`<p class="muted empty">No stacks match.</p>`
    : html`<table class="items"><thead><tr><th>stack</th><th>state</th><th>since</th><th>recovery hold</th><th>receipt</th></tr></thead><tbody>
${items.map((s) => html`<tr data-stack="${s.stack}" data-state="${s.state}"><td><a href="${stackPath(s.stack)}">${s.stack}</a></td><td class="state-${s.state}">${s.state}</td><td>${s.stateChangedAt}</td><td>${s.recoveryHold ? "set" : "—"}</td><td>${receiptCell(s)}</td></tr>`)}
</tbody></table>`

/** Codes, attempts and hosts of an audit row; the actor has a column of its own. */
const detailText = (detail: Readonly<Record<string, unknown>>) =>
  Object.entries(detail).filter(([key]) => key !== "actor").map(([key, value]) => `${key}=${String(value)}`).join(" ") || "—"

const auditTable = (audit: ReadonlyArray<StackAuditView>): Html =>
  audit.length === 0
    ? html`<p class="muted">No change recorded yet.</p>`
    : html`<table class="audit"><thead><tr><th>at</th><th>action</th><th>actor</th><th>detail</th><th>correlation id</th></tr></thead><tbody>
${audit.map((a) => html`<tr data-action="${a.action}"><td>${a.at}</td><td>${a.action}</td><td data-actor="${typeof a.detail.actor === "string" ? a.detail.actor : ""}">${typeof a.detail.actor === "string" ? a.detail.actor : "—"}</td><td>${detailText(a.detail)}</td><td><code>${a.correlationId ?? "—"}</code></td></tr>`)}
</tbody></table>`

interface ActionText {
  readonly title: string
  readonly button: string
  /** Whether the stack's state now allows it; the service decides again when it is posted. */
  readonly offered: (s: StackView) => boolean
  readonly explain: Html
}

// What each action does, from docs/idle-wake-cloud.md ("Transitions", "Operator routes").
const ACTIONS: Record<StackAction, ActionText> = {
  hold: {
    title: "Set a recovery hold on",
    button: "Set the hold",
    offered: (s) => s.state !== "archived" && !s.recoveryHold,
    explain: html`<p>While the hold is set the stack is never woken: requests to it are refused <code>recovery-hold</code> and broker events wait. An awake stack is still forwarded to. Nothing else of the stack changes.</p>`
  },
  release: {
    title: "Release the recovery hold of",
    button: "Release the hold",
    offered: (s) => s.state !== "archived" && s.recoveryHold,
    explain: html`<p>Wakes are admitted again for keys of the stored receipt, and waiting broker events may wake the stack.</p>`
  },
  suspend: {
    title: "Suspend",
    button: "Suspend",
    offered: (s) => s.state !== "suspended" && s.state !== "archived",
    explain: html`<p>The stack becomes <code>suspended</code>: any sleep cycle or wake in flight is fenced off, its receipt is cleared, then its compute is stopped. Requests are refused <code>stack-suspended</code> until it is resumed; nothing wakes it.</p>`
  },
  resume: {
    title: "Resume",
    button: "Resume",
    offered: (s) => s.state === "suspended",
    explain: html`<p>The stack's compute is started and must be ready within the readiness wait; only then is the stack <code>awake</code> and forwarded to again.</p>`
  },
  sleep: {
    title: "Run a sleep cycle for",
    button: "Run the cycle",
    offered: (s) => s.state === "awake",
    explain: html`<p>One sleep cycle now: two signed drain reads of the tenant, the comparison of their proofs, the receipt stored, then the compute stopped. The tenant's own blockers (recent API activity, requests in flight, pending work) refuse it, and the stack stays awake.</p>`
  },
  recover: {
    title: "Recover",
    button: "Recover",
    offered: (s) => s.state === "stop-uncertain" || s.state === "stopping",
    explain: html`<p>After an uncertain stop (or a stop whose cycle's lease ended): the compute provider is asked whether the stack runs. Stopped: <code>asleep</code>, the receipt kept. Running: <code>awake</code>, the receipt cleared.</p>`
  },
  archive: {
    title: "Archive",
    button: "Archive",
    offered: (s) => s.state !== "archived",
    explain: html`<p>Archiving is the end: the stack's hosts are removed and its receipt cleared in one transaction, then its compute is stopped. No route or operation changes it afterwards; its row and audit trail stay.</p>`
  }
}

const ACTION_ORDER: ReadonlyArray<StackAction> = ["sleep", "hold", "release", "recover", "suspend", "resume", "archive"]

const notices: Record<Outcome, (action: StackAction, code: string | undefined) => Html> = {
  done: (action) => html`<p class="notice" data-notice="${action}">Done: ${action}. The change is in the audit trail.</p>`,
  asleep: () => html`<p class="notice" data-notice="sleep">The stack is asleep: its receipt is stored and its compute stopped.</p>`,
  refused: (_, code) => html`<p class="notice" data-notice="sleep-refused">The cycle was refused (<code>${code ?? "refused"}</code>): the stack is awake, without a receipt.</p>`,
  "stop-uncertain": (_, code) => html`<p class="notice" data-notice="sleep-stop-uncertain">The stop could not be confirmed (<code>${code ?? "stop-uncertain"}</code>): the receipt is kept; recover the stack later.</p>`,
  "not-awake": () => html`<p class="notice" data-notice="sleep-not-awake">Nothing changed: the stack was not awake, or another cycle holds its lock.</p>`,
  "lease-lost": () => html`<p class="notice" data-notice="sleep-lease-lost">Another operation moved the stack first; this cycle changed nothing more.</p>`,
  stopped: (action) => html`<p class="notice" data-notice="${action}">Done: ${action}; the compute is stopped.</p>`,
  uncertain: (action) => html`<p class="notice" data-notice="${action}-uncertain">Done: ${action}; the compute's stop could not be confirmed.</p>`,
  failed: (action) => html`<p class="notice" data-notice="${action}-stop-failed">Done: ${action}; the compute provider could not stop the compute (it still runs).</p>`
}

interface ActionResult {
  readonly outcome: Outcome
  /** The refusal or provider code of a sleep cycle that did not end asleep. */
  readonly code: string | undefined
}

type ActionError =
  | Effect.Effect.Error<ReturnType<CloudStacks["resume"]>>
  | Effect.Effect.Error<ReturnType<CloudStacks["suspend"]>>
  | Effect.Effect.Error<ReturnType<CloudStacks["sleep"]>>
  | Effect.Effect.Error<ReturnType<CloudStacks["recover"]>>

export const makeCloudStackPages = Effect.gen(function* () {
  const stacks = yield* CloudStacks

  /** Every stack by id, optionally in one state, a page at a time by keyset. */
  const lists = listPages({
    title: "Stacks",
    path: PATH,
    query: listQuery({ state: Schema.optional(StackState) }, StackCursor),
    filters: [{ name: "state", label: "State", kind: "select", options: StackState.literals }],
    // Every stack is in one list: the state filter only narrows it.
    scope: ({ state }) => ({ state }),
    heading: ({ state }) => `Stacks${state === undefined ? "" : ` · ${state}`}`,
    page: (_, query) => stacks.page({ state: query.state, after: query.cursor, limit: query.limit }),
    rows: stackRows
  })

  /** A stack's state, fences, hosts and receipt counts, with its audit trail; never the receipt's keys. */
  const details = detailPages({
    title: "Stack",
    current: PATH,
    read: Effect.gen(function* () {
      const path = yield* pathParams(StackPath)
      const found = yield* stacks.detail(path.stack)
      if (Option.isNone(found)) return yield* refuse(404, "stack-unknown", "No such stack")
      return found.value
    }),
    path: (s) => stackPath(s.stack),
    heading: (s) => `Stack ${s.stack}`,
    notice: { query: DoneQuery, show: ({ code, done, outcome }) => (done === undefined ? "" : notices[outcome ?? "done"](done, code)) },
    section: (s) => html`<dl>
<dt>state</dt><dd class="state state-${s.state}" data-state="${s.state}">${s.state}</dd>
<dt>since</dt><dd data-state-changed-at="${s.stateChangedAt}">${s.stateChangedAt}</dd>
<dt>recovery hold</dt><dd data-recovery-hold="${String(s.recoveryHold)}">${s.recoveryHold ? "set: no wake" : "none"}</dd>
<dt>hosts</dt><dd>${s.hosts.length === 0 ? "none" : s.hosts.map((host) => html`<code data-host="${host}">${host}</code> `)}</dd>
<dt>receipt</dt><dd>${s.receipt === null ? html`<span data-receipt="none">none</span>` : html`<span data-receipt="stored">stored ${s.receipt.storedAt}</span>: <span data-receipt-keys="${s.receipt.keys}">${s.receipt.keys}</span> projected keys, <span data-receipt-bindings="${s.receipt.connectorBindings}">${s.receipt.connectorBindings}</span> connector bindings`}</dd>
<dt>profiles</dt><dd>${s.profiles.join(", ") || "none"}</dd>
<dt>upstream</dt><dd>${s.upstream ?? "—"}</dd>
<dt>sleep operation</dt><dd data-op-attempt="${s.opAttempt}">attempt ${s.opAttempt}${s.opLeaseExpiresAt === null ? "" : `, lease until ${s.opLeaseExpiresAt}`}</dd>
<dt>wake</dt><dd data-wake-attempt="${s.wakeAttempt}">attempt ${s.wakeAttempt}${s.wakeLeaseExpiresAt === null ? "" : `, lease until ${s.wakeLeaseExpiresAt}`}</dd>
<dt>registered</dt><dd>${s.createdAt}</dd>
</dl>
<p class="actions">${ACTION_ORDER.filter((action) => ACTIONS[action].offered(s)).map((action) =>
    html`<a class="action" data-offer="${action}" href="${stackPath(s.stack)}/${action}">${ACTIONS[action].button}…</a> `)}</p>
<h2>Audit trail</h2>
<p class="muted">Every change of the stack, newest first (at most 100): codes, attempts and hosts, never a key or a fingerprint.</p>
${auditTable(s.audit)}`,
    footer: () => html`<p><a href="${PATH}">Back to the list</a></p>`
  })

  /** The confirmation step: what the action does, the stack's state now, and the form. */
  const confirm = signedInPage((viewer) =>
    Effect.gen(function* () {
      const { action, stack } = yield* pathParams(ActionPath)
      const found = yield* stacks.detail(stack)
      if (Option.isNone(found)) return yield* refuse(404, "stack-unknown", "No such stack")
      const s = found.value
      const text = ACTIONS[action]
      const body = html`<h1>${text.title} stack ${s.stack}?</h1>
<p>Now: <strong class="state-${s.state}" data-state="${s.state}">${s.state}</strong> since ${s.stateChangedAt}, recovery hold ${s.recoveryHold ? "set" : "none"}.${text.offered(s) ? "" : html` <strong>Its state does not allow this now: the request will be refused and change nothing.</strong>`}</p>
${text.explain}
<p>The change is recorded in the stack's audit trail as <code>${CONSOLE_ACTOR}</code>.</p>
<form method="post" action="${stackPath(s.stack)}/${action}">
${csrfField(viewer)}
<button type="submit" class="danger">${text.button}</button> <a href="${stackPath(s.stack)}">Cancel</a>
</form>`
      return htmlResponse(layout({ title: text.button, current: PATH, viewer, body }))
    }))

  const done: ActionResult = { outcome: "done", code: undefined }
  const stopped = (view: { readonly stop: "Stopped" | "Uncertain" | "Failed" }): ActionResult =>
    ({ outcome: view.stop === "Stopped" ? "stopped" : view.stop === "Uncertain" ? "uncertain" : "failed", code: undefined })

  const run = (action: StackAction, stack: StackId, correlationId: string): Effect.Effect<ActionResult, ActionError> => {
    switch (action) {
      case "hold":
      case "release":
        return Effect.as(stacks.setRecoveryHold(stack, action === "hold", correlationId, CONSOLE_ACTOR), done)
      case "suspend":
        return Effect.map(stacks.suspend(stack, correlationId, CONSOLE_ACTOR), stopped)
      case "archive":
        return Effect.map(stacks.archive(stack, correlationId, CONSOLE_ACTOR), stopped)
      case "resume":
        return Effect.as(stacks.resume(stack, correlationId, CONSOLE_ACTOR), done)
      case "recover":
        return Effect.as(stacks.recover(stack, correlationId, CONSOLE_ACTOR), done)
      case "sleep":
        return Effect.map(stacks.sleep(stack, correlationId, CONSOLE_ACTOR), (slept) => ({
          outcome: slept.outcome,
          code: "code" in slept ? slept.code : undefined
        }))
    }
  }

  /** Each action through the same service call, fence and audit row as its `POST /operator/cloud/stacks/...` route. */
  const act = signedInAction(Schema.Struct({}), () =>
    Effect.gen(function* () {
      const { action, stack } = yield* pathParams(ActionPath)
      const correlationId = yield* requestCorrelationId
      const result = yield* run(action, stack, correlationId).pipe(
        Effect.catchTags({
          CloudNotFound: () => refuse(404, "stack-unknown", "No such stack"),
          ComputeStartFailed: () => refuse(503, "compute-unavailable", "The compute provider could not start the stack; nothing was changed")
        })
      )
      yield* Effect.logInfo(`console action: stack ${action} ${result.outcome}`).pipe(
        Effect.annotateLogs({ stack, actor: CONSOLE_ACTOR, correlationId })
      )
      const params = new URLSearchParams({ done: action, outcome: result.outcome })
      if (result.code !== undefined && /^[a-z0-9-]{1,64}$/.test(result.code)) params.set("code", result.code)
      return redirect(`${stackPath(stack)}?${params}`)
    }))

  return { ...lists, ...details, confirm, act } as const
})
