import { claimDue, completionBucket, fenced, queueViewQuery, QueueViewRow, storageErrors } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"

// SQL of the reset-mail outbox (migrations/0014_reset_mail_outbox.sql, 0015_reset_mail_fingerprint.sql); private
// to the package. Every transition after the claim is fenced: `id`, the claimed `attempt` and `state = 'sending'`.

export class ResetMailStorageUnavailable extends Schema.TaggedError<ResetMailStorageUnavailable>()(
  "ResetMailStorageUnavailable",
  { operation: Schema.String }
) {}

/** Database failures become `ResetMailStorageUnavailable` (core's `storageErrors`); fenced `LeaseLost` passes through. */
const storage = (operation: string) => storageErrors(operation, () => new ResetMailStorageUnavailable({ operation }))

export const ClaimedRow = Schema.Struct({
  id: Schema.String,
  verification_id: Schema.String,
  tenant_id: Schema.String,
  attempt: Schema.Number,
  fingerprint: Schema.NullOr(Schema.String)
})
export type ClaimedRow = typeof ClaimedRow.Type

/** Every state of a row (migrations/0014_reset_mail_outbox.sql), in lifecycle order. */
export const ResetMailState = Schema.Literal("pending", "sending", "delivered", "rejected", "quarantined", "stopped")

export const EndedState = Schema.Literal("rejected", "quarantined", "stopped")
export type EndedState = typeof EndedState.Type
export type FinalState = "delivered" | EndedState

export const StateCount = Schema.Struct({
  state: Schema.String,
  reason: Schema.NullOr(Schema.String),
  count: Schema.Number
})

export const ListedRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  state: Schema.String,
  reason: Schema.NullOr(Schema.String),
  attempt: Schema.Number,
  provider_status: Schema.NullOr(Schema.Number),
  created_at: Schema.DateFromSelf,
  updated_at: Schema.DateFromSelf
})
export type ListedRow = typeof ListedRow.Type

/** A row as the console reads it, with its keyset position (created_at to the microsecond, UTC). */
export const ItemRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  state: ResetMailState,
  attempt: Schema.Number,
  reason: Schema.NullOr(Schema.String),
  last_error: Schema.NullOr(Schema.String),
  provider_status: Schema.NullOr(Schema.Number),
  next_attempt_at: Schema.DateFromSelf,
  claimed_at: Schema.NullOr(Schema.DateFromSelf),
  created_at: Schema.DateFromSelf,
  updated_at: Schema.DateFromSelf,
  position: Schema.String
})
export type ItemRow = typeof ItemRow.Type

const itemColumns = `id::text AS id, tenant_id, state, attempt, reason, last_error, provider_status, next_attempt_at,
  claimed_at, created_at, updated_at, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS position`

export class ResetMailRepo extends Effect.Service<ResetMailRepo>()("@delivery/reset-mail/ResetMailRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const resource = "reset_mail_outbox"

    const insert = (r: { readonly id: string; readonly verificationId: string; readonly tenant: string; readonly at: Date }) =>
      sql`INSERT INTO reset_mail_outbox (id, verification_id, tenant_id, state, attempt, next_attempt_at, created_at, updated_at)
          VALUES (${r.id}, ${r.verificationId}, ${r.tenant}, 'pending', 0, ${r.at}, ${r.at}, ${r.at})`.withoutTransform

    // Spec 002: reset polling quarantines claims older than the stale-claim age. Whether such a call reached the
    // provider is unknown, so it is never sent again under the same identity.
    const quarantineStale = (r: { readonly claimedBefore: Date; readonly at: Date }) =>
      sql<{ readonly id: string }>`
        UPDATE reset_mail_outbox
        SET state = 'quarantined', reason = 'stale-claim', lease_owner = NULL, updated_at = ${r.at}
        WHERE state = 'sending' AND claimed_at < ${r.claimedBefore}
        RETURNING id::text AS id`.withoutTransform

    const claimOne = SqlSchema.findAll({
      Request: Schema.Struct({ now: Schema.DateFromSelf, owner: Schema.String }),
      Result: ClaimedRow,
      execute: (r) => sql`
        ${claimDue(sql, {
          table: resource,
          due: sql`state = 'pending' AND next_attempt_at <= ${r.now}`,
          orderBy: sql`next_attempt_at, id`,
          limit: 1,
          lease: sql`state = 'sending', claimed_at = ${r.now}, lease_owner = ${r.owner}, last_error = NULL, updated_at = ${r.now}`,
          returning: sql`m.id::text AS id, m.verification_id::text AS verification_id, m.tenant_id, m.attempt, m.fingerprint`
        })}
        SELECT * FROM claimed`.withoutTransform
    })

    const fence = (claim: ClaimedRow) => sql`m.id = ${claim.id} AND m.attempt = ${claim.attempt} AND m.state = 'sending'`
    const target = (claim: ClaimedRow) => ({ resource, id: claim.id, attempt: claim.attempt })

    const setFingerprint = (claim: ClaimedRow, fingerprint: string, at: Date) =>
      fenced(
        sql<{ readonly id: string }>`
          UPDATE reset_mail_outbox m SET fingerprint = ${fingerprint}, updated_at = ${at}
          WHERE ${fence(claim)} AND m.fingerprint IS NULL RETURNING m.id`.withoutTransform,
        target(claim)
      )

    const finish = (claim: ClaimedRow, r: {
      readonly state: FinalState
      readonly reason: string | null
      readonly providerStatus: number | null
      readonly at: Date
    }) =>
      fenced(
        sql<{ readonly id: string }>`
          UPDATE reset_mail_outbox m
          SET state = ${r.state}, reason = ${r.reason}, provider_status = ${r.providerStatus}, lease_owner = NULL,
              updated_at = ${r.at}
          WHERE ${fence(claim)} RETURNING m.id`.withoutTransform,
        target(claim)
      )

    const retry = (claim: ClaimedRow, r: {
      readonly nextAttemptAt: Date
      readonly lastError: string
      readonly providerStatus: number | null
      readonly at: Date
    }) =>
      fenced(
        sql<{ readonly id: string }>`
          UPDATE reset_mail_outbox m
          SET state = 'pending', next_attempt_at = ${r.nextAttemptAt}, last_error = ${r.lastError},
              provider_status = ${r.providerStatus}, lease_owner = NULL, updated_at = ${r.at}
          WHERE ${fence(claim)} RETURNING m.id`.withoutTransform,
        target(claim)
      )

    const summary = SqlSchema.findAll({
      Request: Schema.Void,
      Result: StateCount,
      execute: () => sql`
        SELECT state, reason, count(*)::int AS count FROM reset_mail_outbox
        GROUP BY state, reason ORDER BY state, reason NULLS FIRST`.withoutTransform
    })

    const list = SqlSchema.findAll({
      Request: Schema.Struct({
        state: EndedState,
        reason: Schema.NullOr(Schema.String),
        tenant: Schema.NullOr(Schema.String),
        after: Schema.NullOr(Schema.String),
        limit: Schema.Number
      }),
      Result: ListedRow,
      execute: (r) => sql`
        SELECT id::text AS id, tenant_id, state, reason, attempt, provider_status, created_at, updated_at
        FROM reset_mail_outbox
        WHERE state = ${r.state}
          ${r.reason === null ? sql`` : sql`AND reason = ${r.reason}`}
          ${r.tenant === null ? sql`` : sql`AND tenant_id = ${r.tenant}`}
          ${r.after === null ? sql`` : sql`AND id > ${r.after}::uuid`}
        ORDER BY id LIMIT ${r.limit}`.withoutTransform
    })

    // The console's list: one tenant, optionally one state, oldest first, by keyset on (created_at, id)
    // (reset_mail_outbox_tenant): never the verification id or the fingerprint.
    const listTenant = SqlSchema.findAll({
      Request: Schema.Struct({
        tenant: Schema.String,
        state: Schema.NullOr(ResetMailState),
        after: Schema.NullOr(Schema.Struct({ at: Schema.String, id: Schema.String })),
        limit: Schema.Number
      }),
      Result: ItemRow,
      execute: (r) => sql`
        SELECT ${sql.literal(itemColumns)} FROM reset_mail_outbox
        WHERE tenant_id = ${r.tenant}
          ${r.state === null ? sql`` : sql`AND state = ${r.state}`}
          ${r.after === null ? sql`` : sql`AND (created_at, id) > (${r.after.at}::timestamptz, ${r.after.id}::uuid)`}
        ORDER BY created_at, id LIMIT ${r.limit}`.withoutTransform
    })

    const findItem = SqlSchema.findOne({
      Request: Schema.Struct({ tenant: Schema.String, id: Schema.String }),
      Result: ItemRow,
      execute: (r) => sql`
        SELECT ${sql.literal(itemColumns)} FROM reset_mail_outbox
        WHERE tenant_id = ${r.tenant} AND id = ${r.id}::uuid`.withoutTransform
    })

    // Spec 001: a stack does not sleep while reset mail is owed. Pending rows (due or waiting for a retry) are still
    // to be sent; a sending row is a claim the stale-claim rule has yet to settle. Both have their own partial index
    // (the OR lets PostgreSQL combine the two); delivered, rejected, quarantined and stopped rows have ended.
    const findPending = SqlSchema.findOne({
      Request: Schema.Void,
      Result: Schema.Struct({ found: Schema.Number }),
      execute: () => sql`
        SELECT 1 AS found FROM reset_mail_outbox WHERE state = 'pending' OR state = 'sending' LIMIT 1`.withoutTransform
    })

    // The queue view: counts by state and deliveries per window in one pass (a delivered row's updated_at is its
    // delivery time: nothing writes an ended row again), and the oldest due row from reset_mail_outbox_due. A sending
    // row is not due here: its claim is settled by the stale-claim rule of the worker's own configured age.
    const queueView = SqlSchema.single({
      Request: Schema.Void,
      Result: QueueViewRow,
      execute: () => queueViewQuery(sql, {
        groups: sql`
          SELECT state, ${completionBucket(sql, sql`CASE WHEN state = 'delivered' THEN updated_at END`)} AS bucket,
                 count(*)::int AS count
          FROM reset_mail_outbox GROUP BY 1, 2`,
        dueSince: sql`SELECT min(next_attempt_at) FROM reset_mail_outbox WHERE state = 'pending' AND next_attempt_at <= now()`
      }).withoutTransform
    })

    return {
      insert: (r: Parameters<typeof insert>[0]) => Effect.asVoid(insert(r)).pipe(storage("insert")),
      quarantineStale: (r: Parameters<typeof quarantineStale>[0]) =>
        Effect.map(quarantineStale(r), (rows) => rows.length).pipe(storage("quarantineStale")),
      claimOne: (now: Date, owner: string) =>
        Effect.map(claimOne({ now, owner }), (rows) => rows[0]).pipe(storage("claim")),
      setFingerprint: (claim: ClaimedRow, fingerprint: string, at: Date) =>
        Effect.asVoid(setFingerprint(claim, fingerprint, at)).pipe(storage("setFingerprint")),
      finish: (claim: ClaimedRow, r: Parameters<typeof finish>[1]) => Effect.asVoid(finish(claim, r)).pipe(storage("finish")),
      retry: (claim: ClaimedRow, r: Parameters<typeof retry>[1]) => Effect.asVoid(retry(claim, r)).pipe(storage("retry")),
      summary: summary(undefined).pipe(storage("summary")),
      list: (r: Parameters<typeof list>[0]) => list(r).pipe(storage("list")),
      listTenant: (r: Parameters<typeof listTenant>[0]) => listTenant(r).pipe(storage("listTenant")),
      findItem: (tenant: string, id: string) => findItem({ tenant, id }).pipe(storage("findItem")),
      hasPending: Effect.map(findPending(undefined), Option.isSome).pipe(storage("hasPending")),
      queueView: queueView(undefined).pipe(Effect.catchTag("NoSuchElementException", Effect.die), storage("queueView")),
      /** Wraps a transaction so that BEGIN/COMMIT failures are storage outcomes too. */
      transaction: <A, E, R>(operation: string, effect: Effect.Effect<A, E, R>) =>
        sql.withTransaction(effect).pipe(storage(operation))
    } as const
  })
}) {}
