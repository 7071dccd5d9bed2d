import { decodeBase64Url } from "@delivery/signer"
import { Deferred, Duration, Effect, Either, Option } from "effect"
import { pollUntil } from "./Poll.ts"
import type { StackId } from "../Domain.ts"
import { Admission } from "./Admission.ts"
import { CloudConflict, CloudNotFound, type CloudProfile, type StackState } from "./CloudDomain.ts"
import { stacksQueueView } from "./CloudQueueViews.ts"
import { CloudStacksRepo, type StackRow } from "./CloudStacksRepo.ts"
import { ComputeProvider } from "./ComputeProvider.ts"
import { Routing } from "./Routing.ts"
import { SleepOperation } from "./SleepOperation.ts"
import { Wakes } from "./Wakes.ts"

// The operator's side of the cloud: registering stacks and their hosts, sleeping, waking, recovering, suspending,
// resuming, holding and archiving, and what an operator may see of a stack (states and counts, never a receipt's
// fingerprints). Every change is one fenced statement with its audit row (CloudStacksRepo).

export interface StackView {
  readonly stack: string
  readonly state: StackState
  readonly profiles: ReadonlyArray<string>
  readonly upstream: string | null
  readonly recoveryHold: boolean
  readonly receipt: { readonly storedAt: string; readonly keys: number; readonly connectorBindings: number } | null
  readonly stateChangedAt: string
}

export const viewOf = (row: StackRow): StackView => ({
  stack: row.id,
  state: row.state,
  profiles: row.profiles,
  upstream: row.upstream,
  recoveryHold: row.recovery_hold,
  receipt: row.receipt === null || row.receipt_stored_at === null
    ? null
    : {
      storedAt: row.receipt_stored_at.toISOString(),
      keys: row.receipt.profiles["tenant-api-http-v2"]?.keys.length ?? 0,
      connectorBindings: row.receipt.profiles["github-broker-events-v1"]?.bindingCount ?? 0
    },
  stateChangedAt: row.state_changed_at.toISOString()
})

/** What the console shows of a stack beyond its view: fences, leases, hosts and the newest audit rows. */
export interface StackDetailView extends StackView {
  readonly opAttempt: number
  readonly opLeaseExpiresAt: string | null
  readonly wakeAttempt: number
  readonly wakeLeaseExpiresAt: string | null
  readonly createdAt: string
  readonly hosts: ReadonlyArray<string>
  readonly audit: ReadonlyArray<StackAuditView>
}

export interface StackAuditView {
  readonly action: string
  /** Codes, attempts, hosts and the actor of an operator change; never a key or a fingerprint. */
  readonly detail: Readonly<Record<string, unknown>>
  readonly correlationId: string | null
  readonly at: string
}

export interface StackPage {
  readonly items: ReadonlyArray<StackView>
  /** The last stack id of this page when there is another one. */
  readonly nextCursor: string | null
}

const isoOrNull = (date: Date | null) => (date === null ? null : date.toISOString())

const auditView = (entry: { readonly action: string; readonly detail: unknown; readonly correlation_id: string | null; readonly at: Date }): StackAuditView => ({
  action: entry.action,
  detail: typeof entry.detail === "object" && entry.detail !== null && !Array.isArray(entry.detail) ? entry.detail as Record<string, unknown> : {},
  correlationId: entry.correlation_id,
  at: entry.at.toISOString()
})

export interface NewStackInput {
  readonly stack: StackId
  readonly audience: string
  readonly reportKey: string
  readonly profiles: ReadonlyArray<CloudProfile>
}

const MAX_LIST = 1000
/** The largest page of the console's list, and how many audit rows its detail reads. */
const PAGE_LIMIT = 100
const DETAIL_AUDIT = 100

export class CloudStacks extends Effect.Service<CloudStacks>()("@delivery/idle-wake/CloudStacks", {
  effect: Effect.gen(function* () {
    const repo = yield* CloudStacksRepo
    const compute = yield* ComputeProvider
    const sleeper = yield* SleepOperation
    const wakes = yield* Wakes
    const routing = yield* Routing
    const admission = yield* Admission
    const queueView = yield* stacksQueueView

    const notFound = (correlationId: string) => Effect.fail(new CloudNotFound({ reason: "stack-unknown", correlationId: correlationId as never }))
    const conflict = (reason: CloudConflict["reason"], correlationId: string, state?: StackState) =>
      Effect.fail(new CloudConflict({ reason, correlationId: correlationId as never, ...(state === undefined ? {} : { state }) }))

    /** The conflict of a change the stack's current state does not allow. */
    const stateConflict = (row: StackRow, correlationId: string) =>
      conflict(row.state === "archived" ? "stack-archived" : "stack-state", correlationId, row.state)

    const existing = (stack: string, correlationId: string) =>
      Effect.flatMap(repo.get(stack), Option.match({ onNone: () => notFound(correlationId), onSome: Effect.succeed }))

    /** A settled change of this stack, or the conflict with the state it is in now. */
    const settled = (stack: string, correlationId: string) => (moved: Option.Option<StackRow>) =>
      Effect.gen(function* () {
        yield* routing.changed(stack)
        if (Option.isSome(moved)) return viewOf(moved.value)
        return yield* stateConflict(yield* existing(stack, correlationId), correlationId)
      })

    /**
     * A new stack, awake: the provider is asked for its compute (started if it was not running) so the row knows
     * where it listens. The report key is `keyId:publicKey` (unpadded base64url of the raw 32-byte key).
     */
    const register = Effect.fn("CloudStacks.register")(function* (input: NewStackInput, correlationId: string) {
      const [keyId, publicKey] = input.reportKey.split(":")
      // Before any compute is started: a repeated registration must not start (or keep up) a stack's compute.
      if (Option.isSome(yield* repo.get(input.stack))) return yield* conflict("stack-exists", correlationId)
      const target = yield* compute.prepare(input.stack)
      const created = yield* repo.register(
        {
          id: input.stack,
          audience: input.audience,
          reportKeyId: keyId!,
          reportPublicKey: publicKey!,
          profiles: [...new Set(input.profiles)],
          upstream: target.upstream
        },
        correlationId
      )
      if (Option.isNone(created)) return yield* conflict("stack-exists", correlationId)
      yield* routing.changed(input.stack)
      return viewOf(created.value)
    })

    const addHost = Effect.fn("CloudStacks.addHost")(function* (stack: string, host: string, correlationId: string) {
      const outcome = yield* repo.addHost(host, stack, correlationId)
      if (outcome === "stack-unknown") return yield* notFound(correlationId)
      if (outcome === "host-taken") return yield* conflict("host-taken", correlationId)
      yield* routing.changed(stack)
      return { host, stack, outcome }
    })

    const removeHost = Effect.fn("CloudStacks.removeHost")(function* (stack: string, host: string, correlationId: string) {
      const removed = yield* repo.removeHost(host, stack, correlationId)
      if (!removed) return yield* Effect.fail(new CloudNotFound({ reason: "host-unknown", correlationId: correlationId as never }))
      yield* routing.changed(stack)
      return { host, stack, outcome: "removed" as const }
    })

    const list = Effect.fn("CloudStacks.list")(function* () {
      const rows = yield* repo.list(MAX_LIST)
      const counts = yield* repo.counts
      return { stacks: rows.map(viewOf), counts }
    })

    /** One page of stacks by id, optionally in one state; sizes are clamped to 1..100. */
    const page = Effect.fn("CloudStacks.page")(function* (options: {
      readonly state?: StackState | undefined
      readonly after?: StackId | undefined
      readonly limit?: number | undefined
    }) {
      const size = Math.min(Math.max(Math.floor(options.limit ?? PAGE_LIMIT), 1), PAGE_LIMIT)
      const rows = yield* repo.page({ state: options.state ?? null, after: options.after ?? null, limit: size + 1 })
      const items = rows.slice(0, size)
      return {
        items: items.map(viewOf),
        nextCursor: rows.length > size ? items[items.length - 1]!.id : null
      } satisfies StackPage
    })

    /** A stack with its fences, hosts and newest audit rows, or none; counts of its receipt, never its contents. */
    const detail = Effect.fn("CloudStacks.detail")(function* (stack: StackId) {
      const found = yield* repo.get(stack)
      if (Option.isNone(found)) return Option.none<StackDetailView>()
      const row = found.value
      const hosts = yield* repo.routes({ stack })
      const audit = yield* repo.audit(stack, DETAIL_AUDIT)
      return Option.some<StackDetailView>({
        ...viewOf(row),
        opAttempt: row.op_attempt,
        opLeaseExpiresAt: isoOrNull(row.op_lease_expires_at),
        wakeAttempt: row.wake_attempt,
        wakeLeaseExpiresAt: isoOrNull(row.wake_lease_expires_at),
        createdAt: row.created_at.toISOString(),
        hosts: hosts.map((route) => route.host).sort(),
        audit: audit.map(auditView)
      })
    })

    const get = Effect.fn("CloudStacks.get")(function* (stack: string, correlationId: string) {
      const row = yield* existing(stack, correlationId)
      const hosts = yield* repo.routes({ stack })
      const audit = yield* repo.audit(stack, 50)
      return {
        ...viewOf(row),
        hosts: hosts.map((route) => route.host).sort(),
        audit: audit.map((entry) => ({ action: entry.action, detail: entry.detail, correlationId: entry.correlation_id, at: entry.at.toISOString() }))
      }
    })

    // The operator changes take an optional actor: the audit row names it (the console's sessions), and a change
    // through the operator API names none.
    const sleep = Effect.fn("CloudStacks.sleep")(function* (stack: StackId, correlationId: string, actor?: string) {
      yield* existing(stack, correlationId)
      return yield* sleeper.sleep(stack, correlationId, actor)
    })

    const recover = Effect.fn("CloudStacks.recover")(function* (stack: StackId, correlationId: string, actor?: string) {
      yield* existing(stack, correlationId)
      return yield* Effect.flatMap(sleeper.recover(stack, correlationId, actor), settled(stack, correlationId))
    })

    /** An operator's wake of an asleep stack (no key): the same coalesced, fenced wake as a request's. */
    const wake = Effect.fn("CloudStacks.wake")(function* (stack: StackId, correlationId: string) {
      const row = yield* existing(stack, correlationId)
      if (row.state === "awake") return viewOf(row)
      if (row.receipt === null) return yield* stateConflict(row, correlationId)
      const ticket = yield* wakes.wake(stack, { challenge: row.receipt.challenge, fingerprint: null, connectorInstance: null }, `operator:${stack}`, correlationId)
      const result = yield* Deferred.await(ticket).pipe(Effect.timeoutOption(Duration.sum(admission.readinessWait, Duration.seconds(5))))
      const now = yield* existing(stack, correlationId)
      if (Option.isSome(result) && result.value._tag === "Awake") return viewOf(now)
      return yield* stateConflict(now, correlationId)
    })

    /** Manual suspension: no wake, the receipt cleared, then compute stopped. */
    const suspend = Effect.fn("CloudStacks.suspend")(function* (stack: StackId, correlationId: string, actor?: string) {
      yield* existing(stack, correlationId)
      const view = yield* Effect.flatMap(repo.suspend(stack, correlationId, actor), settled(stack, correlationId))
      const stop = yield* compute.stop(stack)
      return { ...view, stop: stop._tag }
    })

    /** An operator's resume: compute started and ready, then the stack is awake. */
    const resume = Effect.fn("CloudStacks.resume")(function* (stack: StackId, correlationId: string, actor?: string) {
      const row = yield* existing(stack, correlationId)
      if (row.state !== "suspended") return yield* stateConflict(row, correlationId)
      const target = yield* compute.prepare(stack)
      const ready = yield* pollUntil(Effect.map(compute.readiness(stack, target), (ok) => (ok ? true : undefined)), Duration.millis(200)).pipe(
        Effect.timeoutOption(admission.readinessWait)
      )
      if (Option.isNone(ready)) return yield* stateConflict(row, correlationId)
      return yield* Effect.flatMap(repo.resume(stack, target.upstream, correlationId, actor), settled(stack, correlationId))
    })

    const setRecoveryHold = Effect.fn("CloudStacks.setRecoveryHold")(function* (stack: StackId, hold: boolean, correlationId: string, actor?: string) {
      yield* existing(stack, correlationId)
      return yield* Effect.flatMap(repo.setRecoveryHold(stack, hold, correlationId, actor), settled(stack, correlationId))
    })

    /** Archive: the receipt cleared and the hosts removed in one transaction, then compute stopped. */
    const archive = Effect.fn("CloudStacks.archive")(function* (stack: StackId, correlationId: string, actor?: string) {
      yield* existing(stack, correlationId)
      const view = yield* Effect.flatMap(repo.archive(stack, correlationId, actor), settled(stack, correlationId))
      const stop = yield* compute.stop(stack)
      return { ...view, stop: stop._tag }
    })

    return { register, addHost, removeHost, list, page, detail, get, sleep, recover, wake, suspend, resume, setRecoveryHold, archive, admission: admission.counters, queueView } as const
  })
}) {}

/** `keyId:publicKey` with a raw 32-byte Ed25519 public key in unpadded base64url. */
export const isReportKey = (text: string): boolean => {
  const parts = text.split(":")
  return parts.length === 2 && /^[a-z0-9][a-z0-9_-]{0,63}$/.test(parts[0]!) && Either.isRight(decodeBase64Url(parts[1]!, 32))
}
