import { Context, Deferred, Effect, Exit, FiberId, FiberSet, type Scope, Tracer } from "effect"

export interface BatcherOptions<A, B, E> {
  /** Batches run at the same time (for a statement: each holds one connection while it runs). */
  readonly concurrency: number
  /** The most items one batch carries. */
  readonly maxItems: number
  /** An item's weight (its bytes, say) and the most one batch carries; an item heavier than that runs alone. */
  readonly weight?: { readonly of: (item: A) => number; readonly max: number }
  /**
   * Each batch runs in a root span of this name with a link to the span of every submitter (the request whose item
   * it carries) and the `batch.size` attribute: the OpenTelemetry shape of work done for several traces at once.
   */
  readonly span: string
  /** Runs one batch: one result per item, in the items' order. A failure is every item's failure. */
  readonly run: (items: ReadonlyArray<A>) => Effect.Effect<ReadonlyArray<B>, E>
  /**
   * A batch of several items whose run fails (with an error or a defect) is run again one item at a time, so that an
   * item no other could pass fails only itself. For writes whose failed batch committed nothing.
   */
  readonly retryAlone?: boolean
}

const fewerResults = Exit.die(new Error("batcher: a run answered fewer results than items"))

interface Batch<A, B, E> {
  readonly items: Array<A>
  readonly links: Array<Tracer.SpanLink>
  weight: number
  readonly done: Deferred.Deferred<ReadonlyArray<Exit.Exit<B, E>>>
}

/**
 * Batches items by load, with no timer: an item submitted while fewer than `concurrency` batches run is run at the
 * scheduler's next turn, together with whatever else was submitted in this turn (so one request at a time waits for
 * no other); items submitted while every run is busy gather into the next batch, which runs as soon as one ends. The
 * returned function answers with the item's own result once its batch's run has ended. For a statement under load
 * that is one round trip (and, for a write, one commit: group commit) for many items instead of one each.
 *
 * A submitter that is interrupted does not take its item out of a batch: the run may still commit it. When the scope
 * closes, running batches are interrupted and batches not yet started end interrupted, so no submitter waits forever.
 */
export const makeBatcher = <A, B, E>(
  options: BatcherOptions<A, B, E>
): Effect.Effect<(item: A) => Effect.Effect<B, E>, never, Scope.Scope> =>
  Effect.gen(function* () {
    // Batches run in the scope's fibers with the refs of whoever made the batcher, not those of the submitter that
    // happened to start them (its span, its log annotations). They run in no service: `run` took what it uses when it
    // was built (its type requires none), and the maker's context (for a repository, every service of the backend) would
    // be copied and compared entry by entry at every span and provided service of every batch.
    const running = yield* FiberSet.make<void>()
    const fork = yield* FiberSet.runtime(running)<never>().pipe(Effect.mapInputContext((_: Context.Context<never>) => Context.empty()))
    // Waiting to run, oldest first; items join the last one until it is full.
    const waiting: Array<Batch<A, B, E>> = []
    let busy = 0
    let closed = false
    let starting = false

    const newBatch = (): Batch<A, B, E> => ({ items: [], links: [], weight: 0, done: Deferred.unsafeMake(FiberId.none) })

    /** Each item's own outcome: the batch's result, its failure, or (retryAlone) the item's run alone. */
    const runBatch = (items: ReadonlyArray<A>): Effect.Effect<ReadonlyArray<Exit.Exit<B, E>>> =>
      Effect.flatMap(Effect.exit(options.run(items)), (exit) => {
        if (Exit.isSuccess(exit)) return Effect.succeed(exit.value.map(Exit.succeed))
        if (options.retryAlone !== true || items.length === 1 || Exit.isInterrupted(exit)) {
          return Effect.succeed(items.map(() => Exit.failCause(exit.cause)))
        }
        return Effect.zipRight(
          Effect.logWarning(`${options.span}: a batch of ${items.length} failed; running each item alone`, exit.cause),
          Effect.forEach(items, (item) => Effect.flatMap(runBatch([item]), ([alone]) => Effect.succeed(alone ?? fewerResults)))
        )
      })

    const startBatches = (): void => {
      starting = false
      while (!closed && busy < options.concurrency && waiting.length > 0) {
        const batch = waiting.shift()!
        busy++
        fork(runBatch(batch.items).pipe(
          Effect.withSpan(options.span, {
            root: true,
            links: batch.links,
            attributes: { "batch.size": batch.items.length },
            captureStackTrace: false
          }),
          Effect.onExit((exit) => Deferred.done(batch.done, exit)),
          Effect.ensuring(Effect.sync(() => {
            busy--
            scheduleStart()
          })),
          Effect.asVoid
        ))
      }
    }

    // Batches are started from a fiber of their own, at the scheduler's next turn: items submitted by fibers that run
    // in this turn (the other requests of one burst, the submitters a finished batch just woke) join the batch
    // instead of following it.
    const scheduleStart = (): void => {
      if (starting || closed) return
      starting = true
      fork(Effect.zipRight(Effect.yieldNow(), Effect.sync(startBatches)))
    }

    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        const left = waiting.splice(0)
        return Effect.forEach(left, (batch) => Deferred.interrupt(batch.done), { discard: true })
      }))

    const submit = (item: A, submitter: Tracer.AnySpan | undefined) =>
      Effect.suspend(() => {
        if (closed) return Effect.interrupt
        const weight = options.weight?.of(item) ?? 0
        let batch = waiting[waiting.length - 1]
        const full = batch !== undefined && (
          batch.items.length >= options.maxItems ||
          (options.weight !== undefined && batch.items.length > 0 && batch.weight + weight > options.weight.max)
        )
        if (batch === undefined || full) {
          batch = newBatch()
          waiting.push(batch)
        }
        const index = batch.items.length
        batch.items.push(item)
        if (submitter !== undefined) batch.links.push({ _tag: "SpanLink", span: submitter, attributes: {} })
        batch.weight += weight
        const done = batch.done
        scheduleStart()
        return Effect.flatMap(Deferred.await(done), (results) => results[index] ?? fewerResults)
      })

    return (item: A): Effect.Effect<B, E> =>
      Effect.flatMap(Effect.serviceOption(Tracer.ParentSpan), (span) => submit(item, span._tag === "Some" ? span.value : undefined))
  })
