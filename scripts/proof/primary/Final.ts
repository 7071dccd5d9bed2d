import { Effect } from "effect"
import { PROJECT, TENANT } from "./Fixtures.ts"
import { call } from "./Http.ts"
import type { Reads, ResetRow } from "./Reads.ts"
import type { AcceptedApplication, AcceptedMessage, AcceptedReceipt } from "./Work.ts"

// Where every piece of accepted work stands, read through the product's own routes where one exists (an outbox
// message, a receipt's effects, an application's notifications) and with read-only SQL for reset rows, whose
// operator routes show counts and ended rows only (a delivered row has no route of its own).

export interface Accepted {
  readonly messages: ReadonlyArray<AcceptedMessage>
  readonly resets: ReadonlyArray<string>
  readonly receipts: ReadonlyArray<AcceptedReceipt>
  readonly applications: ReadonlyArray<AcceptedApplication>
}

export interface States {
  /** Message id to state; "unreadable" when the route did not answer 200. */
  readonly messages: ReadonlyMap<string, string>
  readonly resets: ReadonlyArray<ResetRow>
  /** Receipt id to its effects' states, in order. */
  readonly receipts: ReadonlyMap<string, ReadonlyArray<string>>
  /** Receipt id to whether its effects completed in `seq` order. */
  readonly receiptsInOrder: ReadonlyMap<string, boolean>
  /** Application id to its notifications' states. */
  readonly applications: ReadonlyMap<string, ReadonlyArray<string>>
}

interface EffectView {
  readonly seq: number
  readonly state: string
  readonly completedAt: string | null
}

const RESET_ENDED = new Set(["delivered", "rejected", "quarantined", "stopped"])
const NOTIFICATION_ENDED = new Set(["delivered", "rejected", "exhausted", "envelope-invalid"])

export const readStates = (baseUrl: string, operatorToken: string, accepted: Accepted, reads: Reads) =>
  Effect.gen(function* () {
    const op = { token: operatorToken, timeoutMs: 5_000 }
    const messages = yield* Effect.forEach(accepted.messages, (m) =>
      Effect.map(call(baseUrl, "GET", `/operator/outbox/messages/${TENANT}/${PROJECT}/${m.id}`, op), (a) =>
        [m.id, a.status === 200 ? String(a.json.state) : "unreadable"] as const), { concurrency: 5 })
    const receiptViews = yield* Effect.forEach(accepted.receipts, (r) =>
      Effect.map(call(baseUrl, "GET", `/operator/receipts/${TENANT}/${r.id}`, op), (a) =>
        [r.id, a.status === 200 ? (a.json.effects as ReadonlyArray<EffectView>) : null] as const), { concurrency: 5 })
    const receipts = receiptViews.map(([id, effects]) => [id, effects === null ? ["unreadable"] : effects.map((e) => e.state)] as const)
    // Spec 002: a receipt's earlier effects complete before its later ones become eligible, so completion times
    // follow `seq` (read from the operator route, which shows each effect's completion).
    const receiptsInOrder = receiptViews.map(([id, effects]) => {
      const times = [...(effects ?? [])].sort((a, b) => a.seq - b.seq).map((e) => (e.completedAt === null ? Number.NaN : Date.parse(e.completedAt)))
      return [id, effects !== null && times.every((t, i) => !Number.isNaN(t) && (i === 0 || times[i - 1]! <= t))] as const
    })
    const applications = yield* Effect.forEach(accepted.applications, (app) =>
      Effect.map(call(baseUrl, "GET", `/operator/team-applications/${TENANT}/${app.id}`, op), (a) =>
        [app.id, a.status === 200 ? (a.json.notifications as ReadonlyArray<{ state: string }>).map((n) => n.state) : ["unreadable"]] as const), { concurrency: 5 })
    const resets = yield* Effect.orElseSucceed(reads.resets, (): ReadonlyArray<ResetRow> => [])
    return {
      messages: new Map(messages),
      resets,
      receipts: new Map(receipts),
      receiptsInOrder: new Map(receiptsInOrder),
      applications: new Map(applications)
    } satisfies States
  })

/** Every piece of work has stopped moving: each family's terminal states (whichever they are). */
export const settled = (states: States, accepted: Accepted) =>
  [...states.messages.values()].every((s) => s === "delivered" || s === "dead") &&
  states.resets.length === accepted.resets.length && states.resets.every((r) => RESET_ENDED.has(r.state)) &&
  [...states.receipts.values()].every((effects) => effects.every((s) => s === "done")) &&
  [...states.applications.values()].every((ns) => ns.every((s) => NOTIFICATION_ENDED.has(s)))

/** Counts of each state, for a check's detail: `delivered 9, pending 1`. */
export const tally = (states: Iterable<string>) => {
  const counts = new Map<string, number>()
  for (const s of states) counts.set(s, (counts.get(s) ?? 0) + 1)
  return [...counts].map(([s, n]) => `${s} ${n}`).join(", ") || "none"
}
