import type { SqlClient, Statement } from "@effect/sql"
import { Clock, Duration, Effect, Schema } from "effect"

/**
 * A fenced transition touched no row: the lease it was based on expired and another claim
 * (a higher attempt) owns the row now. The late owner must record nothing.
 */
export class LeaseLost extends Schema.TaggedError<LeaseLost>()("LeaseLost", {
  resource: Schema.String,
  id: Schema.String,
  attempt: Schema.Number
}) {
  get code() {
    return "lease-lost" as const
  }
}

/** The lease deadline for a claim made now, from Effect's Clock so tests can drive it. */
export const leaseDeadline = (lease: Duration.DurationInput) =>
  Effect.map(Clock.currentTimeMillis, (now) => new Date(now + Duration.toMillis(lease)))

/**
 * Runs a transition written as `UPDATE ... WHERE id = $id AND attempt = $claimed RETURNING ...`
 * and fails with `LeaseLost` when it returned no row.
 */
export const fenced = <A, E, R>(
  transition: Effect.Effect<ReadonlyArray<A>, E, R>,
  target: { readonly resource: string; readonly id: string; readonly attempt: number }
): Effect.Effect<A, E | LeaseLost, R> =>
  Effect.flatMap(transition, (rows) =>
    rows[0] === undefined
      ? Effect.zipRight(
        Effect.logWarning("fenced transition refused: lease lost").pipe(
          Effect.annotateLogs({ resource: target.resource, id: target.id, attempt: target.attempt })
        ),
        Effect.fail(new LeaseLost(target))
      )
      : Effect.succeed(rows[0]))

/**
 * Batched variant: the transition returns the ids it moved; ids that did not move lost their lease.
 * A batched update still carries each row's claimed attempt in its WHERE clause.
 */
export const fencedBatch = <E, R>(
  transition: Effect.Effect<ReadonlyArray<string>, E, R>,
  resource: string,
  claims: ReadonlyArray<{ readonly id: string; readonly attempt: number }>
): Effect.Effect<{ readonly moved: ReadonlyArray<string>; readonly lost: ReadonlyArray<LeaseLost> }, E, R> =>
  Effect.flatMap(transition, (movedIds) => {
    const moved = new Set(movedIds)
    const lost = claims.filter((claim) => !moved.has(claim.id)).map((claim) => new LeaseLost({ resource, ...claim }))
    return Effect.as(
      // Stryker disable next-line ConditionalExpression,EqualityOperator: only decides whether the warning is logged
      lost.length === 0
        ? Effect.void
        : Effect.logWarning("fenced transitions refused: lease lost").pipe(
          Effect.annotateLogs({ resource, lost: lost.length })
        ),
      { moved: [...moved], lost }
    )
  })

/**
 * DESIGN's claim = lease for any durable table with an `id` primary key and an `attempt` counter:
 * due rows are selected `FOR UPDATE SKIP LOCKED` with a `LIMIT`, and the same statement takes the
 * lease and increments the attempt, so two claimers never wait on each other and never share a row.
 * The table is aliased `m` in `lease` and `returning`.
 */
export interface ClaimSpec {
  readonly table: string
  /** Which rows are due, an expired lease included (a due row still in its leased state). */
  readonly due: Statement.Fragment
  readonly orderBy: Statement.Fragment
  readonly limit: number
  /** Every column the claim sets besides the attempt: state, owner, lease deadline. */
  readonly lease: Statement.Fragment
  readonly returning: Statement.Fragment
}

/**
 * The claim as the head of a statement: `WITH due AS (...), claimed AS (UPDATE ... RETURNING ...)`;
 * the caller appends the `SELECT ... FROM claimed` that shapes its rows (joins included).
 * The update finds the rows it locked by the row versions it locked (`ctid`, one array), so on a table of more than a
 * few dozen pages the plan is a TID scan, with no second lookup of each row through the primary key (half the buffer
 * reads of the update's scan, about 2 µs of PostgreSQL per job: docs/controlplane-outbound.md); a smaller table is
 * read whole. Nobody else can change a row this statement locked before its update. Should another transaction have
 * changed a row between the scan and the lock, the update either finds the version that was locked or passes the row
 * over (it stays due): a `ctid` names one row version, so nothing is ever claimed twice, and the due condition was
 * checked again on the locked version.
 */
export const claimDue = (sql: SqlClient.SqlClient, spec: ClaimSpec): Statement.Fragment => sql`
  WITH due AS (
    SELECT ctid AS row_version FROM ${sql(spec.table)}
    WHERE ${spec.due}
    ORDER BY ${spec.orderBy} LIMIT ${spec.limit}
    FOR UPDATE SKIP LOCKED
  ), claimed AS (
    UPDATE ${sql(spec.table)} m
    SET attempt = m.attempt + 1, ${spec.lease}
    WHERE m.ctid = ANY((SELECT array_agg(row_version) FROM due)::tid[])
    RETURNING ${spec.returning}
  )`

const idArrays = { uuid: "uuid[]", text: "text[]" } as const

/**
 * The WHERE of a batched fenced transition on table alias `m`: each row together with the attempt
 * it was claimed under, grouped by attempt so the statement stays on the primary key:
 * `(m.attempt = 1 AND m.id = ANY(...)) OR ...`. An empty batch matches nothing.
 */
export const attemptFence = (
  sql: SqlClient.SqlClient,
  claims: ReadonlyArray<{ readonly id: string; readonly attempt: number }>,
  idType: keyof typeof idArrays
): Statement.Fragment => {
  // sql.or([]) is "1=1": an empty fence must match nothing, never every leased row.
  if (claims.length === 0) return sql`false`
  const byAttempt = new Map<number, Array<string>>()
  for (const { attempt, id } of claims) {
    const group = byAttempt.get(attempt)
    if (group === undefined) byAttempt.set(attempt, [id])
    else group.push(id)
  }
  const cast = sql.literal(idArrays[idType])
  return sql.or(
    [...byAttempt].map(([attempt, group]) => sql`(m.attempt = ${attempt} AND m.id = ANY(${group}::${cast}))`)
  )
}
