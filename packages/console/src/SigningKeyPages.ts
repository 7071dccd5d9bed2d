import { requestCorrelationId } from "@delivery/core"
import {
  AuditActor,
  Ed25519PublicKey,
  KeyId,
  type KeyActor,
  type KeyAuditEntry,
  Signer,
  type SigningKey,
  SigningKeyNotFound,
  TenantId
} from "@delivery/signer"
import { Effect, Schema } from "effect"
import { htmlResponse, pathParams, redirect, refuse, signedInAction, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { csrfField, formatTime, layout } from "./Layout.ts"
import { listUrl, scopedPages } from "./ListPages.ts"
import { CONSOLE_ACTOR } from "./SignIn.ts"

const PATH = "/console/signing-keys"

const ListQuery = Schema.Struct({
  tenant: Schema.optional(TenantId),
  done: Schema.optional(Schema.Literal("rotate", "revoke")),
  outcome: Schema.optional(Schema.Literal("rotated", "revoked", "unchanged"))
})

const TenantPath = Schema.Struct({ tenant: TenantId })
const KeyPath = Schema.Struct({ tenant: TenantId, keyId: KeyId })

/** What `POST /operator/tenants/:tenant/signing-keys/rotate` reads from its JSON body, here from the form. */
const RotateForm = Schema.Struct({ keyId: KeyId, publicKey: Ed25519PublicKey })

const tenantPath = (tenant: string) => `${PATH}/${encodeURIComponent(tenant)}`

const notices: Record<string, Html> = {
  "rotate:rotated": html`<p class="notice" data-notice="rotated">Rotated: the new key is active; the previous one is retired and keeps verifying until its replay window ends.</p>`,
  "rotate:unchanged": html`<p class="notice" data-notice="rotate-unchanged">Nothing changed: that key is already the active one.</p>`,
  "revoke:revoked": html`<p class="notice" data-notice="revoked">Revoked: the key no longer verifies any envelope.</p>`,
  "revoke:unchanged": html`<p class="notice" data-notice="revoke-unchanged">Nothing changed: the key was already revoked.</p>`
}

// Key ids, states and times only: the public key is not needed to act on a key, and private keys never reach the
// signer's table at all.
const keyRows = (tenant: string, keys: ReadonlyArray<SigningKey>): Html =>
  keys.length === 0
    ? html`<p class="muted empty">This tenant has no signing keys.</p>`
    : html`<table class="items"><thead><tr><th>key id</th><th>state</th><th>created</th><th>retired</th><th>revoked</th><th>verifies until</th><th></th></tr></thead><tbody>
${keys.map((k) => html`<tr data-key-id="${k.keyId}" data-state="${k.state}"><td><code>${k.keyId}</code></td><td class="state-${k.state}">${k.state}</td><td>${formatTime(k.createdAt)}</td><td>${formatTime(k.retiredAt)}</td><td>${formatTime(k.revokedAt)}</td><td>${k.state === "active" ? "while active" : formatTime(k.verifyUntil)}</td><td>${k.state === "revoked" ? "" : html`<a class="action" href="${tenantPath(tenant)}/${encodeURIComponent(k.keyId)}/revoke">Revoke…</a>`}</td></tr>`)}
</tbody></table>`

const auditTable = (audit: ReadonlyArray<KeyAuditEntry>): Html =>
  audit.length === 0
    ? html`<p class="muted">No key change recorded.</p>`
    : html`<table class="audit"><thead><tr><th>at</th><th>key id</th><th>action</th><th>outcome</th><th>actor</th><th>correlation id</th></tr></thead><tbody>
${audit.map((a) => html`<tr><td>${formatTime(a.at)}</td><td><code>${a.keyId}</code></td><td>${a.action}</td><td>${a.outcome}</td><td>${a.actor}</td><td><code>${a.correlationId}</code></td></tr>`)}
</tbody></table>`

/** Who acts and under which request: the same attribution as the operator routes, the console's actor. */
const attribution = Effect.map(requestCorrelationId, (correlationId): KeyActor => ({
  actor: AuditActor.make(CONSOLE_ACTOR),
  correlationId
}))

export const makeSigningKeyPages = Effect.gen(function* () {
  const signer = yield* Signer

  /**
   * A tenant's signing keys (ids, states, times) and the audit trail of their changes: every key at once, as the
   * signer lists them, so the section is not a keyset list.
   */
  const lists = scopedPages({
    title: "Signing keys",
    path: PATH,
    query: ListQuery,
    filters: [{ name: "tenant", label: "Tenant", kind: "id", required: true }],
    scope: (query) => query.tenant,
    prompt: "Choose a tenant.",
    heading: (tenant) => `Signing keys · ${tenant}`,
    notice: ({ done, outcome }) => (done === undefined || outcome === undefined ? "" : notices[`${done}:${outcome}`] ?? ""),
    section: (tenant) =>
      Effect.gen(function* () {
        const keys = yield* signer.keys(tenant)
        const audit = yield* signer.keyAudit(tenant)
        return html`<section id="keys" hx-get="${listUrl(PATH, { tenant }, true)}" hx-trigger="every 5s" hx-swap="outerHTML">
${keyRows(tenant, keys)}
<p><a class="action" href="${tenantPath(tenant)}/rotate">Rotate to a new key…</a></p>
<h2>Audit trail</h2>
<p class="muted">Key changes of this tenant, newest first (at most 100).</p>
${auditTable(audit)}
</section>`
      })
  })

  /** The rotation form: what rotating does (docs/controlplane-envelope.md, key states) and the new key's id and public key. */
  const rotateForm = signedInPage((viewer) =>
    Effect.gen(function* () {
      const { tenant } = yield* pathParams(TenantPath)
      const keys = yield* signer.keys(tenant)
      const active = keys.find((k) => k.state === "active")
      const body = html`<h1>Rotate the signing key of ${tenant}</h1>
<p>${active === undefined
        ? html`The tenant has no active key now: the new key becomes its active key.`
        : html`The new key becomes the tenant's active key. The active key <code>${active.keyId}</code> is retired: it signs nothing more and keeps verifying for the replay window (<code>SIGNER_REPLAY_WINDOW</code>), so envelopes signed before the rotation still verify while they may be replayed.`}</p>
<p>Producers then sign with the new key id. Rotation touches no inbound stream: identities, cursors and floors stay as they are. The rotation and its audit rows are recorded as <code>${CONSOLE_ACTOR}</code>.</p>
<p>The public key is the raw 32-byte Ed25519 public key as unpadded base64url (43 characters), the <code>publicKey</code> of the operator route. Never paste a private key.</p>
<form method="post" action="${tenantPath(tenant)}/rotate">
${csrfField(viewer)}
<label>New key id <input name="keyId" required pattern="[a-z0-9][a-z0-9_\\-]{0,63}" autocomplete="off"></label>
<label>New public key <input name="publicKey" required pattern="[A-Za-z0-9_\\-]{43}" size="50" autocomplete="off" spellcheck="false"></label>
<p><button type="submit" class="danger">Rotate</button> <a href="${listUrl(PATH, { tenant })}">Cancel</a></p>
</form>`
      return htmlResponse(layout({ title: "Rotate signing key", current: PATH, viewer, body }))
    }))

  /** Rotation through the same service call, transaction and audit rows as `POST /operator/tenants/.../signing-keys/rotate`. */
  const rotate = signedInAction(RotateForm, (_, form) =>
    Effect.gen(function* () {
      const { tenant } = yield* pathParams(TenantPath)
      const by = yield* attribution
      const change = yield* signer.rotateAs(tenant, form.keyId, form.publicKey, by).pipe(
        // The conflict's detail says what to do next (another key id, or the key is already retired or revoked).
        Effect.catchTag("KeyConflict", (conflict) => refuse(409, conflict.reason, `Refused: key-conflict (${conflict.detail})`))
      )
      yield* Effect.logInfo(`console action: signing key rotate ${change.outcome}`).pipe(
        Effect.annotateLogs({ tenant, keyId: form.keyId, actor: by.actor, correlationId: by.correlationId })
      )
      return redirect(listUrl(PATH, { tenant, done: "rotate", outcome: change.outcome === "applied" ? "rotated" : "unchanged" }))
    }))

  /** The confirmation step: what revoking does, and the form that does it. */
  const confirmRevoke = signedInPage((viewer) =>
    Effect.gen(function* () {
      const path = yield* pathParams(KeyPath)
      const key = (yield* signer.keys(path.tenant)).find((k) => k.keyId === path.keyId)
      if (key === undefined) return yield* refuse(404, "key-unknown", "No such signing key")
      const body = html`<h1>Revoke signing key <code>${key.keyId}</code> of ${path.tenant}?</h1>
<p>The key is ${key.state}${key.state === "revoked" ? " already: revoking it again changes nothing" : ""}.</p>
<p>A revoked key stops verifying at once: every envelope signed with it, replayed or late, is refused as <code>key-revoked</code>. It is never reactivated; its row stays until its replay window ends, then the purge sweep deletes it.${key.state === "active" ? html` It is the active key: until another key is rotated in, the tenant has none to sign with.` : ""}</p>
<p>The revocation is recorded in the audit trail as <code>${CONSOLE_ACTOR}</code>.</p>
<form method="post" action="${tenantPath(path.tenant)}/${encodeURIComponent(key.keyId)}/revoke">
${csrfField(viewer)}
<button type="submit" class="danger">Revoke</button> <a href="${listUrl(PATH, { tenant: path.tenant })}">Cancel</a>
</form>`
      return htmlResponse(layout({ title: "Revoke signing key", current: PATH, viewer, body }))
    }))

  /** Revocation through the same service call, transaction and audit row as `POST /operator/tenants/.../:keyId/revoke`. */
  const revoke = signedInAction(Schema.Struct({}), () =>
    Effect.gen(function* () {
      const path = yield* pathParams(KeyPath)
      const by = yield* attribution
      const change = yield* signer.revokeAs(path.tenant, path.keyId, by).pipe(
        Effect.catchTag("KeyRefused", (refused) =>
          Effect.fail(new SigningKeyNotFound({ reason: "key-unknown", tenant: refused.tenant, keyId: refused.keyId })))
      )
      yield* Effect.logInfo(`console action: signing key revoke ${change.outcome}`).pipe(
        Effect.annotateLogs({ tenant: path.tenant, keyId: path.keyId, actor: by.actor, correlationId: by.correlationId })
      )
      return redirect(listUrl(PATH, { tenant: path.tenant, done: "revoke", outcome: change.outcome === "applied" ? "revoked" : "unchanged" }))
    }))

  return { ...lists, rotateForm, rotate, confirmRevoke, revoke } as const
})
