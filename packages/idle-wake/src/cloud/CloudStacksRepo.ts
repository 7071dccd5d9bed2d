import { completionBucket, queueViewQuery, QueueViewRow, storageErrors, windowsStart } from "@delivery/core"
import { SqlClient, SqlSchema, type Statement } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { type IncomingProof } from "../Protocol.ts"
import { CloudStorageUnavailable, type StackId, type StackState } from "./CloudDomain.ts"

// SQL of the cloud's stacks, hosts and audit (migration 0022); private to the package. Every transition is one
// statement: the fenced UPDATE and its audit row commit together (a data-modifying CTE), and the table's trigger
// notifies every cloud process's routing cache at commit.

const storage = (operation: string) => storageErrors(operation, (fault) => new CloudStorageUnavailable(fault))

export const StackRow = Schema.Struct({
  id: Schema.String,
  audience: Schema.String,
  report_key_id: Schema.String,
  report_public_key: Schema.String,
  profiles: Schema.Array(Schema.String),
  upstream: Schema.NullOr(Schema.String),
  state: Schema.String,
  recovery_hold: Schema.Boolean,
  op_attempt: Schema.Number,
  op_lease_expires_at: Schema.NullOr(Schema.DateFromSelf),
  wake_attempt: Schema.Number,
  wake_lease_expires_at: Schema.NullOr(Schema.DateFromSelf),
  receipt: Schema.NullOr(Schema.Unknown),
  receipt_stored_at: Schema.NullOr(Schema.DateFromSelf),
  state_changed_at: Schema.DateFromSelf,
  created_at: Schema.DateFromSelf
})
export type StackRow = typeof StackRow.Type & { readonly state: StackState; readonly receipt: IncomingProof | null }

const decodeStack = Schema.decodeUnknown(StackRow)
const decodeStacks = Schema.decodeUnknown(Schema.Array(StackRow))

const STACK_COLUMNS = `id, audience, report_key_id, report_public_key, profiles, upstream, state, recovery_hold, op_attempt,
  op_lease_expires_at, wake_attempt, wake_lease_expires_at, receipt, receipt_stored_at, state_changed_at, created_at`

export const RouteRow = Schema.Struct({
  host: Schema.String,
  stack_id: Schema.String,
  state: Schema.String,
  upstream: Schema.NullOr(Schema.String),
  op_lease_expires_at: Schema.NullOr(Schema.DateFromSelf)
})
export type RouteRow = typeof RouteRow.Type
const decodeRoutes = Schema.decodeUnknown(Schema.Array(RouteRow))

export interface AuditEntry {
  readonly action: string
  readonly detail?: Record<string, string | number | boolean | null>
  readonly correlationId?: string | undefined
}

export interface NewStack {
  readonly id: StackId
  readonly audience: string
  readonly reportKeyId: string
  readonly reportPublicKey: string
  readonly profiles: ReadonlyArray<string>
  readonly upstream: string
}

/**
 * Who asked for an operator change, in its audit row's detail: the console's sessions name themselves, and a change
 * through the operator API (the bearer) or a worker has none.
 */
const by = (actor: string | undefined): Record<string, string> => (actor === undefined ? {} : { actor })

/** Stacks whose row may not be changed by any route or operation any more. */
const LIVE = "state <> 'archived'"

export class CloudStacksRepo extends Effect.Service<CloudStacksRepo>()("@delivery/idle-wake/CloudStacksRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.literal(STACK_COLUMNS)

    /** The first row, decoded, or none. */
    const firstStack = (rows: ReadonlyArray<unknown>) =>
      rows.length === 0 ? Effect.succeed(Option.none<StackRow>()) : Effect.map(decodeStack(rows[0]), (row) => Option.some(row as StackRow))

    /** An audit row of a change made outside `transition`, in the caller's transaction. */
    const audited = (stack: string, action: string, detail: Record<string, string>, correlationId: string) => sql`
      INSERT INTO idle_wake_cloud_audit (stack_id, action, detail, correlation_id, at)
      VALUES (${stack}, ${action}, ${JSON.stringify(detail)}::jsonb, ${correlationId}, now())`

    /**
     * One fenced transition with its audit row: `set` and `where` apply to `idle_wake_cloud_stacks` (alias `s`);
     * none when no row matched (the fence refused it). `state_changed_at` moves with every change of state.
     */
    const transition = (stack: string, set: Statement.Fragment, where: Statement.Fragment, audit: AuditEntry, changesState = true) =>
      Effect.flatMap(
        sql`
          WITH moved AS (
            UPDATE idle_wake_cloud_stacks s SET ${set}${changesState ? sql`, state_changed_at = now()` : sql``}
            WHERE s.id = ${stack} AND ${where}
            RETURNING ${columns}
          ), audit AS (
            INSERT INTO idle_wake_cloud_audit (stack_id, action, detail, correlation_id, at)
            SELECT id, ${audit.action}, ${JSON.stringify(audit.detail ?? {})}::jsonb, ${audit.correlationId ?? null}, now() FROM moved
          )
          SELECT * FROM moved`.withoutTransform,
        firstStack
      )

    const register = (stack: NewStack, correlationId: string) =>
      sql.withTransaction(Effect.gen(function* () {
        const rows = yield* sql`
          INSERT INTO idle_wake_cloud_stacks
            (id, audience, report_key_id, report_public_key, profiles, upstream, state, state_changed_at, created_at)
          VALUES (${stack.id}, ${stack.audience}, ${stack.reportKeyId}, ${stack.reportPublicKey},
                  string_to_array(${stack.profiles.join(",")}, ','), ${stack.upstream}, 'awake', now(), now())
          ON CONFLICT (id) DO NOTHING
          RETURNING ${columns}`.withoutTransform
        if (rows.length > 0) yield* audited(stack.id, "registered", { profiles: stack.profiles.join(",") }, correlationId)
        return yield* firstStack(rows)
      })).pipe(storage("registerStack"))

    const get = (stack: string) =>
      Effect.flatMap(
        sql`SELECT ${columns} FROM idle_wake_cloud_stacks WHERE id = ${stack}`.withoutTransform,
        firstStack
      ).pipe(storage("getStack"))

    const list = (limit: number) =>
      Effect.map(
        Effect.flatMap(sql`SELECT ${columns} FROM idle_wake_cloud_stacks ORDER BY id LIMIT ${limit}`.withoutTransform, decodeStacks),
        (rows) => rows as ReadonlyArray<StackRow>
      ).pipe(storage("listStacks"))

    /** A page of stacks by id after `after`, optionally in one state (the console's list; the primary key is its index). */
    const page = (options: { readonly state: StackState | null; readonly after: string | null; readonly limit: number }) =>
      Effect.map(
        Effect.flatMap(
          sql`
            SELECT ${columns} FROM idle_wake_cloud_stacks
            WHERE ${options.state === null ? sql`true` : sql`state = ${options.state}`}
              AND ${options.after === null ? sql`true` : sql`id > ${options.after}`}
            ORDER BY id LIMIT ${options.limit}`.withoutTransform,
          decodeStacks
        ),
        (rows) => rows as ReadonlyArray<StackRow>
      ).pipe(storage("pageStacks"))

    const counts = Effect.map(
      sql<{ state: string; stacks: number; receipts: number }>`
        SELECT state, count(*)::int AS stacks, count(receipt)::int AS receipts
        FROM idle_wake_cloud_stacks GROUP BY state ORDER BY state`.withoutTransform,
      (rows) => rows.map((row) => ({ state: row.state, stacks: row.stacks, receipts: row.receipts }))
    ).pipe(storage("countStacks"))

    /** Hosts with their stack's routing state: all of them, a stack's, or one host's (for the routing cache). */
    const routes = (filter: { readonly stack?: string; readonly host?: string }) =>
      Effect.flatMap(
        sql`
          SELECT h.host, h.stack_id, s.state, s.upstream, s.op_lease_expires_at
          FROM idle_wake_cloud_hosts h JOIN idle_wake_cloud_stacks s ON s.id = h.stack_id
          WHERE ${filter.stack === undefined ? sql`true` : sql`h.stack_id = ${filter.stack}`}
            AND ${filter.host === undefined ? sql`true` : sql`h.host = ${filter.host}`}`.withoutTransform,
        decodeRoutes
      ).pipe(storage("readRoutes"))

    const addHost = (host: string, stack: string, correlationId: string) =>
      sql.withTransaction(Effect.gen(function* () {
        const live = yield* sql`SELECT 1 FROM idle_wake_cloud_stacks WHERE id = ${stack} AND ${sql.literal(LIVE)} FOR UPDATE`.withoutTransform
        if (live.length === 0) return "stack-unknown" as const
        const inserted = yield* sql`
          INSERT INTO idle_wake_cloud_hosts (host, stack_id, created_at) VALUES (${host}, ${stack}, now())
          ON CONFLICT (host) DO NOTHING RETURNING stack_id`.withoutTransform
        if (inserted.length === 0) {
          const owner = yield* sql<{ stack_id: string }>`SELECT stack_id FROM idle_wake_cloud_hosts WHERE host = ${host}`.withoutTransform
          return owner[0]?.stack_id === stack ? "unchanged" as const : "host-taken" as const
        }
        yield* audited(stack, "host-added", { host }, correlationId)
        return "added" as const
      })).pipe(storage("addHost"))

    const removeHost = (host: string, stack: string, correlationId: string) =>
      sql.withTransaction(Effect.gen(function* () {
        const removed = yield* sql`DELETE FROM idle_wake_cloud_hosts WHERE host = ${host} AND stack_id = ${stack} RETURNING host`.withoutTransform
        if (removed.length === 0) return false
        yield* audited(stack, "host-removed", { host }, correlationId)
        return true
      })).pipe(storage("removeHost"))

    // --- The sleep operation (fenced by op_attempt) ---------------------------------------------------------------

    /** The sleep operation lock: an awake stack (or one whose earlier cycle's lease ended) moves to draining. */
    const claimSleep = (stack: string, leaseMs: number, correlationId: string, actor?: string) =>
      transition(
        stack,
        sql`state = 'draining', op_attempt = s.op_attempt + 1, op_lease_expires_at = now() + ${leaseMs} * interval '1 millisecond'`,
        sql`(s.state = 'awake' OR (s.state = 'draining' AND s.op_lease_expires_at < now()))`,
        { action: "sleep-started", detail: by(actor), correlationId }
      ).pipe(storage("claimSleep"))

    /** The receipt, stored in its one column under the sleep operation lock before compute is stopped. */
    const storeReceipt = (stack: string, attempt: number, receipt: IncomingProof, correlationId: string) =>
      transition(
        stack,
        sql`state = 'stopping', receipt = ${JSON.stringify(receipt)}::jsonb, receipt_stored_at = now()`,
        sql`s.op_attempt = ${attempt} AND s.state = 'draining' AND s.op_lease_expires_at >= now()`,
        { action: "receipt-stored", detail: { opAttempt: attempt }, correlationId }
      ).pipe(storage("storeReceipt"))

    /** A known sleep abort: back to awake, the receipt (if any) cleared. */
    const abortSleep = (stack: string, attempt: number, code: string, correlationId: string) =>
      transition(
        stack,
        sql`state = 'awake', receipt = NULL, receipt_stored_at = NULL, op_lease_expires_at = NULL`,
        sql`s.op_attempt = ${attempt} AND s.state IN ('draining', 'stopping')`,
        { action: "sleep-aborted", detail: { code, opAttempt: attempt }, correlationId }
      ).pipe(storage("abortSleep"))

    const stopped = (stack: string, attempt: number, correlationId: string) =>
      transition(
        stack,
        sql`state = 'asleep', op_lease_expires_at = NULL`,
        sql`s.op_attempt = ${attempt} AND s.state = 'stopping'`,
        { action: "asleep", detail: { opAttempt: attempt }, correlationId }
      ).pipe(storage("markAsleep"))

    /** The stop could not be confirmed: the receipt stays for recovery. */
    const stopUncertain = (stack: string, attempt: number, code: string, correlationId: string) =>
      transition(
        stack,
        sql`state = 'stop-uncertain', op_lease_expires_at = NULL`,
        sql`s.op_attempt = ${attempt} AND s.state = 'stopping'`,
        { action: "stop-uncertain", detail: { code, opAttempt: attempt }, correlationId }
      ).pipe(storage("markStopUncertain"))

    /**
     * Recovery of an uncertain stop (or of a cycle whose owner died while stopping): the provider says whether the
     * compute runs. Stopped: asleep, the receipt kept. Running: awake, the receipt cleared (the tenant serves again).
     */
    const recover = (stack: string, running: boolean, correlationId: string, actor?: string) =>
      transition(
        stack,
        running
          ? sql`state = 'awake', receipt = NULL, receipt_stored_at = NULL, op_lease_expires_at = NULL`
          : sql`state = 'asleep', op_lease_expires_at = NULL`,
        sql`(s.state = 'stop-uncertain' OR (s.state = 'stopping' AND s.op_lease_expires_at < now()))`,
        { action: running ? "recovered-awake" : "recovered-asleep", detail: by(actor), correlationId }
      ).pipe(storage("recoverStack"))

    // --- Wakes (fenced by wake_attempt) ---------------------------------------------------------------------------

    /**
     * The wake claim, atomic against the exact cycle, key and expiry: the stored receipt must still be the one the
     * caller matched (its challenge), and, for a key wake, still hold that fingerprint unexpired now. A stack that is
     * waking under a live lease is someone else's wake; an expired one is claimable again.
     */
    const claimWake = (
      stack: string,
      match: { readonly challenge: string; readonly fingerprint: string | null; readonly connectorInstance: string | null },
      leaseMs: number,
      correlationId: string
    ) => {
      const keyMatch = match.fingerprint === null
        ? sql`true`
        : sql`EXISTS (
            SELECT 1 FROM jsonb_array_elements(s.receipt -> 'profiles' -> 'tenant-api-http-v2' -> 'keys') k
            WHERE k ->> 'fingerprint' = ${match.fingerprint}
              AND (k ->> 'expiresAt' IS NULL OR (k ->> 'expiresAt')::timestamptz > now()))`
      const connectorMatch = match.connectorInstance === null
        ? sql`true`
        : sql`s.receipt -> 'profiles' -> 'github-broker-events-v1' ->> 'connectorInstance' = ${match.connectorInstance}`
      return transition(
        stack,
        sql`state = 'waking', wake_attempt = s.wake_attempt + 1, wake_lease_expires_at = now() + ${leaseMs} * interval '1 millisecond'`,
        sql`NOT s.recovery_hold
          AND (s.state IN ('asleep', 'stop-uncertain')
            OR (s.state = 'waking' AND s.wake_lease_expires_at < now())
            OR (s.state = 'stopping' AND s.op_lease_expires_at < now()))
          AND s.receipt ->> 'challenge' = ${match.challenge}
          AND ${keyMatch} AND ${connectorMatch}`,
        { action: "wake-claimed", detail: { by: match.fingerprint !== null ? "api-key" : match.connectorInstance !== null ? "connector-event" : "operator" }, correlationId }
      ).pipe(storage("claimWake"))
    }

    /** A successful wake clears the receipt and refreshes routing (the compute's current address). */
    const woke = (stack: string, attempt: number, upstream: string, correlationId: string) =>
      transition(
        stack,
        sql`state = 'awake', upstream = ${upstream}, receipt = NULL, receipt_stored_at = NULL, wake_lease_expires_at = NULL`,
        sql`s.wake_attempt = ${attempt} AND s.state = 'waking'`,
        { action: "awake", detail: { wakeAttempt: attempt }, correlationId }
      ).pipe(storage("markAwake"))

    /**
     * A same-cycle failed wake keeps the receipt: the stack is asleep again and may be woken again, or, when the
     * provider says its compute runs after all (a readiness timeout), stop-uncertain, for recovery to settle.
     */
    const wakeFailed = (stack: string, attempt: number, code: string, computeRunning: boolean, correlationId: string) =>
      transition(
        stack,
        computeRunning ? sql`state = 'stop-uncertain', wake_lease_expires_at = NULL` : sql`state = 'asleep', wake_lease_expires_at = NULL`,
        sql`s.wake_attempt = ${attempt} AND s.state = 'waking'`,
        { action: "wake-failed", detail: { code, wakeAttempt: attempt }, correlationId }
      ).pipe(storage("markWakeFailed"))

    // --- Operator changes -----------------------------------------------------------------------------------------

    /** Manual suspension: no wake from now on, the receipt cleared; compute is stopped by the caller. */
    const suspend = (stack: string, correlationId: string, actor?: string) =>
      transition(
        stack,
        sql`state = 'suspended', receipt = NULL, receipt_stored_at = NULL, op_attempt = s.op_attempt + 1,
            op_lease_expires_at = NULL, wake_attempt = s.wake_attempt + 1, wake_lease_expires_at = NULL`,
        sql`s.state IN ('awake', 'asleep', 'stop-uncertain', 'draining', 'stopping', 'waking')`,
        { action: "suspended", detail: by(actor), correlationId }
      ).pipe(storage("suspendStack"))

    /** An operator's resume: the compute was started by the caller and is ready. */
    const resume = (stack: string, upstream: string, correlationId: string, actor?: string) =>
      transition(
        stack,
        sql`state = 'awake', upstream = ${upstream}`,
        sql`s.state = 'suspended'`,
        { action: "resumed", detail: by(actor), correlationId }
      ).pipe(storage("resumeStack"))

    const setRecoveryHold = (stack: string, hold: boolean, correlationId: string, actor?: string) =>
      transition(
        stack,
        sql`recovery_hold = ${hold}`,
        sql`s.${sql.literal(LIVE)}`,
        { action: hold ? "recovery-hold-set" : "recovery-hold-released", detail: by(actor), correlationId },
        false
      ).pipe(storage("setRecoveryHold"))

    /** Archive: the receipt cleared, the hosts removed, every lease fenced off; compute is stopped by the caller. */
    const archive = (stack: string, correlationId: string, actor?: string) =>
      sql.withTransaction(Effect.gen(function* () {
        const moved = yield* transition(
          stack,
          sql`state = 'archived', receipt = NULL, receipt_stored_at = NULL, op_attempt = s.op_attempt + 1,
              op_lease_expires_at = NULL, wake_attempt = s.wake_attempt + 1, wake_lease_expires_at = NULL`,
          sql`s.${sql.literal(LIVE)}`,
          { action: "archived", detail: by(actor), correlationId }
        )
        if (Option.isSome(moved)) yield* sql`DELETE FROM idle_wake_cloud_hosts WHERE stack_id = ${stack}`
        return moved
      })).pipe(storage("archiveStack"))

    const audit = (stack: string, limit: number) =>
      sql<{ id: string; action: string; detail: unknown; correlation_id: string | null; at: Date }>`
        SELECT id::text AS id, action, detail, correlation_id, at FROM idle_wake_cloud_audit
        WHERE stack_id = ${stack} ORDER BY id DESC LIMIT ${limit}`.withoutTransform.pipe(storage("readAudit"))

    // The queue view: stacks by state; wakes completed per window from their `awake` audit rows (migrations/0024 indexes
    // them); the oldest stack left mid-operation: a sleep cycle or a wake whose lease ended (what the fenced claims
    // take over, with their `< now()`), or an uncertain stop waiting for recovery since it became one.
    const readQueueView = SqlSchema.single({
      Request: Schema.Void,
      Result: QueueViewRow,
      execute: () => queueViewQuery(sql, {
        groups: sql`
          SELECT state, NULL::int AS bucket, count(*)::int AS count FROM idle_wake_cloud_stacks GROUP BY 1
          UNION ALL
          SELECT NULL, ${completionBucket(sql, sql`at`)}, count(*)::int FROM idle_wake_cloud_audit
          WHERE action = 'awake' AND at > ${windowsStart(sql)} GROUP BY 2`,
        dueSince: sql`
          SELECT min(CASE WHEN state = 'waking' THEN wake_lease_expires_at
                          WHEN state = 'stop-uncertain' THEN state_changed_at
                          ELSE op_lease_expires_at END)
          FROM idle_wake_cloud_stacks
          WHERE (state IN ('draining', 'stopping') AND op_lease_expires_at < now())
             OR (state = 'waking' AND wake_lease_expires_at < now())
             OR state = 'stop-uncertain'`
      }).withoutTransform
    })
    const queueView = readQueueView(undefined).pipe(Effect.catchTag("NoSuchElementException", Effect.die), storage("stacksQueueView"))

    return {
      register,
      get,
      list,
      page,
      counts,
      routes,
      addHost,
      removeHost,
      claimSleep,
      storeReceipt,
      abortSleep,
      stopped,
      stopUncertain,
      recover,
      claimWake,
      woke,
      wakeFailed,
      suspend,
      resume,
      setRecoveryHold,
      archive,
      audit,
      queueView
    } as const
  })
}) {}
