import { PersistedQueue } from "@effect/experimental"
import { Backoff, makeBatcher } from "@delivery/core"
import { SqlClient, type SqlError } from "@effect/sql"
import { Cause, Context, Data, Duration, Effect, Either, Exit, Fiber, Layer, Option, ParseResult, Predicate } from "effect"
import { randomUUID } from "node:crypto"

// A project-owned `PersistedQueueStore` over `effect_queue` (migrations/0018): Effect's `PersistedQueue` interface
// with the semantics spec 002 gives the queue, which `@effect/sql`'s stock SqlPersistedQueue store lacks
// (docs/team-applications.md):
//
// - the attempt is counted when it is claimed (a process killed mid-attempt has used it), and every outcome is
//   recorded fenced by that attempt number: a late owner whose lease was taken over records nothing;
// - the lease has a deadline, refreshed while the attempt runs; a worker that stops refreshing loses it after
//   `leaseDuration` and another claim takes the item;
// - a failed attempt waits a retry delay (core's capped, jittered backoff, or the handler's own `retryAfter`), and
//   after `maxAttempts` the item is exhausted instead of lingering incomplete;
// - per queue name, hooks run in the transaction that records an outcome, so a family's own row (an outbox's
//   outcome) commits with the queue's, fenced by the same attempt;
// - ended items are removed by `removeEnded` (clean-up), never by the store on its own.
//
// Outcomes are group-committed: finished attempts queue up while one transaction is in flight and are recorded
// together by the next, and `take` returns only after its outcome committed.

// Outcomes one statement records at most (its arrays grow with them); more wait for the next statement.
const OUTCOMES_PER_STATEMENT = 1_000

/** What a hook sees of the attempt being recorded. */
export interface AttemptRef {
  readonly id: string
  readonly attempt: number
}

export interface FailureRecord {
  /** A stable code: the handler error's `reason` or `code` when it is one, else `handler-failed` / `handler-died`. */
  readonly reason: string
  /** No attempt is left: the item ended exhausted. */
  readonly exhausted: boolean
}

/** A queue's family rows, written in the transaction that records the queue's outcome (after the fence held). */
export interface QueueHooks {
  readonly completed?: (attempt: AttemptRef, value: unknown) => Effect.Effect<void, SqlError.SqlError, SqlClient.SqlClient>
  readonly failed?: (attempt: AttemptRef, failure: FailureRecord) => Effect.Effect<void, SqlError.SqlError, SqlClient.SqlClient>
}

export interface EffectQueueOptions {
  /** A lease not refreshed for this long is lost (TEAM_APPLICATION_DELIVERY_STALE_MS). */
  readonly leaseDuration: Duration.DurationInput
  /** Default: a third of the lease. */
  readonly refreshInterval?: Duration.DurationInput
  /** How long an idle poller waits before it looks again (an `offer` in this process wakes it at once). */
  readonly pollInterval: Duration.DurationInput
  readonly backoff: Backoff.Backoff
  /** Largest claim (default 100). A claim takes at most as many items as there are waiting takers. */
  readonly claimLimit?: number
  readonly hooks?: Readonly<Record<string, QueueHooks>>
}

/** The store's own operations besides the `PersistedQueueStore` interface. */
export class EffectQueue extends Context.Tag("@delivery/team-applications/EffectQueue")<EffectQueue, {
  /** This store's lease owner id (`acquired_by`). */
  readonly workerId: string
  /** Deletes items of `queueName` that ended (completed or exhausted) longer than `olderThan` ago; the count. */
  readonly removeEnded: (queueName: string, olderThan: Duration.DurationInput) => Effect.Effect<number, SqlError.SqlError>
}>() {}

interface Claimed {
  readonly sequence: number
  readonly id: string
  readonly queueName: string
  readonly element: string
  /** The claimed attempt number (1 = first attempt): the fence of every outcome. */
  readonly attempt: number
}

type Settlement =
  | { readonly _tag: "completed"; readonly value: unknown }
  | { readonly _tag: "failed"; readonly reason: string; readonly delayMs: number; readonly exhausted: boolean }
  | { readonly _tag: "released" }
  /** Claimed but never handed to a taker (the store closed): no handler ran, so the claim gives its attempt back. */
  | { readonly _tag: "returned" }

interface Pending {
  readonly item: Claimed
  readonly settlement: Settlement
}

interface ClaimedRow {
  /** bigint: the driver answers a string. */
  readonly sequence: string | number
  readonly id: string
  readonly queue_name: string
  readonly element: string
  readonly attempts: number
}

const REASON = /^[a-z0-9-]{1,64}$/

/** The stable code kept in `last_failure`; never a message (it could quote a payload or a provider's answer). */
export const failureReason = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.failureOption(cause)
  if (Option.isNone(failure)) return "handler-died"
  const error = failure.value
  for (const key of ["reason", "code"] as const) {
    if (Predicate.hasProperty(error, key) && typeof error[key] === "string" && REASON.test(error[key])) return error[key]
  }
  return "handler-failed"
}

/** A handler error may ask for its own retry delay (a provider's Retry-After) as `retryAfter: Duration`. */
const retryAfterOf = (cause: Cause.Cause<unknown>): Option.Option<Duration.Duration> =>
  Option.filter(
    Option.map(Cause.failureOption(cause), (error) => (error as { readonly retryAfter?: unknown } | null | undefined)?.retryAfter),
    Duration.isDuration
  )

const persistedQueueError = (message: string) => (cause: unknown) =>
  new PersistedQueue.PersistedQueueError({ message, cause })

/** Why a stored element could not be read: the cause of the `PersistedQueueError` its take fails with. */
class ElementInvalid extends Data.TaggedError("ElementInvalid")<{ readonly cause: unknown }> {}

/**
 * A take that failed with a `ParseError`: PersistedQueue decodes the stored element with its queue's schema before the
 * handler runs, and a `ParseError` is what it fails with when the schema refuses the element (JSON of another shape).
 * An element never changes, so no later attempt could decode it either. A handler reports its own failures with
 * errors of its own, never a `ParseError`, or they would be taken for this.
 */
const refusedBySchema = (cause: Cause.Cause<unknown>): boolean =>
  Option.exists(Cause.failureOption(cause), ParseResult.isParseError)

/**
 * The failure of a take whose item's stored element could not be read, not JSON (the store's `PersistedQueueError`)
 * or refused by the queue's schema (PersistedQueue's `ParseError`): that item already ended `exhausted`
 * (`element-invalid`), its failed hook ran, so the family counts it as an exhausted outcome.
 */
export const endedElementInvalid = (error: unknown): boolean =>
  ParseResult.isParseError(error) ||
  (error instanceof PersistedQueue.PersistedQueueError && error.cause instanceof ElementInvalid)

export const make = (options: EffectQueueOptions) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const workerId = randomUUID()
    const lease = Duration.decode(options.leaseDuration)
    const leaseMs = Math.max(1, Math.round(Duration.toMillis(lease)))
    const refreshInterval = options.refreshInterval === undefined
      ? Duration.millis(Math.max(1, Math.floor(leaseMs / 3)))
      : Duration.decode(options.refreshInterval)
    const pollInterval = Duration.decode(options.pollInterval)
    const claimLimit = options.claimLimit ?? 100
    const hooks = options.hooks ?? {}

    /** Claimed and not yet settled: the leases this store refreshes. */
    const held = new Map<number, Claimed>()

    const claim = (queueName: string, limit: number) =>
      Effect.map(
        sql`
          WITH due AS (
            SELECT sequence FROM effect_queue
            WHERE queue_name = ${queueName} AND NOT completed AND NOT exhausted AND available_at <= now()
              AND (lease_expires_at IS NULL OR lease_expires_at <= now())
            ORDER BY available_at, sequence
            LIMIT ${limit}
            FOR UPDATE SKIP LOCKED
          )
          UPDATE effect_queue m
          SET attempts = m.attempts + 1, acquired_at = now(), acquired_by = ${workerId},
              lease_expires_at = now() + ${leaseMs} * interval '1 millisecond', updated_at = now()
          FROM due WHERE m.sequence = due.sequence
          RETURNING m.sequence, m.id, m.queue_name, m.element, m.attempts`.withoutTransform,
        // Mapped by hand: this runs for every claimed row on the hot path.
        (rows) =>
          (rows as unknown as ReadonlyArray<ClaimedRow>).map((row): Claimed => ({
            sequence: Number(row.sequence),
            id: row.id,
            queueName: row.queue_name,
            element: row.element,
            attempt: row.attempts
          }))
      )

    // Every transition after the claim is fenced: the item, its claimed attempt, this owner, not ended.
    const fence = (items: ReadonlyArray<Claimed>) =>
      sql`FROM unnest(${items.map((i) => i.sequence)}::bigint[], ${items.map((i) => i.attempt)}::int[]) AS f(seq, attempt)
          WHERE m.sequence = f.seq AND m.attempts = f.attempt AND m.acquired_by = ${workerId}
            AND NOT m.completed AND NOT m.exhausted`

    const movedSequences = (rows: ReadonlyArray<unknown>) => new Set(rows.map((row) => Number((row as { readonly sequence: unknown }).sequence)))

    const refresh = Effect.suspend(() => {
      const items = [...held.values()]
      // Stryker disable next-line ConditionalExpression: a refresh of no item updates no row; the guard only saves the statement
      if (items.length === 0) return Effect.void
      return sql`
        UPDATE effect_queue m SET lease_expires_at = now() + ${leaseMs} * interval '1 millisecond'
        ${fence(items)}
        RETURNING m.sequence`.withoutTransform.pipe(
        Effect.flatMap((rows) => {
          const moved = movedSequences(rows)
          // Stryker disable next-line ConditionalExpression: differs only when this store claimed the item again while the refresh ran
          const lost = items.filter((item) => !moved.has(item.sequence) && held.get(item.sequence) === item)
          for (const item of lost) held.delete(item.sequence)
          return lost.length === 0
            ? Effect.void
            : Effect.logWarning("effect queue: leases lost (another attempt owns the items now)").pipe(
              Effect.annotateLogs({ lost: lost.map((item) => `${item.id}#${item.attempt}`).join(",") })
            )
        })
      )
    })

    /** The family's hook for this outcome, ready to run; undefined when its queue has none for it. */
    const hookOf = ({ item, settlement: s }: Pending) => {
      const hook = hooks[item.queueName]
      const ref: AttemptRef = { id: item.id, attempt: item.attempt }
      if (s._tag === "completed" && hook?.completed !== undefined) return hook.completed(ref, s.value)
      if (s._tag === "failed" && hook?.failed !== undefined) return hook.failed(ref, { reason: s.reason, exhausted: s.exhausted })
      return undefined
    }

    /**
     * A batch of outcomes in one fenced statement (completed, failed and released together), plus the hooks of the
     * items that moved, in one transaction when there are hooks to run (one statement is atomic on its own).
     */
    const record = (batch: ReadonlyArray<Pending>) => {
      // Stryker disable next-line ConditionalExpression: the other settlements have no reason, delay or exhausted, so the defaults below apply either way
      const failure = (p: Pending) => (p.settlement._tag === "failed" ? p.settlement : undefined)
      // Stryker disable next-line BooleanLiteral: only a failed attempt's flag is read (kind = 'failed' AND exhausted)
      const exhausted = batch.map((p) => failure(p)?.exhausted ?? false)
      const update = sql`
        UPDATE effect_queue m
        SET attempts = CASE WHEN d.kind = 'returned' THEN m.attempts - 1 ELSE m.attempts END,
            completed = d.kind = 'completed',
            exhausted = d.kind = 'failed' AND d.exhausted,
            ended_at = CASE WHEN d.kind = 'completed' OR (d.kind = 'failed' AND d.exhausted) THEN now() END,
            last_failure = CASE WHEN d.kind = 'failed' THEN d.reason ELSE m.last_failure END,
            available_at = CASE WHEN d.kind = 'completed' THEN m.available_at
                                ELSE now() + d.delay_ms * interval '1 millisecond' END,
            acquired_at = NULL, acquired_by = NULL, lease_expires_at = NULL, updated_at = now()
        FROM unnest(${batch.map((p) => p.item.sequence)}::bigint[], ${batch.map((p) => p.item.attempt)}::int[],
                    ${batch.map((p) => p.settlement._tag)}::text[], ${batch.map((p) => failure(p)?.reason ?? null)}::text[],
                    ${batch.map((p) => failure(p)?.delayMs ?? 0)}::bigint[], ${exhausted}::boolean[])
             AS d(seq, attempt, kind, reason, delay_ms, exhausted)
        WHERE m.sequence = d.seq AND m.attempts = d.attempt AND m.acquired_by = ${workerId}
          AND NOT m.completed AND NOT m.exhausted
        RETURNING m.sequence`.withoutTransform
      const moved = Effect.map(update, movedSequences)
      // Stryker disable next-line ConditionalExpression: a transaction around the one statement changes nothing but its cost
      if (!batch.some((p) => hookOf(p) !== undefined)) return moved
      return sql.withTransaction(Effect.tap(moved, (movedSet) =>
        // Stryker disable next-line ObjectLiteral,BooleanLiteral: the hooks' results are not read
        Effect.forEach(batch, (p) => (movedSet.has(p.item.sequence) ? hookOf(p) ?? Effect.void : Effect.void), { discard: true })
      )).pipe(Effect.provideService(SqlClient.SqlClient, sql))
    }

    const warnLost = (lost: ReadonlyArray<Pending>) =>
      lost.length === 0
        ? Effect.void
        : Effect.logWarning("effect queue: outcomes refused, the lease was lost (a later attempt owns the items)").pipe(
          Effect.annotateLogs({ items: lost.map((p) => `${p.item.id}#${p.item.attempt}`).join(",") })
        )

    /** One batch's outcomes, each item's written or refused by its fence (its lease was lost, a later attempt owns it). */
    const recordBatch = (batch: ReadonlyArray<Pending>) =>
      record(batch).pipe(
        Effect.flatMap((moved) => warnLost(batch.filter((p) => !moved.has(p.item.sequence)))),
        Effect.as(batch.map(() => undefined))
      )

    // Group commit (core's Batcher): outcomes that finish while earlier batches are being written gather into the
    // next batch. Two batches may be in flight (on two connections), so one batch's takers run their handlers while
    // the other batch commits.
    const recordOutcome = yield* makeBatcher({
      // Stryker disable next-line StringLiteral: the span's name only
      span: "EffectQueue.recordOutcomes",
      concurrency: 2,
      maxItems: OUTCOMES_PER_STATEMENT,
      run: recordBatch,
      // One bad item (a hook that fails) must not sink the batch: after a failed batch each item is tried alone.
      retryAlone: true
    })
    // Outcomes queued and not yet written: shutdown waits for them (the lease-expired exhaustions have no taker).
    let settling = 0

    /** Queues the outcome for the next batch and waits until it was written or refused by its fence. */
    const settle = (item: Claimed, settlement: Settlement) =>
      Effect.suspend(() => {
        held.delete(item.sequence)
        settling++
        return recordOutcome({ item, settlement }).pipe(
          // Its write failed even alone: the item is left to its lease (another attempt after `leaseDuration`).
          Effect.catchAllCause((cause) =>
            Cause.isInterruptedOnly(cause)
              ? Effect.interrupt
              : Effect.logError("effect queue: an outcome could not be recorded; the item's lease will expire", cause).pipe(
                Effect.annotateLogs({ item: `${item.id}#${item.attempt}` })
              )),
          Effect.ensuring(Effect.sync(() => {
            settling--
          }))
        )
      })

    const settlementOf = (item: Claimed, maxAttempts: number, exit: Exit.Exit<unknown, unknown>): Effect.Effect<Settlement> => {
      if (Exit.isSuccess(exit)) return Effect.succeed({ _tag: "completed", value: exit.value })
      // Stryker disable next-line StringLiteral: the statement writes any kind it does not name exactly as released (attempt kept, due at once)
      if (Cause.isInterruptedOnly(exit.cause)) return Effect.succeed({ _tag: "released" })
      // The queue's schema refused the element: as with one that is not JSON, it ends now rather than after every attempt.
      if (refusedBySchema(exit.cause)) return Effect.succeed({ _tag: "failed", reason: "element-invalid", delayMs: 0, exhausted: true })
      const exhausted = item.attempt >= maxAttempts
      const reason = failureReason(exit.cause)
      return Effect.map(
        Option.match(retryAfterOf(exit.cause), {
          onNone: () => Backoff.delayFor(options.backoff, item.attempt),
          onSome: Effect.succeed
        }),
        (delay) => ({ _tag: "failed", reason, delayMs: exhausted ? 0 : Math.round(Duration.toMillis(delay)), exhausted })
      )
    }

    /** Per queue name and maxAttempts: claimed items waiting for a taker, and the poller that claims them. */
    interface Lane {
      readonly buffer: Array<Claimed>
      waiting: number
      /** Takers whose item is being handled or recorded. */
      active: number
      readonly itemsReady: Effect.Latch
      readonly demand: Effect.Latch
      readonly work: Effect.Latch
    }
    const lanes = new Map<string, Lane>()
    const pollers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []

    const poll = (queueName: string, maxAttempts: number, lane: Lane) =>
      Effect.gen(function* () {
        while (true) {
          // A lone taker gets one item at a time (a worker that sleeps between ticks holds no lease it does not use).
          // Several takers keep a round of items buffered: a claim of up to twice their number starts once fewer
          // than their number are left, so it overlaps their handlers and outcomes instead of stalling them.
          const takers = lane.waiting + lane.active
          // Stryker disable next-line ConditionalExpression: a lone taker's poller wakes only when it waits, and then wants one item either way
          const round = takers > 1 ? takers : 0
          // Stryker disable next-line EqualityOperator: topping up at exactly a round left only buffers one item more
          const want = lane.buffer.length >= Math.max(lane.waiting, round)
            ? 0
            : Math.min(claimLimit, (takers > 1 ? 2 * takers : 1) - lane.buffer.length)
          if (want <= 0) {
            lane.demand.unsafeClose()
            yield* lane.demand.await
            continue
          }
          // Uninterruptible from the statement to the buffer: a claim the database committed always reaches the
          // buffer (and so a taker, or the release at close), even when the poller is being stopped.
          const claimed = yield* claim(queueName, want).pipe(
            Effect.tap((items) =>
              Effect.forEach(
                items,
                (item) => {
                  held.set(item.sequence, item)
                  if (item.attempt <= maxAttempts) return Effect.sync(() => lane.buffer.push(item))
                  // Its last attempt lost the lease (a process killed or stopped mid-attempt): no attempt is left.
                  return Effect.asVoid(Effect.forkDaemon(settle(item, { _tag: "failed", reason: "lease-expired", delayMs: 0, exhausted: true })))
                },
                // Stryker disable next-line ObjectLiteral,BooleanLiteral: the results are not read
                { discard: true }
              )
            ),
            Effect.uninterruptible,
            Effect.catchAllCause((cause) =>
              Effect.as(Effect.logWarning("effect queue: claim failed; trying again after the poll interval", cause), null)
            )
          )
          if (claimed === null || claimed.length === 0) {
            lane.work.unsafeClose()
            yield* Effect.raceFirst(Effect.sleep(pollInterval), lane.work.await)
            continue
          }
          lane.itemsReady.unsafeOpen()
        }
      })

    /** The lane of a queue name and maxAttempts, made with its poller on first use. */
    const laneFor = (queueName: string, maxAttempts: number): Effect.Effect<Lane> =>
      Effect.suspend(() => {
        const key = `${maxAttempts}:${queueName}`
        const existing = lanes.get(key)
        if (existing !== undefined) return Effect.succeed(existing)
        // Made and registered synchronously, so two takes of a new lane find one lane.
        // Stryker disable next-line BooleanLiteral: each latch is closed again before anyone waits on it
        const [itemsReady, demand, work] = [Effect.unsafeMakeLatch(false), Effect.unsafeMakeLatch(false), Effect.unsafeMakeLatch(false)]
        const lane: Lane = { buffer: [], waiting: 0, active: 0, itemsReady, demand, work }
        lanes.set(key, lane)
        // `take` runs uninterruptibly, and a fork inherits that: without `interruptible` the poller could never be stopped.
        return Effect.as(
          // Stryker disable next-line BlockStatement: a poller left running after close only waits: its takers were interrupted, so it wants no item
          Effect.tap(Effect.forkDaemon(Effect.interruptible(poll(queueName, maxAttempts, lane))), (poller) => {
            // Stryker disable next-line CallExpression: as above
            pollers.push(poller)
          }),
          lane
        )
      })

    /** Waits for a claimed item. Only the wait is interruptible: an item leaves the buffer synchronously, so an
     * interrupted taker never drops one (it stays buffered, leased and refreshed, for the next taker). */
    const waitForItem = (lane: Lane, restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>) =>
      Effect.suspend(() => {
        lane.waiting += 1
        lane.demand.unsafeOpen()
        const loop: Effect.Effect<Claimed> = Effect.suspend(() => {
          const next = lane.buffer.shift()
          if (next !== undefined) return Effect.succeed(next)
          lane.itemsReady.unsafeClose()
          return Effect.zipRight(restore(lane.itemsReady.await), loop)
        })
        return Effect.ensuring(loop, Effect.sync(() => {
          lane.waiting -= 1
        }))
      })

    const take: PersistedQueue.PersistedQueueStore["Type"]["take"] = ({ maxAttempts, name }) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(laneFor(name, maxAttempts), (lane) => {
          const ready = lane.buffer.shift()
          // Taking from the buffer may leave fewer than a round of items: the poller decides whether to claim.
          // Stryker disable next-line ConditionalExpression: without an item ready, waitForItem opens the demand itself
          if (ready !== undefined) lane.demand.unsafeOpen()
          return Effect.flatMap(ready === undefined ? waitForItem(lane, restore) : Effect.succeed(ready), (item) => {
            const element = Either.try(() => JSON.parse(item.element) as unknown)
            // A stored element that is not JSON (the row was edited by hand or damaged) never will be: no handler can
            // run for it, so the item ends exhausted at once (its hooks record why) rather than staying leased by a
            // take that failed before its scope could settle it.
            if (Either.isLeft(element)) {
              return Effect.zipRight(
                settle(item, { _tag: "failed", reason: "element-invalid", delayMs: 0, exhausted: true }),
                Effect.fail(persistedQueueError(`effect queue item ${item.id} holds no JSON`)(new ElementInvalid({ cause: element.left })))
              )
            }
            lane.active += 1
            const finalizer = Effect.addFinalizer((exit) =>
              Effect.flatMap(settlementOf(item, maxAttempts, exit as Exit.Exit<unknown, unknown>), (s) => settle(item, s)).pipe(
                Effect.ensuring(Effect.sync(() => {
                  lane.active -= 1
                }))
              )
            )
            // PersistedQueue hands the handler the number of earlier attempts (0 on the first).
            return Effect.as(finalizer, { id: item.id, attempts: item.attempt - 1, element: element.right })
          })
        })
      )

    const offer: PersistedQueue.PersistedQueueStore["Type"]["offer"] = ({ element, id, name }) =>
      Effect.gen(function* () {
        const json = yield* Effect.try({ try: () => JSON.stringify(element), catch: persistedQueueError("element is not JSON") })
        yield* sql`
          INSERT INTO effect_queue (id, queue_name, element, available_at, created_at, updated_at)
          VALUES (${id}, ${name}, ${json}, now(), now(), now())
          ON CONFLICT (id) DO NOTHING`.withoutTransform.pipe(
          Effect.mapError(persistedQueueError("effect queue offer failed"))
        )
        for (const lane of lanes.values()) lane.work.unsafeOpen()
      })

    const removeEnded = (queueName: string, olderThan: Duration.DurationInput) =>
      Effect.gen(function* () {
        const ageMs = Math.round(Duration.toMillis(Duration.decode(olderThan)))
        let removed = 0
        while (true) {
          const rows = yield* sql`
            DELETE FROM effect_queue WHERE sequence IN (
              SELECT sequence FROM effect_queue
              WHERE queue_name = ${queueName} AND (completed OR exhausted)
                AND ended_at < now() - ${ageMs} * interval '1 millisecond'
              LIMIT 1000)
            RETURNING sequence`.withoutTransform
          removed += rows.length
          if (rows.length < 1000) return removed
        }
      })

    const refresher = yield* refresh.pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("effect queue: lease refresh failed", cause)),
      Effect.zipRight(Effect.sleep(refreshInterval)),
      Effect.forever,
      Effect.interruptible,
      Effect.forkDaemon
    )

    // At scope close (after the takers were interrupted and their outcomes recorded): claimed items no taker got
    // are returned for the next process with their attempt given back (no handler ran), then the background fibers
    // stop. The pollers stop first, so nothing this store returns is claimed by it again.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        yield* Fiber.interruptAll(pollers)
        const unclaimed = [...lanes.values()].flatMap((lane) => lane.buffer.splice(0))
        // Stryker disable next-line ObjectLiteral,StringLiteral,BooleanLiteral: one at a time returns the same items, only later
        yield* Effect.forEach(unclaimed, (item) => settle(item, { _tag: "returned" }), { concurrency: "unbounded", discard: true })
        // Outcomes still queued (the lease-expired exhaustions) are written before the store closes.
        const drained = Effect.gen(function* () {
          while (settling > 0) yield* Effect.sleep(Duration.millis(5))
        })
        yield* Effect.timeoutOption(drained, Duration.seconds(10))
        yield* Fiber.interrupt(refresher)
      })
    )

    return {
      store: PersistedQueue.PersistedQueueStore.of({ offer, take }),
      queue: EffectQueue.of({ workerId, removeEnded })
    }
  })

/** `PersistedQueueStore` (for `PersistedQueue.layer`) and `EffectQueue`, over the same store. */
export const layer = (options: EffectQueueOptions) =>
  Layer.scopedContext(
    Effect.map(make(options), ({ queue, store }) =>
      Context.make(PersistedQueue.PersistedQueueStore, store).pipe(Context.add(EffectQueue, queue)))
  )
