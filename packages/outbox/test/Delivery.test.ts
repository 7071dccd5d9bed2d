import { expect, layer } from "@effect/vitest"
import { RateLimiter } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { ProviderHttp } from "@delivery/core"
import { KeyId, Signer, TenantId, verifyEnvelopeSignature } from "@delivery/signer"
import { connect, LoopbackProvider, LoopbackReply, type RecordedRequest, recordingTracer, TestDatabase } from "@delivery/testing"
import { Deferred, Duration, Effect, Exit, Fiber, Layer, Option, TestClock, TestContext, TestServices } from "effect"
import { sign } from "node:crypto"
import { readFileSync } from "node:fs"
import { privateKeyFromSeed, rawPublicKey } from "@delivery/signer"
import { type ClaimedRow, DeliveryRepo } from "../src/DeliveryRepo.ts"
import { Outbox, OutboxSettings, type SendOutcome, senderOf, type Settings, WebhookSignature } from "../src/index.ts"
import { deliveryWith, publicKeyOf, request, resetOutbox, rowOf, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

/**
 * The receiver's check, written from the Standard Webhooks 1.0.0 text alone (not from our module):
 * "The content to be signed is `{msg_id}.{timestamp}.{payload}`"; asymmetric signatures are
 * ed25519, serialized as `v1a,` + base64; `webhook-signature` is a space-delimited list; verify the
 * timestamp against a tolerance. WebCrypto with a raw key, so no code is shared with the sender.
 */
const verifyV1a = async (headers: Readonly<Record<string, string>>, body: string, rawKey: Uint8Array, nowSeconds: number) => {
  const id = headers["webhook-id"]!
  const timestamp = headers["webhook-timestamp"]!
  if (!/^[0-9]+$/.test(timestamp) || Math.abs(nowSeconds - Number(timestamp)) > 300) return false
  const key = await crypto.subtle.importKey("raw", rawKey.slice(), { name: "Ed25519" }, false, ["verify"])
  const content = new TextEncoder().encode(`${id}.${timestamp}.${body}`)
  for (const entry of headers["webhook-signature"]!.split(" ")) {
    const comma = entry.indexOf(",")
    if (entry.slice(0, comma) !== "v1a") continue
    if (await crypto.subtle.verify({ name: "Ed25519" }, key, Buffer.from(entry.slice(comma + 1), "base64"), content)) return true
  }
  return false
}

const delivered = new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 })
const noop = senderOf(() => Effect.succeed(delivered))
const withTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, TestContext.TestContext)

const setup = (tenant: string, project = "web") =>
  Effect.gen(function*() {
    yield* resetOutbox
    const receiver = yield* LoopbackProvider
    yield* receiver.reset
    yield* setupTenant(tenant, project, receiver.urlFor(`/hooks/${tenant}`))
    return { receiver, outbox: yield* Outbox }
  })

layer(SuiteLayer, { excludeTestServices: true })("Outbox delivery (spec 000, real PostgreSQL and a loopback receiver)", (it) => {
  it.effect("Deliver: POSTs the signed envelope to the registered target with a stable Idempotency-Key and the Standard Webhooks headers; the v1a signature verifies with an independent check written from the spec", () =>
    Effect.gen(function*() {
      const { outbox, receiver } = yield* setup("acme")
      const { envelope, message } = yield* outbox.enqueue(request("acme", "web"))
      const tick = yield* (yield* deliveryWith("http")).tick("w1")
      expect(tick).toMatchObject({ claimed: 1, delivered: 1, lost: 0 })
      const [sent] = yield* receiver.requests
      expect(sent).toMatchObject({ method: "POST", path: "/hooks/acme", idempotencyKey: message.id })
      expect(sent!.headers["content-type"]).toMatch(/^application\/json/)
      expect(sent!.headers["webhook-id"]).toBe(message.id)
      // The body is the signed envelope, byte for byte, and its own signature verifies too.
      expect(JSON.parse(sent!.bodyText)).toEqual(envelope)
      expect(verifyEnvelopeSignature(JSON.parse(sent!.bodyText), publicKeyOf(1))).toBe(true)
      const now = Math.floor(Date.now() / 1000)
      expect(yield* Effect.promise(() => verifyV1a(sent!.headers, sent!.bodyText, publicKeyOf(1), now))).toBe(true)
      expect(yield* Effect.promise(() => verifyV1a(sent!.headers, sent!.bodyText + " ", publicKeyOf(1), now))).toBe(false)
      expect(yield* Effect.promise(() => verifyV1a(sent!.headers, sent!.bodyText, publicKeyOf(2), now))).toBe(false)
      expect(yield* rowOf(message.id)).toMatchObject({ state: "delivered", attempt: 1, last_error: null, lease_owner: null })
    }))

  it.effect("'the key active at delivery signs; a revoked key never signs': after a rotation and a revocation the next webhook is signed by the new key; after a rotation to a key without private material nothing is sent and the rows wait or dead-letter with webhook-key-unavailable", () =>
    Effect.gen(function*() {
      const { outbox, receiver } = yield* setup("rotated")
      const signer = yield* Signer
      const tenant = TenantId.make("rotated")
      const delivery = yield* deliveryWith("http")
      const verifies = (sent: RecordedRequest, key: number) =>
        Effect.promise(() => verifyV1a(sent.headers, sent.bodyText, publicKeyOf(key), Math.floor(Date.now() / 1000)))

      yield* outbox.enqueue(request("rotated", "web"))
      expect(yield* delivery.tick("w1")).toMatchObject({ delivered: 1 })
      expect(yield* verifies((yield* receiver.requests)[0]!, 1)).toBe(true)

      yield* signer.rotate(tenant, KeyId.make("k2"), publicKeyOf(2))
      yield* signer.revoke(tenant, KeyId.make("k1"))
      yield* outbox.enqueue(request("rotated", "web"))
      expect(yield* delivery.tick("w1")).toMatchObject({ delivered: 1 })
      const rotated = (yield* receiver.requests)[1]!
      expect(yield* verifies(rotated, 2)).toBe(true)
      expect(yield* verifies(rotated, 1)).toBe(false)

      // Enqueued (signed by k2) before the next rotation; the key source holds no private key for k3.
      const waiting = (yield* outbox.enqueue(request("rotated", "web"))).message
      const last = (yield* outbox.enqueue(request("rotated", "web", { maxAttempts: 1 }))).message
      yield* signer.rotate(tenant, KeyId.make("k3"), publicKeyOf(3))
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 2, delivered: 0, retried: 1, dead: 1 })
      expect((yield* receiver.requests).length).toBe(2)
      expect(yield* rowOf(waiting.id)).toMatchObject({ state: "pending", attempt: 1, last_error: "webhook-key-unavailable" })
      expect(yield* rowOf(last.id)).toMatchObject({
        state: "dead", attempt: 1, dead_reason: "attempts-exhausted", last_error: "webhook-key-unavailable"
      })
    }))

  it.effect("docs/controlplane-outbound.md's worked example: the documented v1a signature is what the tenant key signs, and both verifiers accept it", () =>
    Effect.gen(function*() {
      const doc = readFileSync(new URL("../../../docs/controlplane-outbound.md", import.meta.url), "utf8")
      const block = (name: string) => new RegExp("```text " + name + "\\n([^\\n]*)\\n```").exec(doc)![1]!
      const [id, timestamp, body, header, whpk] = ["webhook-id", "webhook-timestamp", "webhook-body", "webhook-signature", "webhook-public-key"].map(block)
      const key = privateKeyFromSeed(new Uint8Array(Array.from({ length: 32 }, (_, i) => i)))
      expect(whpk).toBe(WebhookSignature.formatPublicKey(rawPublicKey(key)))
      expect(header).toBe(WebhookSignature.formatSignature(new Uint8Array(sign(null, WebhookSignature.signedContent(id!, Number(timestamp), body!), key))))
      const raw = Buffer.from(whpk!.slice(5), "base64")
      const headers = { "webhook-id": id!, "webhook-timestamp": timestamp!, "webhook-signature": header! }
      expect(yield* Effect.promise(() => verifyV1a(headers, body!, raw, Number(timestamp)))).toBe(true)
      expect(WebhookSignature.verifyWebhook({
        id: id!, timestamp: timestamp!, body: body!, signatureHeader: header!, publicKeys: [raw], nowSeconds: Number(timestamp), toleranceSeconds: 300
      })).toBe(true)
    }))

  it.effect("Claim: a tick after a short batch looks at every due row: two rows enqueued right after a one-row batch are both claimed by the next tick (a repeated claim without a peek only follows a full batch)", () =>
    Effect.gen(function*() {
      const { outbox } = yield* setup("acme")
      const delivery = yield* deliveryWith(noop)
      yield* outbox.enqueue(request("acme", "web"))
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 1, delivered: 1 })
      yield* outbox.enqueue(request("acme", "web"))
      yield* outbox.enqueue(request("acme", "web"))
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 2, delivered: 2 })
    }))

  it.effect("Claim: at most 100 due rows per claim, FOR UPDATE SKIP LOCKED, the attempt incremented in the claim itself; OUTBOX_BATCH_SIZE above 100 is refused", () =>
    Effect.gen(function*() {
      const { outbox } = yield* setup("acme")
      for (let i = 0; i < 130; i++) yield* outbox.enqueue(request("acme", "web"))
      const sql = yield* SqlClient.SqlClient
      const tick = yield* (yield* deliveryWith(noop)).tick("w1")
      expect(tick.claimed).toBe(100)
      const states = yield* sql<{ state: string; attempt: number; n: number }>`
        SELECT state, attempt, count(*)::int AS n FROM outbox_messages GROUP BY state, attempt ORDER BY state`
      expect(states).toEqual([{ state: "delivered", attempt: 1, n: 100 }, { state: "pending", attempt: 0, n: 30 }])
      const refused = yield* Effect.flip(OutboxSettings.pipe(Effect.provide(OutboxSettings.fromMap({ OUTBOX_BATCH_SIZE: "101" }))))
      expect(String(refused)).toContain("OUTBOX_BATCH_SIZE")

      // SKIP LOCKED: a claim whose transaction is still open holds its rows; a claimer on another
      // connection gets the other rows without waiting for it.
      const other = yield* connect((yield* TestDatabase).url)
      const repoOf = (client: SqlClient.SqlClient) =>
        DeliveryRepo.pipe(Effect.provide(DeliveryRepo.Default), Effect.provideService(SqlClient.SqlClient, client))
      const [first, second] = [yield* repoOf(sql), yield* repoOf(other)]
      const claimOf = (repo: DeliveryRepo, owner: string, limit: number) =>
        repo.claim({ tenant: "acme", limit, now: new Date(), leaseUntil: new Date(Date.now() + 60_000), owner })
      const held = yield* Deferred.make<ReadonlyArray<ClaimedRow>>()
      const release = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(sql.withTransaction(
        claimOf(first, "holder", 20).pipe(Effect.tap((rows) => Deferred.succeed(held, rows)), Effect.zipLeft(Deferred.await(release)))
      ))
      const mine = yield* Deferred.await(held)
      const theirs = yield* claimOf(second, "other", 100).pipe(
        Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "the second claim waited on the open claim's locks" })
      )
      expect(Option.isNone(yield* Fiber.poll(holder))).toBe(true)
      expect([mine.length, theirs.length]).toEqual([20, 10])
      expect(new Set([...mine, ...theirs].map((row) => row.id)).size).toBe(30)
      expect([...mine, ...theirs].every((row) => row.attempt === 1)).toBe(true)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
    }).pipe(Effect.scoped))

  it.effect("4xx is rejected (permanent): dead letter at once with the stable code, never retried; 429 is retried instead", () =>
    Effect.gen(function*() {
      const { outbox, receiver } = yield* setup("acme")
      const rejected = (yield* outbox.enqueue(request("acme", "web"))).message
      const throttled = (yield* outbox.enqueue(request("acme", "web"))).message
      yield* receiver.script(
        { key: rejected.id, reply: LoopbackReply.status(404, { body: "secret receiver detail" }) },
        { key: throttled.id, reply: LoopbackReply.status(429) }
      )
      yield* (yield* deliveryWith("http")).tick("w1")
      expect(yield* rowOf(rejected.id)).toMatchObject({ state: "dead", dead_reason: "rejected", last_error: "provider-4xx", attempt: 1 })
      expect(yield* rowOf(throttled.id)).toMatchObject({ state: "pending", last_error: "provider-429", attempt: 1 })
      const sql = yield* SqlClient.SqlClient
      const leaked = yield* sql`SELECT 1 FROM outbox_messages WHERE row_to_json(outbox_messages)::text LIKE '%secret receiver%'`
      expect(leaked).toEqual([])
    }))

  it.effect("5xx and a dropped connection are temporary, a timeout is ambiguous (spec 002 'Provider limits'): each is retried with backoff until the caller-set maximum attempts, then dead-lettered", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const { outbox, receiver } = yield* setup("acme")
      const { message } = yield* outbox.enqueue(request("acme", "web", { maxAttempts: 3 }))
      yield* receiver.script(
        { key: message.id, times: 1, reply: LoopbackReply.status(503) },
        { key: message.id, times: 1, reply: LoopbackReply.drop() },
        { key: message.id, times: 1, reply: LoopbackReply.hang() }
      )
      const delivery = yield* deliveryWith("http", { OUTBOX_BACKOFF_BASE: "1 second", OUTBOX_BACKOFF_CAP: "1 second" })
      const codes: Array<unknown> = []
      for (let i = 0; i < 3; i++) {
        const tick = yield* Effect.fork(delivery.tick("w1"))
        yield* receiver.awaitRequests(i + 1)
        // The hung request ends at the request timeout (fastSettings: 400 ms).
        if (i === 2) yield* TestClock.adjust("400 millis")
        yield* Fiber.join(tick)
        codes.push((yield* rowOf(message.id)).last_error)
        yield* TestClock.adjust("1 second")
      }
      expect(codes).toEqual(["provider-5xx", "provider-connection-dropped", "provider-timeout"])
      expect(yield* rowOf(message.id)).toMatchObject({ state: "dead", dead_reason: "attempts-exhausted", attempt: 3 })
      expect((yield* receiver.requests).map((r) => r.idempotencyKey)).toEqual([message.id, message.id, message.id])
      // Dead is final for the worker: nothing is claimed again, however long it waits.
      yield* TestClock.adjust("1 day")
      expect((yield* delivery.tick("w1")).claimed).toBe(0)
    })))

  it.effect("backoff (TestClock): capped exponential from core, not claimable before it is due; a receiver's Retry-After is honoured within bounds", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const { outbox, receiver } = yield* setup("acme")
      const { message } = yield* outbox.enqueue(request("acme", "web", { maxAttempts: 10 }))
      yield* receiver.script({ key: message.id, times: 4, reply: LoopbackReply.status(500) })
      const delivery = yield* deliveryWith("http", {
        OUTBOX_BACKOFF_BASE: "1 second", OUTBOX_BACKOFF_CAP: "4 seconds", OUTBOX_BACKOFF_JITTER: "0", OUTBOX_RETRY_AFTER_MAX: "30 seconds"
      })
      const delays: Array<number> = []
      for (let i = 0; i < 4; i++) {
        const claimedAt = yield* TestClock.currentTimeMillis
        expect((yield* delivery.tick("w1")).claimed).toBe(1)
        const due = (yield* rowOf(message.id)).due_at!.getTime()
        delays.push(due - claimedAt)
        yield* TestClock.setTime(due - 1)
        expect((yield* delivery.tick("w1")).claimed).toBe(0)
        yield* TestClock.setTime(due)
      }
      expect(delays).toEqual([1000, 2000, 4000, 4000])
      // Retry-After wins over backoff, clamped to [1 second, OUTBOX_RETRY_AFTER_MAX].
      yield* receiver.script(
        { key: message.id, times: 1, reply: LoopbackReply.status(503, { retryAfter: "7" }) },
        { key: message.id, times: 1, reply: LoopbackReply.status(429, { retryAfter: "86400" }) }
      )
      for (const expected of [7_000, 30_000]) {
        const claimedAt = yield* TestClock.currentTimeMillis
        yield* delivery.tick("w1")
        const row = yield* rowOf(message.id)
        expect(row.due_at!.getTime() - claimedAt).toBe(expected)
        yield* TestClock.setTime(row.due_at!.getTime())
      }
      yield* delivery.tick("w1")
      expect(yield* rowOf(message.id)).toMatchObject({ state: "delivered", attempt: 7 })
    })))

  it.effect("rate: exhaustion leaves rows pending, not delivering, and does not starve another tenant (key tenant-scheduler-delivery:<tenant>)", () =>
    Effect.gen(function*() {
      const { outbox, receiver } = yield* setup("rate-a")
      yield* setupTenant("rate-b", "web", receiver.urlFor("/hooks/rate-b"))
      for (let i = 0; i < 8; i++) yield* outbox.enqueue(request("rate-a", "web"))
      const delivery = yield* deliveryWith(noop, { SYNC_INGEST_LIMIT: "5", SYNC_INGEST_WINDOW: "1 hour" })
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 5, delivered: 5 })
      for (let i = 0; i < 2; i++) yield* outbox.enqueue(request("rate-b", "web"))
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 2, delivered: 2, rateLimited: 1 })
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 0 })
      const sql = yield* SqlClient.SqlClient
      expect(yield* sql`SELECT tenant, state, attempt, count(*)::int AS n FROM outbox_messages GROUP BY 1, 2, 3 ORDER BY 1, 2`)
        .toEqual([
          { tenant: "rate-a", state: "delivered", attempt: 1, n: 5 },
          { tenant: "rate-a", state: "pending", attempt: 0, n: 3 },
          { tenant: "rate-b", state: "delivered", attempt: 1, n: 2 }
        ])
    }))

  it.effect("rate: a tenant with fewer tokens left than due rows gets as many rows as it has tokens; the rest stay pending until its window resets", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const { outbox } = yield* setup("rate-a")
      const delivery = yield* deliveryWith(noop, { SYNC_INGEST_LIMIT: "5", SYNC_INGEST_WINDOW: "1 hour" })
      for (let i = 0; i < 3; i++) yield* outbox.enqueue(request("rate-a", "web"))
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 3, delivered: 3 })
      for (let i = 0; i < 4; i++) yield* outbox.enqueue(request("rate-a", "web"))
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 2, delivered: 2 })
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 0, rateLimited: 1 })
      const sql = yield* SqlClient.SqlClient
      const states = sql`SELECT state, attempt, count(*)::int AS n FROM outbox_messages GROUP BY 1, 2 ORDER BY 1`
      expect(yield* states).toEqual([{ state: "delivered", attempt: 1, n: 5 }, { state: "pending", attempt: 0, n: 2 }])
      yield* TestClock.adjust("1 hour")
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 2, delivered: 2 })
    })))

  it.effect("rate: a rate store that fails skips the tenant for one second (fail closed): nothing is claimed, its rows stay pending, and after that second it is asked again", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const { outbox } = yield* setup("rate-a")
      for (let i = 0; i < 2; i++) yield* outbox.enqueue(request("rate-a", "web"))
      const memory = yield* RateLimiter.RateLimiterStore.pipe(Effect.provide(RateLimiter.layerStoreMemory))
      let down = true
      const flaky = Layer.succeed(RateLimiter.RateLimiterStore, {
        ...memory,
        fixedWindow: (options) =>
          down ? Effect.fail(new RateLimiter.RateLimitStoreError({ message: "store unreachable" })) : memory.fixedWindow(options)
      })
      const delivery = yield* deliveryWith(noop, {}, { store: flaky })
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 0, rateLimited: 1 })
      const sql = yield* SqlClient.SqlClient
      const states = sql`SELECT state, attempt, count(*)::int AS n FROM outbox_messages GROUP BY 1, 2`
      expect(yield* states).toEqual([{ state: "pending", attempt: 0, n: 2 }])
      down = false
      yield* TestClock.adjust(999)
      expect(yield* delivery.tick("w1")).toMatchObject({ claimed: 0, rateLimited: 1 })
      yield* TestClock.adjust(1)
      expect(yield* delivery.tick("w1")).toEqual({ claimed: 2, delivered: 2, retried: 0, dead: 0, lost: 0, rateLimited: 0 })
    })))

  it.effect("a row claimed above its attempt ceiling (its owner's lease expired on the last allowed attempt) is dead-lettered at once, attempts-exhausted with lease-expired, without a new request", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const { outbox } = yield* setup("stale")
      const { message } = yield* outbox.enqueue(request("stale", "web", { maxAttempts: 1 }))
      const suspended = { tweak: (s: Settings) => ({ ...s, lease: Duration.millis(300), cycleTimeout: Duration.hours(1) }) }
      const entered = yield* Deferred.make<void>()
      const hung = senderOf(() => Deferred.succeed(entered, undefined).pipe(Effect.zipRight(Effect.never)))
      const first = yield* Effect.fork((yield* deliveryWith(hung, {}, suspended)).tick("gone-owner"))
      yield* Deferred.await(entered)
      let sends = 0
      const next = yield* deliveryWith(senderOf(() => Effect.sync(() => sends++).pipe(Effect.as(delivered))), {}, suspended)
      yield* TestClock.adjust(300)
      expect(yield* next.tick("next-owner")).toEqual({ claimed: 1, delivered: 0, retried: 0, dead: 1, lost: 0, rateLimited: 0 })
      expect(sends).toBe(0)
      expect(yield* rowOf(message.id)).toMatchObject({
        state: "dead", attempt: 2, attempt_ceiling: 1, dead_reason: "attempts-exhausted", last_error: "lease-expired", lease_owner: null
      })
      yield* Fiber.interrupt(first)
    })))

  // A stale owner's late outcome lands while the row is leased again under a newer attempt: only the
  // attempt fence (not the state) can refuse it, for every kind of outcome.
  for (const [kind, late] of [
    ["delivered", delivered],
    ["retry (5xx)", new ProviderHttp.Temporary({ code: "provider-5xx", status: 503 })],
    ["dead letter (4xx)", new ProviderHttp.Rejected({ code: "provider-4xx", status: 404 })]
  ] as const) {
    it.effect(`an expired lease is claimable again with a higher attempt (not before); a stale owner's late ${kind} outcome is refused as LeaseLost and changes nothing`, () =>
      withTestClock(Effect.gen(function*() {
        yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
        const { outbox } = yield* setup("stale")
        const { message } = yield* outbox.enqueue(request("stale", "web"))
        const stalled = (answer: SendOutcome) =>
          Effect.map(Effect.all([Deferred.make<void>(), Deferred.make<void>()]), ([entered, resume]) => ({
            entered,
            resume,
            layer: senderOf(() => Deferred.succeed(entered, undefined).pipe(Effect.zipRight(Deferred.await(resume)), Effect.as(answer)))
          }))
        // A process suspended past its lease: its cycle timer cannot fire, so only the lease bounds it.
        const suspended = { tweak: (s: Settings) => ({ ...s, lease: Duration.millis(300), cycleTimeout: Duration.hours(1) }) }
        const staleSender = yield* stalled(late)
        const first = yield* Effect.fork((yield* deliveryWith(staleSender.layer, {}, suspended)).tick("stale-owner"))
        yield* Deferred.await(staleSender.entered)
        expect(yield* rowOf(message.id)).toMatchObject({ state: "delivering", attempt: 1, lease_owner: "stale-owner" })
        const freshSender = yield* stalled(delivered)
        const fresh = yield* deliveryWith(freshSender.layer, {}, suspended)
        yield* TestClock.adjust(299)
        expect((yield* fresh.tick("fresh-owner")).claimed).toBe(0)
        yield* TestClock.adjust(1)
        const second = yield* Effect.fork(fresh.tick("fresh-owner"))
        yield* Deferred.await(freshSender.entered)
        const taken = yield* rowOf(message.id)
        expect(taken).toMatchObject({ state: "delivering", attempt: 2, lease_owner: "fresh-owner" })
        yield* Deferred.succeed(staleSender.resume, undefined)
        expect(yield* Fiber.join(first)).toMatchObject({ claimed: 1, delivered: 0, retried: 0, dead: 0, lost: 1 })
        expect(yield* rowOf(message.id)).toEqual(taken)
        yield* Deferred.succeed(freshSender.resume, undefined)
        expect(yield* Fiber.join(second)).toMatchObject({ claimed: 1, delivered: 1, lost: 0 })
        expect(yield* rowOf(message.id)).toMatchObject({ state: "delivered", attempt: 2 })
      })))
  }

  it.effect("two workers (two pools) on one table never deliver a row twice within a lease", () =>
    Effect.gen(function*() {
      const { outbox, receiver } = yield* setup("acme")
      for (let i = 0; i < 200; i++) yield* outbox.enqueue(request("acme", "web"))
      const db = yield* TestDatabase
      const otherPool = yield* connect(db.url)
      // Timeouts far above a loaded machine's latency: a timed-out request would be retried legitimately.
      const settings = {
        OUTBOX_BATCH_SIZE: "20", OUTBOX_CONCURRENCY: "20",
        OUTBOX_REQUEST_TIMEOUT: "10 seconds", OUTBOX_CYCLE_TIMEOUT: "12 seconds", OUTBOX_LEASE: "15 seconds"
      }
      const a = yield* deliveryWith("http", settings)
      const b = yield* deliveryWith("http", settings, { sql: otherPool })
      const drain = (worker: typeof a, owner: string) =>
        Effect.gen(function*() {
          let total = 0
          while (true) {
            const { claimed } = yield* worker.tick(owner)
            if (claimed === 0) return total
            total += claimed
          }
        })
      const [byA, byB] = yield* Effect.all([drain(a, "a"), drain(b, "b")], { concurrency: 2 })
      expect(byA + byB).toBe(200)
      const keys = (yield* receiver.requests).map((r) => r.idempotencyKey)
      expect(keys.length).toBe(200)
      expect(new Set(keys).size).toBe(200)
      const sql = yield* SqlClient.SqlClient
      expect(yield* sql`SELECT state, attempt, count(*)::int AS n FROM outbox_messages GROUP BY 1, 2`)
        .toEqual([{ state: "delivered", attempt: 1, n: 200 }])
    }).pipe(Effect.scoped))

  it.effect("OUTBOX_CYCLE_TIMEOUT: a hung receiver is aborted at the cycle timeout and the row is recorded (fenced) as an ambiguous attempt, never acknowledged; the attempt's spans end with the interruption", () =>
    withTestClock(Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2030-01-01T00:00:00Z"))
      const { outbox, receiver } = yield* setup("acme")
      const { message } = yield* outbox.enqueue(request("acme", "web"))
      yield* receiver.script({ key: message.id, reply: LoopbackReply.hang({ accept: true }) })
      // The request timeout is moved out of the way: only the cycle timeout can end this delivery.
      const delivery = yield* deliveryWith("http", {}, {
        tweak: (s) => ({ ...s, requestTimeout: Duration.hours(1), cycleTimeout: Duration.seconds(2) })
      })
      const { spans, tracer } = yield* recordingTracer
      const tick = yield* Effect.fork(delivery.tick("w1").pipe(Effect.withTracer(tracer)))
      yield* receiver.awaitRequests(1)
      yield* TestClock.adjust("2 seconds")
      // Bounded in real time: without the cycle timeout this tick would wait on the receiver forever.
      const result = yield* TestServices.provideLive(Fiber.join(tick).pipe(
        Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => "the delivery outlived the cycle timeout" })
      ))
      expect(result).toMatchObject({ claimed: 1, delivered: 0, retried: 1, lost: 0 })
      const [aborted] = yield* receiver.awaitAborts(1)
      expect(aborted!.idempotencyKey).toBe(message.id)
      expect(yield* rowOf(message.id)).toMatchObject({
        state: "pending", attempt: 1, last_error: "provider-interrupted", lease_owner: null
      })
      const endedBy = (name: string) =>
        spans.filter((span) => span.name === name).map((span) =>
          span.status._tag === "Ended" && Exit.isInterrupted(span.status.exit) ? "interrupted" : span.status._tag
        )
      expect([endedBy("OutboxDelivery.deliver"), endedBy("ProviderHttp.send")]).toEqual([["interrupted"], ["interrupted"]])
    })))

  it.effect("interruption cancels an in-flight delivery: the request is aborted and the attempt is recorded (fenced) as ambiguous, never acknowledged", () =>
    Effect.gen(function*() {
      const { outbox, receiver } = yield* setup("acme")
      const { message } = yield* outbox.enqueue(request("acme", "web"))
      yield* receiver.script({ key: message.id, reply: LoopbackReply.hang({ accept: true }) })
      const delivery = yield* deliveryWith("http", { OUTBOX_REQUEST_TIMEOUT: "1 second" })
      const fiber = yield* Effect.fork(delivery.tick("w1"))
      yield* receiver.awaitRequests(1)
      yield* Fiber.interrupt(fiber)
      yield* receiver.awaitAborts(1)
      expect(yield* rowOf(message.id)).toMatchObject({
        state: "pending", attempt: 1, last_error: "provider-interrupted", lease_owner: null
      })
    }))
})
