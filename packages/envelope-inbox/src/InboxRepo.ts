import { completionBucket, makeBatcher, queueViewQuery, QueueViewRow, storageErrors, windowsStart } from "@delivery/core"
import type { VerifiedIdentity } from "@delivery/identity"
import { SqlClient, type SqlError, SqlSchema } from "@effect/sql"
import { Data, Effect, Option, Predicate, Schema } from "effect"
import { type AuditOutcome, ConflictReason } from "./Domain.ts"
import { IngestConcurrencyConfig } from "./InboxConfig.ts"
import type { LockedStream } from "./StreamRules.ts"

// SQL only; private to the package. `.withoutTransform` keeps these row shapes whatever name transforms
// the backend's pool uses. Times are parameters from Effect's Clock, never now(), so tests drive expiry.

/** A statement (or BEGIN/COMMIT) failed: nothing of the transaction is committed. Never leaves the package. */
export class StorageFailure extends Data.TaggedError("StorageFailure")<{
  readonly operation: string
  readonly sqlstate: string
}> {}

/** Database failures become `StorageFailure` (see core's `storageErrors`). */
export const storage = (operation: string) =>
  storageErrors(operation, (fault) => new StorageFailure(fault))

// node-postgres returns bigint columns as strings; sequences stay below 2^53, so numbers are exact.
const Int8 = Schema.Union(Schema.Number, Schema.NumberFromString)

const StreamRow = Schema.Struct({
  stream_id: Int8,
  contiguous_cursor: Int8,
  replay_floor: Int8,
  high_sequence: Int8
})
const toStream = (row: typeof StreamRow.Type): LockedStream => ({
  streamId: row.stream_id,
  cursor: row.contiguous_cursor,
  replayFloor: row.replay_floor,
  highSequence: row.high_sequence
})

export interface StreamKey {
  readonly tenant: string
  readonly project: string
  readonly producer: string
}

export interface AuditRow {
  readonly recordedAt: Date
  readonly tenant: string
  readonly project: string | null
  readonly producer: string | null
  readonly account: string
  readonly device: string | null
  readonly eventIdentity: string | null
  readonly outcome: AuditOutcome
  readonly reason: string
  readonly correlationId: string
}

/** What an audit row knows before the body is read: the verified caller and the request. */
export const auditContextOf = (identity: VerifiedIdentity, correlationId: string) => ({
  tenant: identity.tenant,
  account: identity.account,
  // Stryker disable next-line ConditionalExpression: an API key identity has no device member, and the driver sends undefined as NULL, exactly like null
  device: identity._tag === "Device" ? identity.device : null,
  project: null,
  producer: null,
  eventIdentity: null,
  correlationId
})

/** One row standing for `refusalCount` sync-rate-limited refusals of one identity in one limiter window. */
export interface CountedRefusalRow extends AuditRow {
  readonly refusalCount: number
}

/** What `inbox_ingest` needs: the stream, the incoming identities, the payload and the audit context. */
export interface IngestWrite {
  readonly tenant: string
  readonly project: string
  readonly producer: string
  readonly sequence: number
  readonly eventId: string
  readonly idempotencyKey: string
  readonly eventIdentity: string
  /** The whole envelope as RFC 8785 JSON, signature included. */
  readonly envelope: string
  readonly account: string
  readonly device: string | null
  readonly correlationId: string
  readonly at: Date
  readonly expiresAt: Date
  /** The key the signature was verified with: its state is checked in the same transaction (step 3's half). */
  readonly keyId: string
  readonly publicKey: Uint8Array
}

/** Its answer: `reordered` is an accepted arrival out of order (audit only; the public outcome is `accepted`). */
const IngestRow = Schema.Union(
  Schema.Struct({ outcome: Schema.Literal("accepted"), reason: Schema.Literal("accepted", "reordered"), cursor: Int8 }),
  Schema.Struct({ outcome: Schema.Literal("duplicate"), reason: Schema.Literal("duplicate"), cursor: Int8 }),
  // Stryker disable next-line ObjectLiteral: an empty Struct passes any object through as it is, and a refused row (the only shape left) is read for its reason alone
  Schema.Struct({ outcome: Schema.Literal("refused"), reason: ConflictReason, cursor: Int8 }),
  // Step 3's half that reads the key's state: refused, with its audit row committed and nothing else.
  Schema.Struct({ outcome: Schema.Literal("key-refused"), reason: Schema.Literal("key-unknown", "key-revoked", "key-expired"), cursor: Schema.Null }),
  // The key id now names other bytes than the caller verified with (purged, then registered again): nothing written.
  Schema.Struct({ outcome: Schema.Literal("key-replaced"), reason: Schema.Literal("key-replaced"), cursor: Schema.Null })
)
export type IngestOutcome = typeof IngestRow.Type
// Built once: the ingest statement runs on every envelope. Its parameters are already typed values of
// ours (validated by the envelope stages), so only the rows that come back are decoded.
const decodeBatchRows = Schema.decodeUnknown(Schema.Array(Schema.extend(Schema.Struct({ index: Schema.Int }), IngestRow)))

// Group commit of the ingest statement (docs/controlplane-inbound.md, "Group commit"): INBOX_INGEST_CONCURRENCY
// statements at once per process, each of at most this many envelopes and this many characters of envelope text.
const INGEST_BATCH_ITEMS = 32
const INGEST_BATCH_CHARS = 4 * 1024 * 1024

// Retention deletes at most this many payload rows per statement (spec 000).
export const RETENTION_BATCH = 1_000

/**
 * @effect/sql 0.52 turns a failed COMMIT (or ROLLBACK) into a defect. For us it is the plainest storage
 * outcome there is (a deferred constraint, a serialization failure, a lost connection): nothing was
 * acknowledged, the caller may retry. So that SqlError is put back into the error channel.
 */
const commitFailureAsError = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError.SqlError, R> =>
  Effect.catchSomeDefect(effect, (defect) =>
    Predicate.isTagged(defect, "SqlError") ? Option.some(Effect.fail(defect as SqlError.SqlError)) : Option.none())

/** Who raised (or tried to raise) a stream's replay floor, from what to what. */
export interface FloorAuditRow extends StreamKey {
  readonly outcome: "applied" | "unchanged"
  readonly floorBefore: number
  readonly floorAfter: number
  readonly requested: number
  readonly actor: string
  readonly at: Date
  readonly correlationId: string
}

const SummaryRow = Schema.Struct({
  project: Schema.String,
  producer: Schema.String,
  contiguous_cursor: Int8,
  replay_floor: Int8,
  high_sequence: Int8,
  created_at: Schema.DateFromSelf,
  last_received_at: Schema.DateFromSelf
})
export type SummaryRow = typeof SummaryRow.Type

const FloorAuditRead = Schema.Struct({
  action: Schema.String,
  outcome: Schema.Literal("applied", "unchanged"),
  floor_before: Int8,
  floor_after: Int8,
  requested: Int8,
  actor: Schema.String,
  at: Schema.DateFromSelf,
  correlation_id: Schema.String
})
export type FloorAuditRead = typeof FloorAuditRead.Type

export class InboxRepo extends Effect.Service<InboxRepo>()("@delivery/envelope-inbox/InboxRepo", {
  scoped: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    // Creates the stream on first use and locks its row until commit. DO UPDATE (not DO NOTHING) takes
    // the row lock in the same statement and returns the latest committed cursor, even after waiting.
    const lockStream = SqlSchema.single({
      Request: Schema.Struct({ tenant: Schema.String, project: Schema.String, producer: Schema.String, now: Schema.DateFromSelf }),
      Result: StreamRow,
      execute: (r) => sql`
        INSERT INTO inbox_streams (tenant, project, producer, created_at, last_received_at)
        VALUES (${r.tenant}, ${r.project}, ${r.producer}, ${r.now}, ${r.now})
        ON CONFLICT (tenant, project, producer) DO UPDATE SET last_received_at = EXCLUDED.last_received_at
        RETURNING stream_id, contiguous_cursor, replay_floor, high_sequence`.withoutTransform
    })

    const findStream = SqlSchema.findOne({
      // Stryker disable next-line ObjectLiteral: an empty Struct passes any object through as it is, and the request is always a stream key's three strings
      Request: Schema.Struct({ tenant: Schema.String, project: Schema.String, producer: Schema.String }),
      Result: StreamRow,
      execute: (r) => sql`
        SELECT stream_id, contiguous_cursor, replay_floor, high_sequence FROM inbox_streams
        WHERE tenant = ${r.tenant} AND project = ${r.project} AND producer = ${r.producer}`.withoutTransform
    })

    // One tenant's streams by keyset on (project, producer), which the streams' unique index orders.
    const listStreams = SqlSchema.findAll({
      Request: Schema.Struct({
        tenant: Schema.String,
        project: Schema.NullOr(Schema.String),
        after: Schema.NullOr(Schema.Struct({ project: Schema.String, producer: Schema.String })),
        limit: Schema.Number
      }),
      Result: SummaryRow,
      execute: (r) => sql`
        SELECT project, producer, contiguous_cursor, replay_floor, high_sequence, created_at, last_received_at
        FROM inbox_streams WHERE tenant = ${r.tenant}
        ${r.project === null ? sql`` : sql`AND project = ${r.project}`}
        ${r.after === null ? sql`` : sql`AND (project, producer) > (${r.after.project}, ${r.after.producer})`}
        ORDER BY project, producer LIMIT ${r.limit}`.withoutTransform
    })

    const findSummary = SqlSchema.findOne({
      Request: Schema.Struct({ tenant: Schema.String, project: Schema.String, producer: Schema.String }),
      Result: SummaryRow,
      execute: (r) => sql`
        SELECT project, producer, contiguous_cursor, replay_floor, high_sequence, created_at, last_received_at
        FROM inbox_streams WHERE tenant = ${r.tenant} AND project = ${r.project} AND producer = ${r.producer}`.withoutTransform
    })

    // The newest floor changes of one stream first (inbox_stream_audit_stream indexes it), bounded.
    const floorAudit = SqlSchema.findAll({
      Request: Schema.Struct({ tenant: Schema.String, project: Schema.String, producer: Schema.String, limit: Schema.Number }),
      Result: FloorAuditRead,
      execute: (r) => sql`
        SELECT action, outcome, floor_before, floor_after, requested, actor, at, correlation_id FROM inbox_stream_audit
        WHERE tenant = ${r.tenant} AND project = ${r.project} AND producer = ${r.producer}
        ORDER BY at DESC, audit_id DESC LIMIT ${r.limit}`.withoutTransform
    })

    // End of the run of retained sequences base+1, base+2, ... (base when there is none): in a run,
    // sequence - row_number() stays equal to base.
    const runEnd = SqlSchema.single({
      // Stryker disable next-line ObjectLiteral: an empty Struct passes any object through as it is, and the request is always these two numbers
      Request: Schema.Struct({ streamId: Schema.Number, base: Schema.Number }),
      Result: Schema.Struct({ run_end: Int8 }),
      execute: (r) => sql`
        SELECT COALESCE(max(sequence), ${r.base}) AS run_end FROM (
          SELECT sequence, sequence - row_number() OVER (ORDER BY sequence) AS base
          FROM inbox_identities WHERE stream_id = ${r.streamId} AND sequence > ${r.base}
        ) run WHERE run.base = ${r.base}`.withoutTransform
    })

    const auditValues = (a: AuditRow) => sql`(
      ${a.recordedAt}, ${a.tenant}, ${a.project}, ${a.producer}, ${a.account}, ${a.device},
      ${a.eventIdentity}, ${a.outcome}, ${a.reason}, ${a.correlationId})`
    const auditColumns = sql`(recorded_at, tenant, project, producer, account, device, event_identity, outcome, reason, correlation_id)`

    const countedValues = (a: CountedRefusalRow) => sql`(
      ${a.recordedAt}, ${a.tenant}, ${a.project}, ${a.producer}, ${a.account}, ${a.device},
      ${a.eventIdentity}, ${a.outcome}, ${a.reason}, ${a.correlationId}, ${a.refusalCount})`
    const countedColumns = sql`(recorded_at, tenant, project, producer, account, device, event_identity, outcome, reason, correlation_id, refusal_count)`

    // Spec 000 steps 5 and 6 in one statement, so one transaction (migrations/0005_inbox_ingest_function.sql),
    // after the key's state (migrations/0033_inbox_ingest_key_check.sql): lock the stream, check retained
    // identities, replay floor and sequence, then commit identity, payload, cursor and audit row, or only the
    // audit row of a duplicate or refusal. Several envelopes at once (migrations/0035_inbox_ingest_batch.sql): each
    // is one inbox_ingest call with its own outcome, all in the statement's one transaction. Sent as a prepared
    // statement (the backend's pool names statements that end with the marker): its text never changes, so it is
    // parsed and planned once per connection.
    const ingestBatch = (ws: ReadonlyArray<IngestWrite>) =>
      Effect.flatMap(
        sql`SELECT o_index AS index, o_outcome AS outcome, o_reason AS reason, o_cursor AS cursor FROM inbox_ingest_batch(
          ${ws.map((w) => w.tenant)}::text[], ${ws.map((w) => w.project)}::text[], ${ws.map((w) => w.producer)}::text[],
          ${ws.map((w) => w.sequence)}::bigint[], ${ws.map((w) => w.eventId)}::text[], ${ws.map((w) => w.idempotencyKey)}::text[],
          ${ws.map((w) => w.eventIdentity)}::text[], ${ws.map((w) => w.envelope)}::text[], ${ws.map((w) => w.account)}::text[],
          ${ws.map((w) => w.device)}::text[], ${ws.map((w) => w.correlationId)}::text[], ${ws.map((w) => w.at)}::timestamptz[],
          ${ws.map((w) => w.expiresAt)}::timestamptz[], ${ws.map((w) => w.keyId)}::text[],
          ${ws.map((w) => Buffer.from(w.publicKey.buffer, w.publicKey.byteOffset, w.publicKey.byteLength))}::bytea[]
        ) /* prepared */`.withoutTransform,
        (rows) =>
          Effect.flatMap(decodeBatchRows(rows), (decoded) => {
            const outcomes: Array<IngestOutcome | undefined> = Array.from({ length: ws.length })
            for (const { index, ...outcome } of decoded) outcomes[index - 1] = outcome
            return outcomes.every((outcome) => outcome !== undefined)
              ? Effect.succeed(outcomes as ReadonlyArray<IngestOutcome>)
              : Effect.dieMessage("inbox_ingest_batch answered no row for an envelope")
          })
      )

    const ingest = yield* makeBatcher({
      span: "InboxRepo.ingest",
      // Validated with the rest of the environment at start-up (InboxConfig), like every setting of the package.
      concurrency: yield* Effect.orDie(IngestConcurrencyConfig),
      maxItems: INGEST_BATCH_ITEMS,
      weight: { of: (w: IngestWrite) => w.envelope.length, max: INGEST_BATCH_CHARS },
      run: ingestBatch,
      // A batch that failed committed nothing. Alone, each envelope fails only for its own reason (a database that is
      // down fails them all again): an element no other envelope can pass must not fail those it was batched with.
      retryAlone: true
    })

    const raiseFloor = (r: { readonly streamId: number; readonly floor: number; readonly cursor: number }) => sql`
      UPDATE inbox_streams SET replay_floor = GREATEST(replay_floor, ${r.floor}), contiguous_cursor = ${r.cursor}
      WHERE stream_id = ${r.streamId}`.withoutTransform

    // The retention statement: payload rows only, by key, at most RETENTION_BATCH of them.
    const deleteExpired = SqlSchema.single({
      Request: Schema.DateFromSelf,
      Result: Schema.Struct({ deleted: Int8 }),
      execute: (now) => sql`
        WITH expired AS (
          DELETE FROM inbox_payloads p USING (
            SELECT stream_id, sequence FROM inbox_payloads WHERE expires_at < ${now}
            ORDER BY expires_at LIMIT ${RETENTION_BATCH}
          ) e
          WHERE p.stream_id = e.stream_id AND p.sequence = e.sequence
          RETURNING 1
        ) SELECT count(*) AS deleted FROM expired`.withoutTransform
    })

    // The queue view: payloads retained or expired (what the next retention sweep deletes: `expires_at < now`, as
    // deleteExpired reads it), envelopes accepted per window from the permanent identities (their accepted_at index,
    // migrations/0024), and the payload longest past its expiry from inbox_payloads_expiry. Never a payload.
    const queueView = SqlSchema.single({
      Request: Schema.Void,
      Result: QueueViewRow,
      execute: () => queueViewQuery(sql, {
        groups: sql`
          SELECT CASE WHEN expires_at < now() THEN 'expired' ELSE 'retained' END AS state, NULL::int AS bucket,
                 count(*)::int AS count
          FROM inbox_payloads GROUP BY 1
          UNION ALL
          SELECT NULL, ${completionBucket(sql, sql`accepted_at`)}, count(*)::int
          FROM inbox_identities WHERE accepted_at > ${windowsStart(sql)} GROUP BY 2`,
        dueSince: sql`SELECT min(expires_at) FROM inbox_payloads WHERE expires_at < now()`
      }).withoutTransform
    })

    // An INSERT ... RETURNING or an aggregate that returned no row would be a bug, not an outcome.
    const noRowIsDefect = "NoSuchElementException" as const

    return {
      lockStream: (key: StreamKey, now: Date) => storage("lockStream")(Effect.map(Effect.catchTag(lockStream({ ...key, now }), noRowIsDefect, Effect.die), toStream)),
      queueView: storage("queueView")(Effect.catchTag(queueView(undefined), "NoSuchElementException", Effect.die)),
      findStream: (key: StreamKey) => storage("findStream")(Effect.map(findStream(key), Option.map(toStream))),
      listStreams: (r: Parameters<typeof listStreams>[0]) => storage("listStreams")(listStreams(r)),
      findSummary: (key: StreamKey) => storage("findSummary")(findSummary(key)),
      floorAudit: (key: StreamKey, limit: number) => storage("floorAudit")(floorAudit({ ...key, limit })),
      runEnd: (streamId: number, base: number) => storage("runEnd")(Effect.map(Effect.catchTag(runEnd({ streamId, base }), noRowIsDefect, Effect.die), (row) => row.run_end)),
      /** Autocommit: the statement is the transaction, so its answer is only seen after COMMIT. */
      ingest: (w: IngestWrite) => storage("ingest")(ingest(w)),
      insertAudit: (a: AuditRow) => storage("insertAudit")(Effect.asVoid(sql`INSERT INTO inbox_audit ${auditColumns} VALUES ${auditValues(a)}`.withoutTransform)),
      /** Several counted rows in one statement (so one transaction: all of them or none). */
      insertCountedRefusals: (rows: ReadonlyArray<CountedRefusalRow>) =>
        storage("insertCountedRefusals")(Effect.asVoid(
          sql`INSERT INTO inbox_audit ${countedColumns} VALUES ${sql.csv(rows.map(countedValues))}`.withoutTransform
        )),
      raiseFloor: (r: { streamId: number; floor: number; cursor: number }) => storage("raiseFloor")(Effect.asVoid(raiseFloor(r))),
      /** Inside the floor change's transaction (migrations/0011_inbox_stream_audit.sql). */
      insertFloorAudit: (a: FloorAuditRow) =>
        storage("insertFloorAudit")(Effect.asVoid(sql`
          INSERT INTO inbox_stream_audit
            (tenant, project, producer, action, outcome, floor_before, floor_after, requested, actor, at, correlation_id)
          VALUES (${a.tenant}, ${a.project}, ${a.producer}, 'replay-floor-raise', ${a.outcome}, ${a.floorBefore},
                  ${a.floorAfter}, ${a.requested}, ${a.actor}, ${a.at}, ${a.correlationId})`.withoutTransform)),
      /**
       * One retention batch in its own transaction under the restricted role: the statement runs with
       * privileges on inbox_payloads only, whatever it says (spec 000: "can delete only the payload table").
       */
      deleteExpiredBatch: (now: Date) =>
        storage("deleteExpired")(commitFailureAsError(sql.withTransaction(
          Effect.zipRight(
            sql`SET LOCAL ROLE inbox_retention`.withoutTransform,
            Effect.map(Effect.catchTag(deleteExpired(now), noRowIsDefect, Effect.die), (row) => row.deleted)
          )
        ))),
      /** Wraps a transaction so that BEGIN/COMMIT failures are storage failures too. */
      transaction: <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) => storage(operation)(commitFailureAsError(sql.withTransaction(effect)))
    }
  })
}) {}
