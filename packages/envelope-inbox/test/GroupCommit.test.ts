import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Deferred, Effect, Either, Fiber, Schedule } from "effect"
import { randomBytes } from "node:crypto"
import { rawPublicKey } from "@delivery/signer"
import { SqlCounter } from "@delivery/testing"
import { counts, producer, type Producer, receive, streamOf, SuiteLive } from "./support/Harness.ts"

/**
 * Holds the row lock of the stream `producerName` of `p`'s tenant (every stream of it when not given) in a
 * transaction of its own until `release`: an ingest statement that reaches it waits inside the database, so the
 * process's one ingest statement (INBOX_INGEST_CONCURRENCY=1) stays busy for as long as the test wants.
 */
const holdStream = (p: Producer, producerName?: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const locked = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const holder = yield* Effect.fork(sql.withTransaction(Effect.gen(function* () {
      yield* sql`
        SELECT 1 FROM inbox_streams WHERE tenant = ${p.tenant} AND (${producerName ?? null}::text IS NULL OR producer = ${producerName ?? null})
        FOR UPDATE`.withoutTransform
      yield* Deferred.succeed(locked, undefined)
      yield* Deferred.await(release)
    })))
    yield* Deferred.await(locked)
    return Effect.zipRight(Deferred.succeed(release, undefined), Fiber.join(holder))
  })

/** Waits until an ingest statement waits for a lock inside the database. */
const ingestWaitsForLock = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const [row] = yield* sql<{ waiting: number }>`
    SELECT count(*)::int AS waiting FROM pg_stat_activity
    WHERE wait_event_type = 'Lock' AND query LIKE '%inbox_ingest_batch(%' AND pid <> pg_backend_pid()`.withoutTransform
  return row!.waiting > 0 ? Effect.void : Effect.fail("not yet" as const)
}).pipe(Effect.flatten, Effect.retry(Schedule.spaced("10 millis").pipe(Schedule.upTo("10 seconds"))), Effect.orDie)

/** The ingest statements run while `effect` runs. */
const ingestStatements = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const counter = yield* SqlCounter
    const before = (yield* counter.statements).length
    const result = yield* effect
    const statements = (yield* counter.statements).slice(before).filter((s) => s.includes("FROM inbox_ingest_batch("))
    return { result, statements }
  })

const outcomeOf = (result: Either.Either<{ readonly outcome: string }, { readonly reason: string }>) =>
  Either.match(result, { onLeft: (refusal) => refusal.reason, onRight: (ack) => ack.outcome })

// Forked envelopes need a moment of CPU (decode, signature, the cached key) to reach the waiting batch.
const arrive = Effect.sleep("300 millis")

layer(SuiteLive(), { excludeTestServices: true })("group commit of the ingest statement (spec 000 steps 5 and 6)", (it) => {
  it.effect("envelopes that arrive while the ingest statement runs are committed together by the next statement, each with its own outcome: accepted, duplicate, conflict", () =>
    Effect.gen(function* () {
      const held = yield* producer()
      const others = yield* Effect.all([producer(), producer(), producer()])
      // Sequence 1 everywhere first: streams exist and every key's bytes are cached.
      for (const p of [held, ...others]) expect((yield* receive(p, p.envelope({ sequence: 1 }))).outcome).toBe("accepted")
      const [a, b, c] = others as [Producer, Producer, Producer]
      const a2 = a.envelope({ sequence: 2 })

      const { result, statements } = yield* ingestStatements(Effect.gen(function* () {
        const release = yield* holdStream(held)
        const first = yield* Effect.fork(receive(held, held.envelope({ sequence: 2 })))
        yield* ingestWaitsForLock
        const arrivals = [
          receive(a, a2),
          receive(b, b.envelope({ sequence: 2 })),
          receive(held, held.envelope({ sequence: 3 })),
          receive(a, a2), // the same envelope again
          receive(c, c.envelope({ sequence: 2 })),
          receive(c, c.envelope({ sequence: 2 })) // another event with c's sequence 2
        ]
        const rest = yield* Effect.fork(Effect.all(arrivals.map(Effect.either), { concurrency: "unbounded" }))
        yield* arrive
        yield* release
        return [Either.right(yield* Fiber.join(first)), ...(yield* Fiber.join(rest))]
      }))

      // Copies that arrive together may reach the batch in either order: one is accepted, the other is its echo.
      const outcomes = result.map(outcomeOf)
      expect([outcomes[0], outcomes[2], outcomes[3]]).toEqual(["accepted", "accepted", "accepted"])
      expect([outcomes[1], outcomes[4]].sort()).toEqual(["accepted", "duplicate"])
      expect([outcomes[5], outcomes[6]].sort()).toEqual(["accepted", "sequence-conflict"])
      // One statement for the first envelope, one for the six that arrived while it ran.
      expect(statements).toHaveLength(2)
      expect(yield* streamOf(held.tenant)).toEqual({ cursor: 3, floor: 0, high: 3 })
      for (const p of others) expect(yield* streamOf(p.tenant)).toEqual({ cursor: 2, floor: 0, high: 2 })
      expect(yield* counts(a.tenant)).toEqual({ streams: 1, identities: 2, payloads: 2, audit: 3 })
      expect(yield* counts(c.tenant)).toEqual({ streams: 1, identities: 2, payloads: 2, audit: 3 })
    }))

  it.effect("a batch that fails commits none of its envelopes; each is then written alone, so only the one that cannot be written is answered 503 and the others are accepted", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const held = yield* producer()
      const [bad, good1, good2] = yield* Effect.all([producer(), producer(), producer()])
      for (const p of [held, bad!, good1!, good2!]) expect((yield* receive(p, p.envelope({ sequence: 1 }))).outcome).toBe("accepted")
      const trigger = `fail_${randomBytes(4).toString("hex")}`
      yield* sql.unsafe(`CREATE FUNCTION ${trigger}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF (SELECT tenant FROM inbox_streams WHERE stream_id = NEW.stream_id) = '${bad!.tenant}'
        THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$`)
      yield* sql.unsafe(`CREATE TRIGGER ${trigger} BEFORE INSERT ON inbox_identities FOR EACH ROW EXECUTE FUNCTION ${trigger}()`)

      const { result, statements } = yield* ingestStatements(Effect.gen(function* () {
        const release = yield* holdStream(held)
        const first = yield* Effect.fork(receive(held, held.envelope({ sequence: 2 })))
        yield* ingestWaitsForLock
        const rest = yield* Effect.fork(Effect.all(
          [good1!, bad!, good2!].map((p) => Effect.either(receive(p, p.envelope({ sequence: 2 })))),
          { concurrency: "unbounded" }
        ))
        yield* arrive
        yield* release
        return [Either.right(yield* Fiber.join(first)), ...(yield* Fiber.join(rest))]
      })).pipe(Effect.ensuring(Effect.orDie(sql.unsafe(`DROP TRIGGER ${trigger} ON inbox_identities; DROP FUNCTION ${trigger}()`))))

      expect(result.map(outcomeOf)).toEqual(["accepted", "accepted", "storage-unavailable", "accepted"])
      // The first envelope's statement, the batch of three that failed, then each of the three alone.
      expect(statements).toHaveLength(5)
      expect(yield* counts(bad!.tenant)).toEqual({ streams: 1, identities: 1, payloads: 1, audit: 1 })
      for (const p of [good1!, good2!]) expect(yield* counts(p.tenant)).toEqual({ streams: 1, identities: 2, payloads: 2, audit: 2 })
      // Nothing was lost: the refused envelope is accepted once the database takes it.
      expect((yield* receive(bad!, bad!.envelope({ sequence: 2 }))).outcome).toBe("accepted")
    }))

  it.effect("the batch statement takes its streams in key order whatever the arrival order, so two batches over the same streams never deadlock", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const p = yield* producer()
      const at = new Date()
      const expiresAt = new Date(at.getTime() + 86_400_000)
      const key = Buffer.from(rawPublicKey(p.privateKey))
      // Two streams of one tenant: "a-stream" sorts before "b-stream".
      const element = (producerName: string, sequence: number) => ({
        producer: producerName,
        sequence,
        eventId: `event-${randomBytes(8).toString("hex")}`
      })
      const batch = (elements: ReadonlyArray<ReturnType<typeof element>>) => {
        const each = <T>(f: (e: ReturnType<typeof element>) => T) => elements.map(f)
        return sql<{ index: number; outcome: string }>`
          SELECT o_index AS index, o_outcome AS outcome FROM inbox_ingest_batch(
            ${each(() => p.tenant)}::text[], ${each(() => "website")}::text[], ${each((e) => e.producer)}::text[],
            ${each((e) => e.sequence)}::bigint[], ${each((e) => e.eventId)}::text[], ${each((e) => `op-${e.eventId}`)}::text[],
            ${each(() => randomBytes(32).toString("hex"))}::text[], ${each(() => "{}")}::text[], ${each(() => p.account)}::text[],
            ${each(() => "d-1")}::text[], ${each(() => "c".repeat(32))}::text[], ${each(() => at)}::timestamptz[],
            ${each(() => expiresAt)}::timestamptz[], ${each(() => "k1")}::text[], ${each(() => key)}::bytea[])`.withoutTransform
      }
      for (const name of ["a-stream", "b-stream"]) expect((yield* batch([element(name, 1)]))[0]!.outcome).toBe("accepted")

      // A third transaction holds a-stream. The first batch (a-stream first) queues for it; the second (b-stream
      // first, as it arrived) would lock b-stream and then queue for a-stream behind the first, which would then
      // wait for b-stream: a deadlock, one of them aborted. In key order the second queues for a-stream first too.
      const release = yield* holdStream(p, "a-stream")
      const first = yield* Effect.fork(batch([element("a-stream", 2), element("b-stream", 2)]))
      yield* ingestWaitsForLock
      const second = yield* Effect.fork(batch([element("b-stream", 3), element("a-stream", 3)]))
      yield* Effect.sleep("200 millis")
      yield* release
      const [one, two] = yield* Effect.all([Fiber.join(first), Fiber.join(second)])
      expect(one.map((row) => [row.index, row.outcome])).toEqual([[1, "accepted"], [2, "accepted"]])
      // Rows come back in the order the streams were taken; o_index says which element each one is.
      expect(two.map((row) => [row.index, row.outcome])).toEqual([[2, "accepted"], [1, "accepted"]])
      expect(yield* streamOf(p.tenant, "a-stream")).toEqual({ cursor: 3, floor: 0, high: 3 })
      expect(yield* streamOf(p.tenant, "b-stream")).toEqual({ cursor: 3, floor: 0, high: 3 })
    }))
})
