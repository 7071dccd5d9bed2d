import type { Envelope } from "@delivery/signer"
import type { LoopbackDelivery, RecordedRequest } from "@delivery/testing"
import { type Accepted, type States, tally } from "./Final.ts"
import { TENANT } from "./Fixtures.ts"
import { type Family, type LedgerReport, readLedger } from "./Ledger.ts"
import type { InboxRow, Snapshot } from "./Reads.ts"
import { acknowledged, type EnvelopeSend } from "./Work.ts"

// The primary scenario's verdicts once the work has stopped moving: each family's final state against its spec,
// what the providers received against the record of accepted work, and the inbound envelopes against their
// acknowledgements. Details are counts and codes only.

export type Check = (name: string, ok: boolean, detail?: string) => boolean

/** Each family's final state against its spec, given what was claimed at the kill. */
export const workVerdicts = (check: Check, states: States, accepted: Accepted, atKill: Snapshot) => {
  check(
    "every outbox message is delivered (spec 000)",
    [...states.messages.values()].every((s) => s === "delivered") && states.messages.size === accepted.messages.length,
    tally(states.messages.values())
  )
  // Spec 002: a reset whose claim was in flight at the kill is quarantined (stale-claim) by the next process and
  // never sent again; every other reset is delivered. A row that had already ended at the kill keeps its state.
  const inFlight = new Set(atKill.resets.filter((r) => r.state === "sending").map((r) => r.id))
  const endedAtKill = new Map(atKill.resets.filter((r) => r.state !== "sending" && r.state !== "pending").map((r) => [r.id, r]))
  const asExpected = states.resets.filter((r) => {
    const ended = endedAtKill.get(r.id)
    if (ended !== undefined) return r.state === ended.state && r.reason === ended.reason
    return inFlight.has(r.id) ? r.state === "quarantined" && r.reason === "stale-claim" : r.state === "delivered"
  })
  check(
    "every reset mail is delivered, except a claim in flight at the kill: quarantined with reason stale-claim (spec 002)",
    asExpected.length === accepted.resets.length && states.resets.length === accepted.resets.length,
    `${tally(states.resets.map((r) => (r.reason === null ? r.state : `${r.state}/${r.reason}`)))}; in flight at the kill ${inFlight.size}, ended before it ${endedAtKill.size}`
  )
  check(
    "every receipt effect is done: file promotion, staged-copy deletion, audit check, notification (spec 002)",
    [...states.receipts.values()].every((effects) => effects.length === 4 && effects.every((s) => s === "done")),
    tally([...states.receipts.values()].flat())
  )
  check(
    "a receipt's earlier effects complete before its later ones (spec 002): completion times follow the effects' order",
    states.receiptsInOrder.size === states.receipts.size && [...states.receiptsInOrder.values()].every(Boolean),
    `${[...states.receiptsInOrder.values()].filter(Boolean).length}/${states.receipts.size} receipts in order`
  )
  check(
    "every team-application notification is delivered (spec 002)",
    [...states.applications.values()].every((ns) => ns.length === 2 && ns.every((s) => s === "delivered")),
    tally([...states.applications.values()].flat())
  )
}

const parseJson = (text: string): any => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

export interface ProviderView {
  /** Every request before the providers recovered (the loopback's record is reset then). */
  readonly before: ReadonlyArray<RecordedRequest>
  readonly after: ReadonlyArray<RecordedRequest>
  /** What the recovered providers accepted, each key once. */
  readonly deliveries: ReadonlyArray<LoopbackDelivery>
  readonly acceptedKeys: ReadonlyMap<string, Family>
  readonly accepted: Accepted
  readonly states: States
  readonly hooksPath: string
  readonly unknownAddresses: ReadonlyArray<string>
}

/** What the providers received, against the record of accepted work. */
export const providerVerdicts = (check: Check, view: ProviderView): LedgerReport => {
  const { after, accepted, states } = view
  const all = [...view.before, ...after]
  const ledger = readLedger(all, view.acceptedKeys, view.hooksPath)
  check(
    "every provider request carries the idempotency key of accepted work, on its family's provider (nothing unaccepted is delivered)",
    ledger.unaccepted === 0 && ledger.wrongPath === 0,
    `${ledger.total} requests, ${ledger.unaccepted} without accepted work, ${ledger.wrongPath} on another path`
  )
  check(
    "each provider idempotency key carries one identical payload (byte-identical bodies on every request)",
    ledger.differingKeys === 0,
    `${ledger.byKey.size} keys, ${ledger.differingKeys} with differing bodies`
  )
  check(
    "no mail was sent to an address without an enabled account",
    view.unknownAddresses.every((address) => all.every((r) => !r.bodyText.includes(address))),
    `${view.unknownAddresses.length} unknown addresses`
  )
  const quarantined = new Set(states.resets.filter((r) => r.state === "quarantined").map((r) => r.id))
  check(
    "a quarantined reset is never sent again after the kill",
    after.every((r) => r.idempotencyKey === undefined || !quarantined.has(r.idempotencyKey)),
    `${quarantined.size} quarantined`
  )
  const shouldBeDelivered = new Set([
    ...accepted.messages.map((m) => m.id),
    ...states.resets.filter((r) => r.state === "delivered").map((r) => r.id),
    ...accepted.receipts.map((r) => r.notifyKey),
    ...accepted.applications.flatMap((app) => app.notificationKeys)
  ])
  const once = [...shouldBeDelivered].filter((k) => view.deliveries.filter((d) => d.idempotencyKey === k).length === 1).length
  check(
    "every piece of work recorded as delivered was acknowledged by its provider under its own key",
    once === shouldBeDelivered.size && view.deliveries.length === shouldBeDelivered.size,
    `${once}/${shouldBeDelivered.size} keys acknowledged, ${view.deliveries.length} provider deliveries`
  )
  // A webhook is the envelope enqueued under its message id, nothing else.
  const enqueuedAs = new Map(accepted.messages.map((m) => [m.id, m.idempotencyKey]))
  const webhooks = after.filter((r) => r.path === view.hooksPath)
  check(
    "every webhook carries the envelope enqueued under its message id (webhook-id = Idempotency-Key)",
    webhooks.length > 0 && webhooks.every((r) => {
      const body = parseJson(r.bodyText)
      return r.headers["webhook-id"] === r.idempotencyKey && body?.idempotencyKey === enqueuedAs.get(r.idempotencyKey ?? "") &&
        body?.route?.tenant === TENANT
    }),
    `${webhooks.length} webhook requests after the restart`
  )
  return ledger
}

/** The inbound envelopes as the inbox holds them; answers how many were acknowledged before the kill. */
export const inboxVerdicts = (check: Check, view: {
  readonly inbox: ReadonlyArray<InboxRow>
  /** Every first send, before and across the kill. */
  readonly sends: ReadonlyArray<EnvelopeSend>
  readonly envelopes: ReadonlyArray<Envelope>
  readonly byIngress: number
}) => {
  const rowsOf = (envelope: Envelope) =>
    view.inbox.filter((r) => r.producer === (envelope.route.producer as string) && r.event_id === envelope.eventId)
  const acknowledgedBeforeKill = view.sends.filter(acknowledged)
  check(
    "every inbound envelope acknowledged before the kill is present exactly once afterwards, as acknowledged",
    acknowledgedBeforeKill.every((s) => {
      const rows = rowsOf(s.envelope)
      return rows.length === 1 && rows[0]!.event_identity === s.eventIdentity && rows[0]!.payloads === 1
    }),
    `${acknowledgedBeforeKill.length} acknowledged (${view.byIngress} by the ingress, ${acknowledgedBeforeKill.length - view.byIngress} by the killed backends)`
  )
  check(
    "after the producer's resends every envelope is present exactly once, and nothing else",
    view.envelopes.every((e) => rowsOf(e).length === 1) && view.inbox.length === view.envelopes.length,
    `${view.inbox.length} identities for ${view.envelopes.length} envelopes`
  )
  return acknowledgedBeforeKill.length
}
