import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { freePort, OPERATOR_TOKEN, startBackend, TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { FetchHttpClient } from "@effect/platform"
import { Effect, Fiber, Layer, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { makeFetchClient, makeProducer, type EventToSend } from "../src/index.ts"
import { keyPair, provisionTenant } from "./support/World.ts"

// The client's producer against the real inbox in a real backend process (docs/quickstart.md, "Integrating a
// producer"): provisioning through the typed client, then envelopes built, signed and sent by the producer.

const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`

const event = (tenant: string, sequence: number, extra: Partial<EventToSend> = {}): EventToSend => ({
  route: { tenant, project: "web", producer: "laptop-1" },
  sequence,
  metadata: { kind: "task.proposed", subject: `task-${sequence}`, attributes: { title: "Réviser le plan" } },
  ...extra
})

const failureOf = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.flip(effect) as Effect.Effect<any, A, R>

layer(Layer.merge(TestDatabaseLive, FetchHttpClient.layer), { excludeTestServices: true })("the client's producer against the real inbox", (it) => {
  it.scoped("201 accepted and 200 duplicate are both success with one event identity; refusals are typed errors with their stable reason and are sent once (403 signature-invalid, 409 sequence-below-replay-floor, 401 revoked); an envelope outside the closed schema is EnvelopeInvalid before anything is sent", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* startBackend()
      const sql = yield* SqlClient.SqlClient
      const world = yield* provisionTenant(baseUrl, unique("p"))
      const producer = yield* makeProducer({ baseUrl, token: world.device.token, key: { keyId: "k1", privateKey: world.key.privateKey } })

      const first = yield* producer.send(event(world.tenant, 1, { eventId: "evt-0000000000000001" }))
      expect(first).toMatchObject({ outcome: "accepted", sequence: 1, cursor: 1, attempts: 1 })
      const again = yield* producer.sendSigned(first.envelope)
      expect(again).toMatchObject({ outcome: "duplicate", eventIdentity: first.eventIdentity, attempts: 1 })

      // Signed with a key the tenant never registered: refused at step 3, and not retried.
      const stranger = yield* makeProducer({ baseUrl, token: world.device.token, key: { keyId: "k1", privateKey: keyPair().privateKey } })
      const forged = yield* failureOf(stranger.send(event(world.tenant, 2)))
      expect(forged).toMatchObject({ _tag: "EnvelopeForbidden", reason: "signature-invalid" })

      yield* world.operator.inboxStreams.raiseReplayFloor({
        path: { tenant: world.tenant, project: "web" as never, producer: "laptop-1" as never },
        payload: { floor: 5 }
      })
      expect(yield* failureOf(producer.send(event(world.tenant, 4)))).toMatchObject({ _tag: "EnvelopeConflict", reason: "sequence-below-replay-floor" })
      // The producer checks the envelope against the same closed schema before sending anything.
      expect(yield* failureOf(producer.send(event(world.tenant, 6, { metadata: { kind: "task.deleted", subject: "x" } }))))
        .toMatchObject({ _tag: "EnvelopeInvalid" })

      yield* world.operator.provisioning.revokeDeviceCredential({ path: { tenant: world.tenant, id: world.device.deviceCredential.id } })
      expect(yield* failureOf(producer.send(event(world.tenant, 6)))).toMatchObject({ _tag: "Unauthenticated", reason: "revoked" })

      // Each refusal was one request: one audit row each, no retries.
      const audit = yield* sql<{ outcome: string; reason: string }>`
        SELECT outcome, reason FROM inbox_audit WHERE tenant = ${world.tenant} ORDER BY audit_id`.withoutTransform
      expect(audit.map((row) => `${row.outcome}:${row.reason}`)).toEqual([
        "accepted:accepted",
        "duplicate:duplicate",
        "refused:signature-invalid",
        "refused:sequence-below-replay-floor"
      ])
    }))

  it.scoped("429 from the sync limiter is sent again only after its Retry-After, then accepted; with no attempts left it is ProducerGaveUp", () =>
    Effect.gen(function* () {
      const { baseUrl } = yield* startBackend({ SYNC_INGEST_LIMIT: "2", SYNC_INGEST_WINDOW: "2 seconds" })
      const world = yield* provisionTenant(baseUrl, unique("r"))
      const options = { baseUrl, token: world.device.token, key: { keyId: "k1", privateKey: world.key.privateKey } }
      const producer = yield* makeProducer({ ...options, retry: { base: "10 millis", cap: "5 seconds" } })
      const impatient = yield* makeProducer({ ...options, retry: { maxAttempts: 1 } })
      yield* producer.send(event(world.tenant, 1))
      yield* producer.send(event(world.tenant, 2))

      expect(yield* failureOf(impatient.send(event(world.tenant, 3)))).toMatchObject({ _tag: "ProducerGaveUp", attempts: 1, last: "SyncRateLimited" })
      const started = Date.now()
      const third = yield* producer.send(event(world.tenant, 3))
      const waited = Date.now() - started
      expect(third).toMatchObject({ outcome: "accepted", sequence: 3 })
      expect(third.attempts).toBeGreaterThanOrEqual(2)
      // Retry-After is whole seconds (at least 1); the backoff alone would have waited 10 ms.
      expect(waited).toBeGreaterThanOrEqual(1000)
    }))

  it.scoped("a refused connection is retried with backoff until the backend listens, then the envelope is accepted once", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const first = yield* startBackend()
      const world = yield* provisionTenant(first.baseUrl, unique("c"))
      const port = yield* freePort
      const baseUrl = `http://127.0.0.1:${port}`
      const producer = yield* makeProducer({
        baseUrl,
        token: world.device.token,
        key: { keyId: "k1", privateKey: world.key.privateKey },
        retry: { base: "100 millis", cap: "500 millis", maxAttempts: 60 }
      })
      const sending = yield* Effect.fork(producer.send(event(world.tenant, 1)))
      yield* Effect.sleep("700 millis")
      expect(sending.unsafePoll()).toBeNull()
      yield* startBackend({ PORT: String(port), DATABASE_URL: db.url })
      const sent = yield* Fiber.join(sending)
      expect(sent.outcome).toBe("accepted")
      expect(sent.attempts).toBeGreaterThan(1)
      const operator = yield* makeFetchClient({ baseUrl, token: Redacted.make(OPERATOR_TOKEN) })
      expect(yield* operator.inboxStreams.stream({ path: { tenant: world.tenant, project: "web" as never, producer: "laptop-1" as never } }))
        .toMatchObject({ cursor: 1, highSequence: 1 })
    }))
})
