import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { ProjectId, Signer, TenantId } from "@delivery/signer"
import { connect, TestDatabase } from "@delivery/testing"
import { Deferred, Effect, Fiber, Layer, Option } from "effect"
import { requestFingerprint } from "../src/Outbox.ts"
import { MessageId, Outbox, OutboxSettings } from "../src/index.ts"
import { fastSettings, KeySourceLive, request, resetOutbox, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

const acme = TenantId.make("acme")
const web = ProjectId.make("web")

/** `n` dead letters of acme/web, dead_at one second apart (oldest first); returns their ids in page order. */
const seedDead = (n: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ id: string }>`
        WITH e AS (
          INSERT INTO outbox_envelopes (id, tenant, project, idempotency_key, request_sha256, event_identity, envelope,
            created_at)
          SELECT gen_random_uuid(), 'acme', 'web', 'k-' || g, encode(sha256(g::text::bytea), 'hex'),
            encode(sha256(g::text::bytea), 'hex'), '{}', timestamptz '2030-01-01'
          FROM generate_series(1, ${n}) g
          RETURNING id, idempotency_key
        )
        INSERT INTO outbox_messages (id, tenant, project, max_attempts, attempt_ceiling, state, attempt, last_error,
          dead_reason, created_at, dead_at)
        SELECT id, 'acme', 'web', 3, 3, 'dead', 3, 'provider-5xx', 'attempts-exhausted', timestamptz '2030-01-01',
          timestamptz '2030-01-01' + substr(idempotency_key, 3)::int * interval '1 second'
        FROM e
        RETURNING id, dead_at`,
      (rows) => rows.map((r) => r.id)
    ))

const cursorOf = (text: string) => Buffer.from(text, "utf8").toString("base64url")

/** An Outbox over the given database clients (the signer's may differ from the outbox's own). */
const outboxOver = (sql: SqlClient.SqlClient, signerSql: SqlClient.SqlClient = sql) =>
  Effect.provide(
    Outbox,
    Outbox.Default.pipe(
      Layer.provide(Signer.Default.pipe(Layer.provide(KeySourceLive), Layer.provide(Layer.succeed(SqlClient.SqlClient, signerSql)))),
      Layer.provide(OutboxSettings.fromMap(fastSettings)),
      Layer.provide(Layer.succeed(SqlClient.SqlClient, sql))
    )
  )

/** A client whose pool is already closed: every statement fails as in a database outage. */
const closedClient = Effect.flatMap(TestDatabase, (db) => Effect.scoped(connect(db.url)))

layer(SuiteLayer, { excludeTestServices: true })("Outbox service rules (spec 000, real PostgreSQL)", (it) => {
  it.effect("the idempotency fingerprint needs an RFC 8785 form: an envelope without one is a defect that names the reason", () =>
    Effect.sync(() => {
      const envelope = { ...request("acme", "web").envelope, sequence: Number.NaN } as ReturnType<typeof request>["envelope"]
      const thrown = (() => {
        try {
          requestFingerprint(envelope, 3)
          return null
        } catch (error) {
          return error
        }
      })()
      expect(thrown).toBeInstanceOf(Error)
      expect((thrown as Error).message).toMatch(/^no RFC 8785 form: \S+/)
      expect(requestFingerprint(request("acme", "web", { key: "same" }).envelope, 3)).toMatch(/^[0-9a-f]{64}$/)
    }))

  it.effect("a retry of an accepted enqueue is answered as a replay (or a conflict) even after its target was removed", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      yield* setupTenant("acme", "web", "https://receiver.example/hooks")
      const outbox = yield* Outbox
      const sent = request("acme", "web", { key: "task-1:proposal:1" })
      const first = yield* outbox.enqueue(sent)
      yield* (yield* SqlClient.SqlClient)`DELETE FROM outbox_targets`
      const again = yield* outbox.enqueue(sent)
      expect(again).toMatchObject({ replayed: true, message: { id: first.message.id } })
      expect(again.envelope).toEqual(first.envelope)
      expect(yield* Effect.flip(outbox.enqueue({ ...sent, maxAttempts: 7 }))).toMatchObject({ reason: "idempotency-key-conflict" })
    }))

  it.effect("concurrent enqueues of one key: exactly one stores the message, every other is answered as a replay of it", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      yield* setupTenant("acme", "web", "https://receiver.example/hooks")
      const outbox = yield* Outbox
      for (let round = 0; round < 6; round++) {
        const sent = request("acme", "web")
        const results = yield* Effect.all(Array.from({ length: 4 }, () => outbox.enqueue(sent)), { concurrency: "unbounded" })
        expect(results.filter((r) => !r.replayed)).toHaveLength(1)
        expect(new Set(results.map((r) => r.message.id)).size).toBe(1)
        expect(new Set(results.map((r) => JSON.stringify(r.envelope))).size).toBe(1)
      }
    }))

  it.effect("a database outage is a typed storage-unavailable outcome naming the operation: enqueue, registerTarget, redrive", () =>
    Effect.gen(function*() {
      const outbox = yield* outboxOver(yield* closedClient)
      expect(yield* Effect.flip(outbox.enqueue(request("acme", "web")))).toMatchObject({ _tag: "OutboxStorageUnavailable", operation: "enqueue" })
      expect(yield* Effect.flip(outbox.registerTarget(acme, web, "https://receiver.example/hooks", "operator:test")))
        .toMatchObject({ _tag: "OutboxStorageUnavailable", operation: "registerTarget" })
      expect(yield* Effect.flip(outbox.redrive(acme, web, MessageId.make("0b7e4b9c-3f2a-4c1e-9a57-1c2d3e4f5a6b"), "operator:test")))
        .toMatchObject({ _tag: "OutboxStorageUnavailable", operation: "redrive" })
    }))

  it.effect("a signing failure for lack of storage inside the enqueue transaction is storage-unavailable naming sign, and stores nothing", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      yield* setupTenant("acme", "web", "https://receiver.example/hooks")
      const sql = yield* SqlClient.SqlClient
      const outbox = yield* outboxOver(sql)
      // The signer's key table is away for the duration: its key read fails inside the transaction.
      const refused = yield* Effect.acquireUseRelease(
        sql`ALTER TABLE signer_keys RENAME TO signer_keys_away`,
        () => Effect.flip(outbox.enqueue(request("acme", "web"))),
        () => Effect.orDie(sql`ALTER TABLE signer_keys_away RENAME TO signer_keys`)
      )
      expect(refused).toMatchObject({ _tag: "OutboxStorageUnavailable", operation: "sign" })
      expect(yield* sql`SELECT count(*)::int AS n FROM outbox_messages`).toEqual([{ n: 0 }])
    }))

  it.effect("Dead letters: a page that holds the last row has no next cursor; one more row gives a cursor to exactly that row", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const ids = yield* seedDead(6)
      const outbox = yield* Outbox
      const all = yield* outbox.deadLetters(acme, web, { limit: 6 })
      expect(all.items.map((m) => m.id)).toEqual(ids)
      expect(all.nextCursor).toBeNull()
      const first = yield* outbox.deadLetters(acme, web, { limit: 5 })
      expect(first.items.map((m) => m.id)).toEqual(ids.slice(0, 5))
      const rest = yield* outbox.deadLetters(acme, web, { limit: 5, cursor: first.nextCursor! })
      expect(rest.items.map((m) => m.id)).toEqual(ids.slice(5))
      expect(rest.nextCursor).toBeNull()
    }))

  it.effect("Dead letters: a cursor is exactly `<dead_at ISO>|<uuid>` in base64url, at most 128 characters; anything around it is cursor-invalid", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const ids = yield* seedDead(3)
      const outbox = yield* Outbox
      const page = (cursor: string) => outbox.deadLetters(acme, web, { limit: 10, cursor })
      const exact = `2030-01-01T00:00:01.000Z|${ids[0]}`
      expect((yield* page(cursorOf(exact))).items.map((m) => m.id)).toEqual(ids.slice(1))
      for (const text of [`x${exact}`, `${exact}x`, `${exact}|`, `2030-01-01T00:00:01Z|${ids[0]}`]) {
        expect(yield* Effect.flip(page(cursorOf(text))), text).toMatchObject({ reason: "cursor-invalid" })
      }
      // Base64url decoding skips characters outside its alphabet: the length bound is what stops padding.
      const padded = cursorOf(exact).padEnd(128, " ")
      expect((yield* page(padded)).items.map((m) => m.id)).toEqual(ids.slice(1))
      expect(yield* Effect.flip(page(`${padded} `))).toMatchObject({ reason: "cursor-invalid" })
    }))

  it.effect("message: one message of exactly its tenant/project, found without waiting for a row lock; another scope or id is message-not-found", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const [id] = yield* seedDead(1)
      const outbox = yield* Outbox
      expect(yield* outbox.message(acme, web, MessageId.make(id!))).toMatchObject({ id, tenant: "acme", project: "web", state: "dead" })
      for (const [tenant, project] of [["beta", "web"], ["acme", "other"]] as const) {
        expect(yield* Effect.flip(outbox.message(TenantId.make(tenant), ProjectId.make(project), MessageId.make(id!))))
          .toEqual(expect.objectContaining({ _tag: "MessageNotFound", reason: "message-not-found", id }))
      }
      // A redrive in progress elsewhere holds the row; reading it does not wait for that transaction.
      const url = (yield* TestDatabase).url
      const read = yield* Effect.scoped(Effect.gen(function*() {
        const other = yield* connect(url)
        const locked = yield* Deferred.make<void>()
        const release = yield* Deferred.make<void>()
        const holder = yield* Effect.fork(other.withTransaction(
          other`SELECT id FROM outbox_messages WHERE id = ${id!} FOR UPDATE`.pipe(
            Effect.zipRight(Deferred.succeed(locked, undefined)),
            Effect.zipRight(Deferred.await(release))
          )
        ))
        yield* Deferred.await(locked)
        const found = yield* outbox.message(acme, web, MessageId.make(id!)).pipe(Effect.timeout("2 seconds"), Effect.option)
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        return found
      }))
      expect(Option.isSome(read)).toBe(true)
    }))

  it.effect("concurrent redrives of one dead letter: one redrives it, the other is refused message-not-dead, and the ceiling moves once", () =>
    Effect.gen(function*() {
      yield* resetOutbox
      const outbox = yield* Outbox
      for (let round = 0; round < 4; round++) {
        const [id] = yield* seedDead(1)
        const results = yield* Effect.all(
          Array.from({ length: 3 }, () => Effect.either(outbox.redrive(acme, web, MessageId.make(id!), "operator:test"))),
          { concurrency: "unbounded" }
        )
        expect(results.filter((r) => r._tag === "Right")).toHaveLength(1)
        expect(results.filter((r) => r._tag === "Left").map((r) => r._tag === "Left" && r.left._tag)).toEqual(["MessageNotDead", "MessageNotDead"])
        expect(yield* outbox.message(acme, web, MessageId.make(id!))).toMatchObject({ state: "pending", attemptCeiling: 6 })
        yield* resetOutbox
      }
    }))
})
