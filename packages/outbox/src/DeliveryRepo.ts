import { attemptFence, claimDue, PREPARED_MARKER } from "@delivery/core"
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { orDieIfMissing, storage } from "./Storage.ts"

// The worker's SQL: peek, claim, and the fenced outcome transitions. Private to the package; times
// are parameters from Effect's Clock (TestClock drives leases and backoff), never the database's now().

/** What a claim hands the worker: `attempt` is the fence of every later transition of this row. */
// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
export const ClaimedRow = Schema.Struct({
  id: Schema.String,
  tenant: Schema.String,
  project: Schema.String,
  attempt: Schema.Number,
  attempt_ceiling: Schema.Number,
  envelope: Schema.String,
  endpoint: Schema.NullOr(Schema.String)
})
export type ClaimedRow = typeof ClaimedRow.Type

/**
 * The ids a fenced transition moved, as one comma-separated text: cheaper to read back than a row per id, and
 * than an array, which the driver parses character by character. Ids are uuids, which hold no comma.
 */
// Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
const Moved = Schema.Struct({ ids: Schema.String })
const movedIds = (row: typeof Moved.Type): ReadonlyArray<string> => (row.ids === "" ? [] : row.ids.split(","))

export class DeliveryRepo extends Effect.Service<DeliveryRepo>()("@delivery/outbox/DeliveryRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const prepared = sql.literal(` ${PREPARED_MARKER}`)
    const unprepared = sql.literal("")

    // The peek and the claim run once per batch with a text that never changes: core's `PREPARED_MARKER` has the
    // backend's pool send them as named prepared statements (packages/backend/src/Database.ts), so PostgreSQL parses them once
    // per connection and stops planning the claim on every batch (about a quarter of its time for 100 rows). A
    // fenced transition's text has one group per attempt number in its batch: it is prepared only with one group
    // (every batch of first attempts), so each connection holds at most three of them, never one per group count.

    // Tenants of the next due rows, so the rate of each can be checked before anything is claimed.
    const peekDue = SqlSchema.findAll({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ now: Schema.DateFromSelf, blocked: Schema.Array(Schema.String), limit: Schema.Number }),
      // Stryker disable next-line ObjectLiteral: an empty Struct decodes the row unchanged (each field already has the type the statement returns)
      Result: Schema.Struct({ tenant: Schema.String, due: Schema.Number }),
      execute: (r) => sql`
        SELECT tenant, count(*)::int AS due FROM (
          SELECT tenant FROM outbox_messages
          WHERE state IN ('pending', 'delivering') AND due_at <= ${r.now} AND tenant <> ALL(${r.blocked}::text[])
          ORDER BY due_at LIMIT ${r.limit}
        ) next GROUP BY tenant${prepared}`.withoutTransform
    })

    // Claim = lease (DESIGN), core's statement: SKIP LOCKED, the lease and the attempt in one statement. An
    // expired lease is just a due row in state 'delivering'.
    const claim = SqlSchema.findAll({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({
        tenant: Schema.String, limit: Schema.Number, now: Schema.DateFromSelf,
        leaseUntil: Schema.DateFromSelf, owner: Schema.String
      }),
      Result: ClaimedRow,
      execute: (r) => sql`${claimDue(sql, {
        table: "outbox_messages",
        due: sql`tenant = ${r.tenant} AND state IN ('pending', 'delivering') AND due_at <= ${r.now}`,
        orderBy: sql`due_at`,
        limit: r.limit,
        lease: sql`state = 'delivering', due_at = ${r.leaseUntil}, lease_owner = ${r.owner}`,
        returning: sql`m.id, m.tenant, m.project, m.attempt, m.attempt_ceiling`
      })}
        SELECT c.id, c.tenant, c.project, c.attempt, c.attempt_ceiling, e.envelope, t.endpoint
        FROM claimed c JOIN outbox_envelopes e ON e.id = c.id
          LEFT JOIN outbox_targets t ON t.tenant = c.tenant AND t.project = c.project${prepared}`.withoutTransform
    })

    /** The fence of a batch (core's `attemptFence`): each row's id with the attempt it was claimed under. */
    const fence = (ids: ReadonlyArray<string>, attempts: ReadonlyArray<number>) =>
      attemptFence(sql, ids.map((id, i) => ({ id, attempt: attempts[i]! })), "uuid")

    /** The marker that ends a fenced transition whose fence is one group (see above), or nothing. */
    const preparedIfOneGroup = (attempts: ReadonlyArray<number>) =>
      attempts.every((attempt) => attempt === attempts[0]) ? prepared : unprepared

    // The fenced transitions, batched: one statement per outcome kind per tick. Each row carries its
    // claimed attempt; a row whose attempt moved on (a newer lease) is simply not returned.
    const markDelivered = SqlSchema.single({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({ ids: Schema.Array(Schema.String), attempts: Schema.Array(Schema.Number), now: Schema.DateFromSelf }),
      Result: Moved,
      execute: (r) => sql`
        WITH moved AS (
          UPDATE outbox_messages m
          SET state = 'delivered', delivered_at = ${r.now}, due_at = NULL, lease_owner = NULL, last_error = NULL
          WHERE m.state = 'delivering' AND ${fence(r.ids, r.attempts)}
          RETURNING m.id
        )
        SELECT coalesce(string_agg(id::text, ','), '') AS ids FROM moved${preparedIfOneGroup(r.attempts)}`.withoutTransform
    })

    const markRetry = SqlSchema.single({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({
        ids: Schema.Array(Schema.String), attempts: Schema.Array(Schema.Number),
        dueAts: Schema.Array(Schema.DateFromSelf), codes: Schema.Array(Schema.String)
      }),
      Result: Moved,
      execute: (r) => sql`
        WITH moved AS (
          UPDATE outbox_messages m
          SET state = 'pending', due_at = c.due_at, lease_owner = NULL, last_error = c.code
          FROM unnest(${r.ids}::uuid[], ${r.dueAts}::timestamptz[], ${r.codes}::text[]) AS c(id, due_at, code)
          WHERE m.id = c.id AND m.state = 'delivering' AND ${fence(r.ids, r.attempts)}
          RETURNING m.id
        )
        SELECT coalesce(string_agg(id::text, ','), '') AS ids FROM moved${preparedIfOneGroup(r.attempts)}`.withoutTransform
    })

    const markDead = SqlSchema.single({
      // Stryker disable next-line ObjectLiteral: an empty Struct encodes the request unchanged (strings, numbers, Dates and their arrays encode to themselves)
      Request: Schema.Struct({
        ids: Schema.Array(Schema.String), attempts: Schema.Array(Schema.Number),
        reasons: Schema.Array(Schema.String), codes: Schema.Array(Schema.String), now: Schema.DateFromSelf
      }),
      Result: Moved,
      execute: (r) => sql`
        WITH moved AS (
          UPDATE outbox_messages m
          SET state = 'dead', dead_at = ${r.now}, dead_reason = c.reason, due_at = NULL, lease_owner = NULL,
            last_error = c.code
          FROM unnest(${r.ids}::uuid[], ${r.reasons}::text[], ${r.codes}::text[]) AS c(id, reason, code)
          WHERE m.id = c.id AND m.state = 'delivering' AND ${fence(r.ids, r.attempts)}
          RETURNING m.id
        )
        SELECT coalesce(string_agg(id::text, ','), '') AS ids FROM moved${preparedIfOneGroup(r.attempts)}`.withoutTransform
    })

    return {
      peekDue: (r: Parameters<typeof peekDue>[0]) => storage("peekDue")(peekDue(r)),
      claim: (r: Parameters<typeof claim>[0]) => storage("claim")(claim(r)),
      markDelivered: (r: Parameters<typeof markDelivered>[0]) =>
        storage("markDelivered")(Effect.map(orDieIfMissing(markDelivered(r)), movedIds)),
      markRetry: (r: Parameters<typeof markRetry>[0]) =>
        storage("markRetry")(Effect.map(orDieIfMissing(markRetry(r)), movedIds)),
      markDead: (r: Parameters<typeof markDead>[0]) =>
        storage("markDead")(Effect.map(orDieIfMissing(markDead(r)), movedIds))
    }
  })
}) {}
