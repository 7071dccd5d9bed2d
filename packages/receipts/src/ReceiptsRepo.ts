import { claimDue, completionBucket, fenced, queueViewQuery, QueueViewRow, storageErrors } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { type EffectKind, ReceiptsStorageUnavailable } from "./Domain.ts"

// SQL of receipts (migrations/0016_receipts.sql); private to the package. Every effect transition after the claim is
// fenced: `id`, the claimed `attempt` and `state = 'running'`.

const storage = (operation: string) => storageErrors(operation, (fault) => new ReceiptsStorageUnavailable({ operation, sqlstate: fault.sqlstate }))

/** A staged file an attachment names, locked for the command: whether a receipt holds it already. */
// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const FileRow = Schema.Struct({ id: Schema.String, receipt_id: Schema.NullOr(Schema.String) })
export type FileRow = typeof FileRow.Type

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const CommandRow = Schema.Struct({ request_sha256: Schema.String, response: Schema.Unknown })

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const ClaimedEffect = Schema.Struct({
  id: Schema.String,
  receipt_id: Schema.String,
  tenant_id: Schema.String,
  seq: Schema.Number,
  kind: Schema.Literal("promote-file", "delete-staged", "audit-check", "notify"),
  file_id: Schema.NullOr(Schema.String),
  file_sha256: Schema.NullOr(Schema.String),
  attempt: Schema.Number,
  envelope: Schema.NullOr(Schema.String),
  envelope_sha256: Schema.NullOr(Schema.String)
})
export type ClaimedEffect = typeof ClaimedEffect.Type

export const NotifyData = Schema.Struct({
  reference: Schema.String,
  currency: Schema.String,
  total_minor: Schema.NumberFromString,
  paid_at: Schema.DateFromSelf,
  payer_name: Schema.String,
  payer_email: Schema.String,
  // Stryker disable next-line ObjectLiteral: json_agg already gives each line's integers as JSON numbers
  lines: Schema.Array(Schema.Struct({
    description: Schema.String,
    quantity: Schema.Number,
    unit_minor: Schema.Union(Schema.Number, Schema.NumberFromString),
    amount_minor: Schema.Union(Schema.Number, Schema.NumberFromString)
  })),
  files: Schema.Number
})
export type NotifyData = typeof NotifyData.Type

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const EffectRow = Schema.Struct({
  id: Schema.String,
  seq: Schema.Number,
  kind: Schema.Literal("promote-file", "delete-staged", "audit-check", "notify"),
  // Stryker disable next-line StringLiteral: read only right after the command inserted its effects, all pending
  state: Schema.Literal("pending", "running", "done"),
  attempt: Schema.Number,
  next_attempt_at: Schema.DateFromSelf,
  last_error: Schema.NullOr(Schema.String),
  frozen: Schema.Boolean,
  completed_at: Schema.NullOr(Schema.DateFromSelf)
})

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const ReceiptHead = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  reference: Schema.String,
  created_at: Schema.DateFromSelf
})

/** An effect as the console reads it, with its keyset position (created_at to the microsecond, UTC). */
// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const EffectItemRow = Schema.Struct({
  id: Schema.String,
  receipt_id: Schema.String,
  tenant_id: Schema.String,
  seq: Schema.Number,
  kind: Schema.Literal("promote-file", "delete-staged", "audit-check", "notify"),
  state: Schema.Literal("pending", "running", "done"),
  attempt: Schema.Number,
  next_attempt_at: Schema.DateFromSelf,
  waiting_for: Schema.NullOr(Schema.Number),
  claimed_at: Schema.NullOr(Schema.DateFromSelf),
  last_error: Schema.NullOr(Schema.String),
  frozen: Schema.Boolean,
  completed_at: Schema.NullOr(Schema.DateFromSelf),
  created_at: Schema.DateFromSelf,
  updated_at: Schema.DateFromSelf,
  position: Schema.String
})
export type EffectItemRow = typeof EffectItemRow.Type

// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const AuditRow = Schema.Struct({
  action: Schema.String,
  actor: Schema.String,
  correlation_id: Schema.String,
  at: Schema.DateFromSelf
})

// Never the envelope itself: whether there is one is all an operator needs.
const effectItemColumns = `e.id::text AS id, e.receipt_id::text AS receipt_id, e.tenant_id, e.seq, e.kind, e.state, e.attempt,
  e.next_attempt_at,
  CASE WHEN e.state = 'pending' THEN (
    SELECT min(earlier.seq) FROM receipt_effects earlier
    WHERE earlier.receipt_id = e.receipt_id AND earlier.seq < e.seq AND earlier.state <> 'done') END AS waiting_for,
  e.claimed_at, e.last_error, e.envelope IS NOT NULL AS frozen, e.completed_at, e.created_at, e.updated_at,
  to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS position`

export interface NewReceipt {
  readonly id: string
  readonly tenant: string
  readonly commandId: string
  readonly reference: string
  readonly currency: string
  readonly totalMinor: number
  readonly paidAt: Date
  readonly payerName: string
  readonly payerEmail: string
  readonly recordedBy: string
  readonly at: Date
}

export interface NewEffect {
  readonly id: string
  readonly seq: number
  readonly kind: EffectKind
  readonly fileId: string | null
}

export class ReceiptsRepo extends Effect.Service<ReceiptsRepo>()("@delivery/receipts/ReceiptsRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const table = "receipt_effects"

    const insertFile = (r: { readonly id: string; readonly tenant: string; readonly account: string; readonly sha256: string; readonly size: number; readonly contentType: string; readonly at: Date }) =>
      sql`INSERT INTO receipt_files (id, tenant_id, account_id, sha256, size_bytes, content_type, staged_at)
          VALUES (${r.id}, ${r.tenant}, ${r.account}, ${r.sha256}, ${r.size}, ${r.contentType}, ${r.at})`.withoutTransform

    // Serializes commands with one id of one tenant: the second waits, then finds the first one's receipt.
    const lockCommand = (tenant: string, commandId: string) =>
      // Stryker disable next-line StringLiteral: one key for every command would serialize more commands, never fewer
      sql`SELECT pg_advisory_xact_lock(hashtextextended(${`receipt-command:${tenant}:${commandId}`}, 0))`.withoutTransform

    const findCommand = SqlSchema.findOne({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ tenant: Schema.String, commandId: Schema.String }),
      Result: CommandRow,
      execute: (r) => sql`SELECT request_sha256, response FROM receipt_commands
                          WHERE tenant_id = ${r.tenant} AND command_id = ${r.commandId}`.withoutTransform
    })

    const lockFiles = SqlSchema.findAll({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ tenant: Schema.String, ids: Schema.Array(Schema.String) }),
      Result: FileRow,
      execute: (r) => sql`SELECT id::text AS id, receipt_id::text AS receipt_id
                          FROM receipt_files WHERE tenant_id = ${r.tenant} AND id = ANY(${r.ids}::uuid[])
                          ORDER BY id FOR UPDATE`.withoutTransform
    })

    const insertReceipt = (r: NewReceipt, lines: ReadonlyArray<{ readonly description: string; readonly quantity: number; readonly unitMinor: number }>) =>
      Effect.all([
        sql`INSERT INTO receipts (id, tenant_id, command_id, reference, currency, total_minor, paid_at, payer_name, payer_email, recorded_by, created_at)
            VALUES (${r.id}, ${r.tenant}, ${r.commandId}, ${r.reference}, ${r.currency}, ${r.totalMinor}, ${r.paidAt}, ${r.payerName},
                    ${r.payerEmail}, ${r.recordedBy}, ${r.at})`.withoutTransform,
        sql`INSERT INTO receipt_lines ${sql.insert(lines.map((line, i) => ({
          receipt_id: r.id,
          line_no: i + 1,
          description: line.description,
          quantity: line.quantity,
          unit_minor: line.unitMinor,
          amount_minor: line.quantity * line.unitMinor
        })))}`.withoutTransform
      ],
      // Stryker disable next-line ObjectLiteral,BooleanLiteral: the inserts' results are not read
      { discard: true })

    const attachFiles = (receiptId: string, ids: ReadonlyArray<string>) =>
      // Stryker disable next-line ConditionalExpression: an empty list matches no row; the guard only saves the statement
      ids.length === 0 ? Effect.void : Effect.asVoid(sql`UPDATE receipt_files SET receipt_id = ${receiptId} WHERE id = ANY(${ids}::uuid[])`.withoutTransform)

    const insertEffects = (r: { readonly receiptId: string; readonly tenant: string; readonly at: Date; readonly effects: ReadonlyArray<NewEffect> }) =>
      sql`INSERT INTO receipt_effects ${sql.insert(r.effects.map((e) => ({
        id: e.id,
        receipt_id: r.receiptId,
        tenant_id: r.tenant,
        seq: e.seq,
        kind: e.kind,
        file_id: e.fileId,
        state: "pending",
        attempt: 0,
        next_attempt_at: r.at,
        created_at: r.at,
        updated_at: r.at
      })))}`.withoutTransform

    const insertCommand = (r: { readonly tenant: string; readonly commandId: string; readonly requestSha256: string; readonly receiptId: string; readonly response: unknown; readonly at: Date }) =>
      sql`INSERT INTO receipt_commands (tenant_id, command_id, request_sha256, receipt_id, response, created_at)
          VALUES (${r.tenant}, ${r.commandId}, ${r.requestSha256}, ${r.receiptId}, ${JSON.stringify(r.response)}::jsonb, ${r.at})`.withoutTransform

    const insertAudit = (r: { readonly tenant: string; readonly receiptId: string; readonly actor: string; readonly correlationId: string; readonly at: Date }) =>
      sql`INSERT INTO receipt_audit (tenant_id, receipt_id, action, actor, correlation_id, at)
          VALUES (${r.tenant}, ${r.receiptId}, 'receipt-recorded', ${r.actor}, ${r.correlationId}, ${r.at})`.withoutTransform

    // Spec 002: a stale claim returns to the retry path (unlike reset mail: a receipt notification is retried
    // under the same identity and frozen envelope, so a repeat is safe for a deduplicating provider).
    const recoverStale = (r: { readonly claimedBefore: Date; readonly at: Date }) =>
      sql<{ readonly id: string }>`
        UPDATE receipt_effects
        SET state = 'pending', lease_owner = NULL, next_attempt_at = ${r.at}, last_error = 'stale-claim', updated_at = ${r.at}
        WHERE state = 'running' AND claimed_at < ${r.claimedBefore}
        RETURNING id::text AS id`.withoutTransform

    // Eligible: pending, due, and every earlier effect of its receipt done. Lower attempt counts first.
    const claimOne = SqlSchema.findAll({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ now: Schema.DateFromSelf, owner: Schema.String, receipt: Schema.NullOr(Schema.String) }),
      Result: ClaimedEffect,
      execute: (r) => sql`
        ${claimDue(sql, {
          table,
          due: sql`state = 'pending' AND next_attempt_at <= ${r.now}
            ${r.receipt === null ? sql`` : sql`AND receipt_id = ${r.receipt}`}
            AND NOT EXISTS (
              SELECT 1 FROM receipt_effects earlier
              WHERE earlier.receipt_id = receipt_effects.receipt_id AND earlier.seq < receipt_effects.seq AND earlier.state <> 'done'
            )`,
          orderBy: sql`attempt, next_attempt_at, id`,
          limit: 1,
          lease: sql`state = 'running', claimed_at = ${r.now}, lease_owner = ${r.owner}, updated_at = ${r.now}`,
          returning: sql`m.id, m.receipt_id, m.tenant_id, m.seq, m.kind, m.file_id, m.attempt, m.envelope, m.envelope_sha256`
        })}
        SELECT c.id::text AS id, c.receipt_id::text AS receipt_id, c.tenant_id, c.seq, c.kind, c.file_id::text AS file_id,
               f.sha256 AS file_sha256, c.attempt, c.envelope, c.envelope_sha256
        FROM claimed c LEFT JOIN receipt_files f ON f.id = c.file_id`.withoutTransform
    })

    const fence = (claim: ClaimedEffect) => sql`m.id = ${claim.id} AND m.attempt = ${claim.attempt} AND m.state = 'running'`
    const target = (claim: ClaimedEffect) => ({ resource: table, id: claim.id, attempt: claim.attempt })

    const freeze = (claim: ClaimedEffect, envelope: string, sha256: string, at: Date) =>
      fenced(
        sql<{ readonly id: string }>`
          UPDATE receipt_effects m SET envelope = ${envelope}, envelope_sha256 = ${sha256}, updated_at = ${at}
          WHERE ${fence(claim)} AND m.envelope IS NULL RETURNING m.id`.withoutTransform,
        target(claim)
      )

    const complete = (claim: ClaimedEffect, at: Date) =>
      fenced(
        sql<{ readonly id: string }>`
          UPDATE receipt_effects m SET state = 'done', completed_at = ${at}, lease_owner = NULL, last_error = NULL, updated_at = ${at}
          WHERE ${fence(claim)} RETURNING m.id`.withoutTransform,
        target(claim)
      )

    const retry = (claim: ClaimedEffect, r: { readonly nextAttemptAt: Date; readonly lastError: string; readonly at: Date }) =>
      fenced(
        sql<{ readonly id: string }>`
          UPDATE receipt_effects m
          SET state = 'pending', next_attempt_at = ${r.nextAttemptAt}, last_error = ${r.lastError}, lease_owner = NULL, updated_at = ${r.at}
          WHERE ${fence(claim)} RETURNING m.id`.withoutTransform,
        target(claim)
      )

    const notifyData = SqlSchema.findOne({
      Request: Schema.String,
      Result: NotifyData,
      execute: (id) => sql`
        SELECT r.reference, r.currency, r.total_minor::text AS total_minor, r.paid_at, r.payer_name, r.payer_email,
               COALESCE((SELECT json_agg(json_build_object('description', l.description, 'quantity', l.quantity,
                          'unit_minor', l.unit_minor, 'amount_minor', l.amount_minor) ORDER BY l.line_no)
                         FROM receipt_lines l WHERE l.receipt_id = r.id), '[]'::json) AS lines,
               (SELECT count(*)::int FROM receipt_files f WHERE f.receipt_id = r.id) AS files
        FROM receipts r WHERE r.id = ${id}`.withoutTransform
    })

    const filesOf = SqlSchema.findAll({
      Request: Schema.String,
      // Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
      Result: Schema.Struct({ id: Schema.String, sha256: Schema.String }),
      execute: (receiptId) => sql`SELECT id::text AS id, sha256 FROM receipt_files WHERE receipt_id = ${receiptId} ORDER BY id`.withoutTransform
    })

    const receiptHead = SqlSchema.findOne({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ tenant: Schema.String, id: Schema.String }),
      Result: ReceiptHead,
      execute: (r) => sql`SELECT id::text AS id, tenant_id, reference, created_at FROM receipts
                          WHERE tenant_id = ${r.tenant} AND id = ${r.id}`.withoutTransform
    })

    // The console's list: one tenant, optionally one state, oldest first, each receipt's effects in seq order, by keyset
    // on (created_at, receipt_id, seq) (receipt_effects_tenant).
    const listTenant = SqlSchema.findAll({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({
        tenant: Schema.String,
        state: Schema.NullOr(Schema.Literal("pending", "running", "done")),
        // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
        after: Schema.NullOr(Schema.Struct({ at: Schema.String, receiptId: Schema.String, seq: Schema.Number })),
        limit: Schema.Number
      }),
      Result: EffectItemRow,
      execute: (r) => sql`
        SELECT ${sql.literal(effectItemColumns)} FROM receipt_effects e
        WHERE e.tenant_id = ${r.tenant}
          ${r.state === null ? sql`` : sql`AND e.state = ${r.state}`}
          ${r.after === null ? sql`` : sql`AND (e.created_at, e.receipt_id, e.seq) > (${r.after.at}::timestamptz, ${r.after.receiptId}::uuid, ${r.after.seq})`}
        ORDER BY e.created_at, e.receipt_id, e.seq LIMIT ${r.limit}`.withoutTransform
    })

    const findEffect = SqlSchema.findOne({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ tenant: Schema.String, id: Schema.String }),
      Result: EffectItemRow,
      execute: (r) => sql`
        SELECT ${sql.literal(effectItemColumns)} FROM receipt_effects e
        WHERE e.tenant_id = ${r.tenant} AND e.id = ${r.id}::uuid`.withoutTransform
    })

    // A receipt's business audit, newest first, bounded (receipt_audit_receipt).
    const auditOf = SqlSchema.findAll({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ tenant: Schema.String, receiptId: Schema.String, limit: Schema.Number }),
      Result: AuditRow,
      execute: (r) => sql`
        SELECT action, actor, correlation_id, at FROM receipt_audit
        WHERE receipt_id = ${r.receiptId}::uuid AND tenant_id = ${r.tenant}
        ORDER BY audit_id DESC LIMIT ${r.limit}`.withoutTransform
    })

    const effectsOf = SqlSchema.findAll({
      Request: Schema.String,
      Result: EffectRow,
      execute: (receiptId) => sql`
        SELECT id::text AS id, seq, kind, state, attempt, next_attempt_at, last_error, envelope IS NOT NULL AS frozen, completed_at
        FROM receipt_effects WHERE receipt_id = ${receiptId} ORDER BY seq`.withoutTransform
    })

    // Spec 001: a stack does not sleep while a receipt's effects are unfinished. Pending effects (eligible, waiting
    // for an earlier effect or for a retry) and running ones (a claim, or a stale one going back to the retry path)
    // both have their own partial index (the OR lets PostgreSQL combine the two); only done has ended.
    const findPending = SqlSchema.findOne({
      Request: Schema.Void,
      // Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
      Result: Schema.Struct({ found: Schema.Number }),
      execute: () => sql`
        SELECT 1 AS found FROM receipt_effects WHERE state = 'pending' OR state = 'running' LIMIT 1`.withoutTransform
    })

    // The queue view: counts by state and completions per window in one pass, and the oldest effect the claim would
    // take now (pending, due, every earlier effect of its receipt done: receipt_effects_due, then receipt_effects_receipt
    // per candidate). It became due when its attempt time came or when the last earlier effect completed, if later.
    const queueView = SqlSchema.single({
      Request: Schema.Void,
      Result: QueueViewRow,
      execute: () => queueViewQuery(sql, {
        groups: sql`
          SELECT state, ${completionBucket(sql, sql`completed_at`)} AS bucket, count(*)::int AS count
          FROM receipt_effects GROUP BY 1, 2`,
        dueSince: sql`
          SELECT min(greatest(e.next_attempt_at, (
                   SELECT max(earlier.completed_at) FROM receipt_effects earlier
                   WHERE earlier.receipt_id = e.receipt_id AND earlier.seq < e.seq)))
          FROM receipt_effects e
          WHERE e.state = 'pending' AND e.next_attempt_at <= now()
            AND NOT EXISTS (
              SELECT 1 FROM receipt_effects earlier
              WHERE earlier.receipt_id = e.receipt_id AND earlier.seq < e.seq AND earlier.state <> 'done')`
      }).withoutTransform
    })

    return {
      insertFile: (r: Parameters<typeof insertFile>[0]) => Effect.asVoid(insertFile(r)).pipe(storage("insertFile")),
      lockCommand: (tenant: string, commandId: string) => Effect.asVoid(lockCommand(tenant, commandId)).pipe(storage("lockCommand")),
      findCommand: (tenant: string, commandId: string) => findCommand({ tenant, commandId }).pipe(storage("findCommand")),
      lockFiles: (tenant: string, ids: ReadonlyArray<string>) => lockFiles({ tenant, ids }).pipe(storage("lockFiles")),
      insertReceipt: (r: NewReceipt, lines: Parameters<typeof insertReceipt>[1]) => insertReceipt(r, lines).pipe(storage("insertReceipt")),
      attachFiles: (receiptId: string, ids: ReadonlyArray<string>) => attachFiles(receiptId, ids).pipe(storage("attachFiles")),
      insertEffects: (r: Parameters<typeof insertEffects>[0]) => Effect.asVoid(insertEffects(r)).pipe(storage("insertEffects")),
      insertCommand: (r: Parameters<typeof insertCommand>[0]) => Effect.asVoid(insertCommand(r)).pipe(storage("insertCommand")),
      insertAudit: (r: Parameters<typeof insertAudit>[0]) => Effect.asVoid(insertAudit(r)).pipe(storage("insertAudit")),
      recoverStale: (r: Parameters<typeof recoverStale>[0]) => Effect.map(recoverStale(r), (rows) => rows.length).pipe(storage("recoverStale")),
      claimOne: (r: { readonly now: Date; readonly owner: string; readonly receipt: string | null }) =>
        Effect.map(claimOne(r), (rows) => rows[0]).pipe(storage("claim")),
      freeze: (claim: ClaimedEffect, envelope: string, sha256: string, at: Date) =>
        Effect.asVoid(freeze(claim, envelope, sha256, at)).pipe(storage("freeze")),
      complete: (claim: ClaimedEffect, at: Date) => Effect.asVoid(complete(claim, at)).pipe(storage("complete")),
      retry: (claim: ClaimedEffect, r: Parameters<typeof retry>[1]) => Effect.asVoid(retry(claim, r)).pipe(storage("retry")),
      notifyData: (receiptId: string) => notifyData(receiptId).pipe(storage("notifyData")),
      filesOf: (receiptId: string) => filesOf(receiptId).pipe(storage("filesOf")),
      receiptHead: (tenant: string, id: string) => receiptHead({ tenant, id }).pipe(storage("receiptHead")),
      effectsOf: (receiptId: string) => effectsOf(receiptId).pipe(storage("effectsOf")),
      listTenant: (r: Parameters<typeof listTenant>[0]) => listTenant(r).pipe(storage("listTenant")),
      findEffect: (tenant: string, id: string) => findEffect({ tenant, id }).pipe(storage("findEffect")),
      auditOf: (r: Parameters<typeof auditOf>[0]) => auditOf(r).pipe(storage("auditOf")),
      hasPending: Effect.map(findPending(undefined), Option.isSome).pipe(storage("hasPending")),
      queueView: queueView(undefined).pipe(Effect.catchTag("NoSuchElementException", Effect.die), storage("queueView")),
      transaction: <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) => sql.withTransaction(effect).pipe(storage(operation))
    } as const
  })
}) {}
