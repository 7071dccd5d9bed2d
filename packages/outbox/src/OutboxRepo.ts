import { completionBucket, queueViewQuery, QueueViewRow } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { DeadReason, DeliveryErrorCode, MessageState } from "./Domain.ts"
import { orDieIfMissing, storage } from "./Storage.ts"

// The service's SQL (enqueue, targets, dead letters, redrive, audit); the worker's is DeliveryRepo.
// Private to the package. Statements use `.withoutTransform` so these row shapes hold whatever name
// transforms the backend's pool has. Times are parameters from Effect's Clock, never now().

/** The state row with its identities (never the envelope): what operators and callers see. */
export const MessageRow = Schema.Struct({
  id: Schema.String,
  tenant: Schema.String,
  project: Schema.String,
  idempotency_key: Schema.String,
  event_identity: Schema.String,
  max_attempts: Schema.Number,
  attempt_ceiling: Schema.Number,
  state: MessageState,
  attempt: Schema.Number,
  due_at: Schema.NullOr(Schema.DateFromSelf),
  last_error: Schema.NullOr(DeliveryErrorCode),
  dead_reason: Schema.NullOr(DeadReason),
  created_at: Schema.DateFromSelf,
  delivered_at: Schema.NullOr(Schema.DateFromSelf),
  dead_at: Schema.NullOr(Schema.DateFromSelf)
})
export type MessageRow = typeof MessageRow.Type

/** An operator action on a message, as its audit row keeps it: actor and stable codes only. */
export const AuditRow = Schema.Struct({
  action: Schema.String,
  actor: Schema.String,
  attempt: Schema.NullOr(Schema.Number),
  detail: Schema.NullOr(Schema.String),
  at: Schema.DateFromSelf
})
export type AuditRow = typeof AuditRow.Type

/** What an idempotent enqueue compares and replays. */
export const KeyedRow = Schema.Struct({ ...MessageRow.fields, request_sha256: Schema.String, envelope: Schema.String })
export type KeyedRow = typeof KeyedRow.Type

// The columns of MessageRow, from outbox_messages m joined with outbox_envelopes e.
const messageColumns = `m.id, m.tenant, m.project, e.idempotency_key, e.event_identity, m.max_attempts, m.attempt_ceiling,
  m.state, m.attempt, m.due_at, m.last_error, m.dead_reason, e.created_at, m.delivered_at, m.dead_at`

const TargetRow = Schema.Struct({
  tenant: Schema.String,
  project: Schema.String,
  endpoint: Schema.String,
  created_at: Schema.DateFromSelf,
  updated_at: Schema.DateFromSelf,
  inserted: Schema.Boolean
})
export type TargetRow = typeof TargetRow.Type

const Scope = Schema.Struct({ tenant: Schema.String, project: Schema.String })

export class OutboxRepo extends Effect.Service<OutboxRepo>()("@delivery/outbox/OutboxRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    // One statement writes both rows: the immutable envelope (ON CONFLICT DO NOTHING, so a concurrent
    // enqueue of the same key loses quietly and reads the winner) and, only if it was new, its state row.
    const insert = SqlSchema.findOne({
      Request: Schema.Struct({
        id: Schema.String, tenant: Schema.String, project: Schema.String, idempotencyKey: Schema.String,
        requestSha256: Schema.String, eventIdentity: Schema.String, envelope: Schema.String,
        maxAttempts: Schema.Number, now: Schema.DateFromSelf
      }),
      Result: MessageRow,
      execute: (r) => sql`
        WITH e AS (
          INSERT INTO outbox_envelopes
            (id, tenant, project, idempotency_key, request_sha256, event_identity, envelope, created_at)
          VALUES (${r.id}, ${r.tenant}, ${r.project}, ${r.idempotencyKey}, ${r.requestSha256}, ${r.eventIdentity}, ${r.envelope},
            ${r.now})
          ON CONFLICT (tenant, project, idempotency_key) DO NOTHING
          RETURNING id, idempotency_key, event_identity, created_at
        ), m AS (
          INSERT INTO outbox_messages (id, tenant, project, state, max_attempts, attempt_ceiling, due_at, created_at)
          SELECT id, ${r.tenant}, ${r.project}, 'pending', ${r.maxAttempts}, ${r.maxAttempts}, ${r.now}, ${r.now} FROM e
          RETURNING *
        )
        SELECT ${sql.literal(messageColumns)} FROM m JOIN e ON e.id = m.id`.withoutTransform
    })

    const findByKey = SqlSchema.findOne({
      Request: Schema.Struct({ ...Scope.fields, idempotencyKey: Schema.String }),
      Result: KeyedRow,
      execute: (r) => sql`
        SELECT ${sql.literal(messageColumns)}, e.request_sha256, e.envelope
        FROM outbox_envelopes e JOIN outbox_messages m ON m.id = e.id
        WHERE e.tenant = ${r.tenant} AND e.project = ${r.project} AND e.idempotency_key = ${r.idempotencyKey}`.withoutTransform
    })

    const findInScope = SqlSchema.findOne({
      Request: Schema.Struct({ ...Scope.fields, id: Schema.String, lock: Schema.Boolean }),
      Result: MessageRow,
      execute: (r) => sql`
        SELECT ${sql.literal(messageColumns)} FROM outbox_messages m JOIN outbox_envelopes e ON e.id = m.id
        WHERE m.tenant = ${r.tenant} AND m.project = ${r.project} AND m.id = ${r.id}
        ${r.lock ? sql`FOR UPDATE OF m` : sql``}`.withoutTransform
    })

    // Keyset on (dead_at, id), always inside one tenant/project: a page never crosses tenants.
    const listDead = SqlSchema.findAll({
      Request: Schema.Struct({
        ...Scope.fields, limit: Schema.Number,
        after: Schema.NullOr(Schema.Struct({ deadAt: Schema.DateFromSelf, id: Schema.String }))
      }),
      Result: MessageRow,
      execute: (r) => sql`
        SELECT ${sql.literal(messageColumns)} FROM outbox_messages m JOIN outbox_envelopes e ON e.id = m.id
        WHERE m.tenant = ${r.tenant} AND m.project = ${r.project} AND m.state = 'dead'
        ${r.after === null ? sql`` : sql`AND (m.dead_at, m.id) > (${r.after.deadAt}, ${r.after.id}::uuid)`}
        ORDER BY m.dead_at, m.id LIMIT ${r.limit}`.withoutTransform
    })

    // The console's list: one tenant/project, optionally one state, oldest first, by keyset on (created_at, id). The
    // walk is on the envelopes' index (outbox_envelopes_scope), written once per message: the state rows, rewritten by
    // every claim and outcome, carry no index for it (migrations/0034_outbox_scope_on_envelopes.sql).
    const listScope = SqlSchema.findAll({
      Request: Schema.Struct({
        ...Scope.fields, state: Schema.NullOr(MessageState), limit: Schema.Number,
        after: Schema.NullOr(Schema.Struct({ at: Schema.DateFromSelf, id: Schema.String }))
      }),
      Result: MessageRow,
      execute: (r) => sql`
        SELECT ${sql.literal(messageColumns)} FROM outbox_envelopes e JOIN outbox_messages m ON m.id = e.id
        WHERE e.tenant = ${r.tenant} AND e.project = ${r.project}
        ${r.state === null ? sql`` : sql`AND m.state = ${r.state}`}
        ${r.after === null ? sql`` : sql`AND (e.created_at, e.id) > (${r.after.at}, ${r.after.id}::uuid)`}
        ORDER BY e.created_at, e.id LIMIT ${r.limit}`.withoutTransform
    })

    // A message's audit trail (operator actions: redrives), oldest first, bounded.
    const auditTrail = SqlSchema.findAll({
      Request: Schema.Struct({ ...Scope.fields, id: Schema.String, limit: Schema.Number }),
      Result: AuditRow,
      execute: (r) => sql`
        SELECT action, actor, attempt, detail, at FROM outbox_audit
        WHERE tenant = ${r.tenant} AND project = ${r.project} AND message_id = ${r.id}::uuid
        ORDER BY audit_id LIMIT ${r.limit}`.withoutTransform
    })

    // Redrive: new attempts on the same row (same id, envelope and idempotency key). The attempt
    // counter is never reset; the ceiling moves up instead.
    const redrive = SqlSchema.single({
      Request: Schema.Struct({ id: Schema.String, extra: Schema.Number, now: Schema.DateFromSelf }),
      Result: MessageRow,
      execute: (r) => sql`
        UPDATE outbox_messages m
        SET state = 'pending', due_at = ${r.now}, attempt_ceiling = m.attempt + ${r.extra},
          dead_at = NULL, dead_reason = NULL
        FROM outbox_envelopes e
        WHERE m.id = ${r.id} AND m.state = 'dead' AND e.id = m.id
        RETURNING ${sql.literal(messageColumns)}`.withoutTransform
    })

    const audit = SqlSchema.void({
      Request: Schema.Struct({
        ...Scope.fields, action: Schema.String, messageId: Schema.NullOr(Schema.String), actor: Schema.String,
        attempt: Schema.NullOr(Schema.Number), detail: Schema.NullOr(Schema.String), at: Schema.DateFromSelf
      }),
      execute: (r) => sql`
        INSERT INTO outbox_audit (tenant, project, action, message_id, actor, attempt, detail, at)
        VALUES (${r.tenant}, ${r.project}, ${r.action}, ${r.messageId}, ${r.actor}, ${r.attempt}, ${r.detail}, ${r.at})`
        .withoutTransform
    })

    const upsertTarget = SqlSchema.single({
      Request: Schema.Struct({ ...Scope.fields, endpoint: Schema.String, now: Schema.DateFromSelf }),
      Result: TargetRow,
      // xmax = 0 only on a freshly inserted row: tells registration from replacement for the audit.
      execute: (r) => sql`
        INSERT INTO outbox_targets (tenant, project, endpoint, created_at, updated_at)
        VALUES (${r.tenant}, ${r.project}, ${r.endpoint}, ${r.now}, ${r.now})
        ON CONFLICT (tenant, project) DO UPDATE SET endpoint = EXCLUDED.endpoint, updated_at = EXCLUDED.updated_at
        RETURNING tenant, project, endpoint, created_at, updated_at, (xmax = 0) AS inserted`.withoutTransform
    })

    const findTarget = SqlSchema.findOne({
      Request: Scope,
      Result: TargetRow,
      execute: (r) => sql`
        SELECT tenant, project, endpoint, created_at, updated_at, false AS inserted FROM outbox_targets
        WHERE tenant = ${r.tenant} AND project = ${r.project}`.withoutTransform
    })

    // Spec 001: a stack does not sleep while its outbox still owes a delivery. Exactly the rows of the claim index
    // (outbox_messages_due): pending ones, due or waiting for a retry, and delivering ones, whose lease a worker
    // holds or will take over when it expires. Delivered rows and dead letters are the worker's end states.
    const findPending = SqlSchema.findOne({
      Request: Schema.Void,
      Result: Schema.Struct({ found: Schema.Number }),
      execute: () => sql`
        SELECT 1 AS found FROM outbox_messages WHERE state IN ('pending', 'delivering') LIMIT 1`.withoutTransform
    })

    // The queue view: counts by state and deliveries per window in one pass over the state rows (the counts read every
    // row anyway), and the oldest due row from the claim index, by the claim's own predicate. Never an envelope.
    const queueView = SqlSchema.single({
      Request: Schema.Void,
      Result: QueueViewRow,
      execute: () => queueViewQuery(sql, {
        groups: sql`
          SELECT state, ${completionBucket(sql, sql`delivered_at`)} AS bucket, count(*)::int AS count
          FROM outbox_messages GROUP BY 1, 2`,
        dueSince: sql`
          SELECT min(due_at) FROM outbox_messages WHERE state IN ('pending', 'delivering') AND due_at <= now()`
      }).withoutTransform
    })

    return {
      insert: (r: Parameters<typeof insert>[0]) => storage("insert")(insert(r)),
      findByKey: (r: Parameters<typeof findByKey>[0]) => storage("findByKey")(findByKey(r)),
      findInScope: (r: Parameters<typeof findInScope>[0]) => storage("findInScope")(findInScope(r)),
      listDead: (r: Parameters<typeof listDead>[0]) => storage("listDead")(listDead(r)),
      listScope: (r: Parameters<typeof listScope>[0]) => storage("listScope")(listScope(r)),
      auditTrail: (r: Parameters<typeof auditTrail>[0]) => storage("auditTrail")(auditTrail(r)),
      redrive: (r: Parameters<typeof redrive>[0]) => storage("redrive")(orDieIfMissing(redrive(r))),
      audit: (r: Parameters<typeof audit>[0]) => storage("audit")(audit(r)),
      upsertTarget: (r: Parameters<typeof upsertTarget>[0]) => storage("upsertTarget")(orDieIfMissing(upsertTarget(r))),
      findTarget: (r: Parameters<typeof findTarget>[0]) => storage("findTarget")(findTarget(r)),
      hasPending: storage("hasPending")(Effect.map(findPending(undefined), Option.isSome)),
      queueView: storage("queueView")(orDieIfMissing(queueView(undefined))),
      /** Wraps a transaction so that BEGIN/COMMIT failures are storage outcomes too. */
      transaction: <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) =>
        storage(operation)(sql.withTransaction(effect))
    }
  })
}) {}
