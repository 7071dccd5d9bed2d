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

/** What a claim hands its worker: the attempt number is the fence for every later transition. */
export const ClaimedLease = Schema.Struct({
  owner: Schema.String,
  attempt: Schema.Int.pipe(Schema.positive()),
  expiresAt: Schema.DateFromSelf
})
export type ClaimedLease = typeof ClaimedLease.Type

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
      lost.length === 0
        ? Effect.void
        : Effect.logWarning("fenced transitions refused: lease lost").pipe(
          Effect.annotateLogs({ resource, lost: lost.length })
        ),
      { moved: [...moved], lost }
    )
  })
