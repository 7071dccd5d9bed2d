import { describe, expect, it } from "@effect/vitest"
import { type Envelope, verifyEnvelopeSignature } from "@delivery/signer"
import { freePort, LoopbackProvider, LoopbackReply, type LoopbackRule } from "@delivery/testing"
import { FetchHttpClient } from "@effect/platform"
import { Clock, Duration, Effect, Layer, Random, Redacted } from "effect"
import { createPublicKey } from "node:crypto"
import { type EventToSend, makeProducer, type RetryPolicy } from "../src/index.ts"
import { keyPair, stoppedClock } from "./support/World.ts"

// The producer's retry rules (docs/client.md, "Integrating a producer") against a real loopback server that
// answers on command: which answers are sent again, how long each wait is, and when it gives up. Waits go
// through a clock that records them and returns at once; the jitter comes from a fixed Random.

const NOW = Date.parse("2026-12-07T12:00:00.000Z")
const PATH = "/controlplane/v1/envelopes"
const CORRELATION = "0123456789abcdef0123456789abcdef"
const TOKEN = "device_test_token"
const key = keyPair()

/** A clock stopped at NOW whose sleeps return at once and are written down, in milliseconds. */
const recordingClock = () => {
  const waits: Array<number> = []
  const clock: Clock.Clock = { ...stoppedClock(NOW), sleep: (duration) => Effect.sync(() => void waits.push(Duration.toMillis(duration))) }
  return { clock, waits }
}

const json = (status: number, body: object, headers: Record<string, string> = {}) =>
  LoopbackReply.status(status, { headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) })

const accepted = (sequence = 1) =>
  json(201, { outcome: "accepted", reason: "accepted", correlationId: CORRELATION, eventIdentity: "e".repeat(64), sequence, cursor: sequence })
const duplicate = json(200, { outcome: "duplicate", reason: "duplicate", correlationId: CORRELATION, eventIdentity: "d".repeat(64), sequence: 1, cursor: 3 })
const syncLimited = (retryAfterMs: number, headers: Record<string, string> = {}) =>
  json(429, { _tag: "SyncRateLimited", reason: "sync-rate-limited", correlationId: CORRELATION, retryAfter: retryAfterMs }, headers)
const storageDown = (headers: Record<string, string> = {}) =>
  json(503, { _tag: "InboxStorageUnavailable", reason: "storage-unavailable", correlationId: CORRELATION }, headers)
const gatewayPage = (status: number) =>
  LoopbackReply.status(status, { headers: { "content-type": "text/html" }, body: `<html><body>${status}</body></html>` })

const event = (sequence = 1, extra: Partial<EventToSend> = {}): EventToSend => ({
  route: { tenant: "acme", project: "web", producer: "laptop-1" },
  sequence,
  metadata: { kind: "task.proposed", subject: `task-${sequence}` },
  ...extra
})

const once = (reply: LoopbackRule["reply"]): LoopbackRule => ({ path: PATH, times: 1, reply })

interface SendOptions {
  /** The policy; "defaults" gives the producer none at all. */
  readonly retry?: RetryPolicy | "defaults"
  readonly random?: number
  readonly baseUrl?: string
  /** Sends this instead of a freshly signed event. */
  readonly envelope?: Envelope
}

/**
 * Scripts the answers in order, sends one event with `retry` (base 100 ms, cap 30 s, 8 attempts unless told
 * otherwise) and returns the outcome, the waits and the requests the server saw.
 */
const sendThrough = (replies: ReadonlyArray<LoopbackRule["reply"]>, options: SendOptions = {}) =>
  Effect.gen(function* () {
    const server = yield* LoopbackProvider
    yield* server.reset
    yield* server.script(...replies.map(once))
    const { clock, waits } = recordingClock()
    const producer = yield* makeProducer({
      baseUrl: options.baseUrl ?? server.url,
      token: Redacted.make(TOKEN),
      key: { keyId: "k1", privateKey: key.privateKey },
      ...(options.retry === "defaults" ? {} : { retry: { base: "100 millis", cap: "30 seconds", ...options.retry } })
    })
    const sending = options.envelope === undefined ? producer.send(event()) : producer.sendSigned(options.envelope)
    const outcome = yield* sending.pipe(
      Effect.either,
      Effect.withClock(clock),
      Effect.withRandom(Random.fixed([options.random ?? 0]))
    )
    return { outcome, waits, requests: yield* server.requests }
  })

const Live = Layer.merge(LoopbackProvider.Default, FetchHttpClient.layer)

describe("the producer's retry rules, against a loopback server", () => {
  it.scopedLive("429, 503 and a gateway's 502, 503 and 504 page (whatever their body) and a dropped connection are 'not now': the same signed bytes are sent again until 201, and Sent counts the attempts", () =>
    Effect.gen(function* () {
      const { outcome, waits, requests } = yield* sendThrough([
        syncLimited(0),
        storageDown(),
        json(503, { _tag: "ShuttingDown", reason: "shutting-down", correlationId: CORRELATION }),
        json(429, { _tag: "IdentityRateLimited", retryAfter: 0 }),
        json(503, { _tag: "IdentityStorageUnavailable", operation: "authenticate" }),
        gatewayPage(502),
        gatewayPage(503),
        gatewayPage(504),
        LoopbackReply.drop(),
        accepted()
      ], { retry: { maxAttempts: 10 } })
      expect(outcome._tag).toBe("Right")
      if (outcome._tag !== "Right") return
      expect(outcome.right).toMatchObject({ outcome: "accepted", attempts: 10, sequence: 1, cursor: 1, correlationId: CORRELATION, eventIdentity: "e".repeat(64) })
      expect(waits).toHaveLength(9)
      expect(requests).toHaveLength(10)
      // Every attempt is the same envelope, byte for byte, with the device credential, to the inbox's route.
      expect(new Set(requests.map((r) => r.bodyText)).size).toBe(1)
      for (const request of requests) {
        expect(request).toMatchObject({ method: "POST", path: PATH })
        expect(request.headers.authorization).toBe(`Bearer ${TOKEN}`)
      }
      expect(JSON.parse(requests[0]!.bodyText)).toEqual(outcome.right.envelope)
      expect(verifyEnvelopeSignature(outcome.right.envelope, createPublicKey(key.privateKey))).toBe(true)
    }).pipe(Effect.provide(Live)))

  it.scopedLive("200 duplicate is success like 201: the outcome, its identity and the cursor are the server's", () =>
    Effect.gen(function* () {
      const { outcome, waits } = yield* sendThrough([duplicate])
      expect(outcome).toMatchObject({ _tag: "Right", right: { outcome: "duplicate", attempts: 1, cursor: 3, eventIdentity: "d".repeat(64) } })
      expect(waits).toEqual([])
    }).pipe(Effect.provide(Live)))

  it.scopedLive("every other answer is not retried: one request, and the server's typed error with its reason (401, 403, 409, 422), a 500 defect, or an undeclared 404 page", () =>
    Effect.gen(function* () {
      const cases = [
        [json(401, { _tag: "Unauthenticated", reason: "revoked" }), { _tag: "Unauthenticated", reason: "revoked" }],
        [json(403, { _tag: "EnvelopeForbidden", reason: "signature-invalid", correlationId: CORRELATION }), { _tag: "EnvelopeForbidden", reason: "signature-invalid" }],
        [json(409, { _tag: "EnvelopeConflict", reason: "sequence-conflict", correlationId: CORRELATION }), { _tag: "EnvelopeConflict", reason: "sequence-conflict" }],
        [json(422, { _tag: "EnvelopeUnprocessable", reason: "metadata-invalid", correlationId: CORRELATION }), { _tag: "EnvelopeUnprocessable", reason: "metadata-invalid" }],
        [json(500, { _tag: "InternalError", reason: "internal-error", correlationId: CORRELATION }), { _tag: "InternalError", correlationId: CORRELATION }],
        [gatewayPage(404), { _tag: "ResponseError" }]
      ] as const
      for (const [reply, expected] of cases) {
        const { outcome, waits, requests } = yield* sendThrough([reply, accepted()])
        expect(outcome).toMatchObject({ _tag: "Left", left: expected })
        expect(requests).toHaveLength(1)
        expect(waits).toEqual([])
      }
    }).pipe(Effect.provide(Live)))

  it.scopedLive("without Retry-After each wait is the capped exponential backoff, jitter only shortening it: 100, 200, 400 ms, or three quarters of that with r = 0.5", () =>
    Effect.gen(function* () {
      const full = yield* sendThrough([storageDown(), storageDown(), storageDown(), accepted()])
      expect(full.waits).toEqual([100, 200, 400])
      const jittered = yield* sendThrough([storageDown(), storageDown(), storageDown(), accepted()], { random: 0.5 })
      expect(jittered.waits).toEqual([75, 150, 300])
      const capped = yield* sendThrough([storageDown(), storageDown(), storageDown(), accepted()], { retry: { cap: "250 millis" } })
      expect(capped.waits).toEqual([100, 200, 250])
    }).pipe(Effect.provide(Live)))

  it.scopedLive("a wait is the larger of the backoff and the server's Retry-After (seconds or an HTTP-date), else the body's retryAfter, and never longer than the cap", () =>
    Effect.gen(function* () {
      const waitAfter = (reply: LoopbackRule["reply"], retry: RetryPolicy = {}) =>
        Effect.map(sendThrough([reply, accepted()], { retry }), ({ waits }) => waits)
      expect(yield* waitAfter(storageDown({ "retry-after": "2" }))).toEqual([2000])
      expect(yield* waitAfter(storageDown({ "retry-after": new Date(NOW + 3000).toUTCString() }))).toEqual([3000])
      // A Retry-After shorter than the backoff does not shorten the wait.
      expect(yield* waitAfter(storageDown({ "retry-after": "0" }))).toEqual([100])
      // The header wins over the body; without a usable header the body's milliseconds count.
      expect(yield* waitAfter(syncLimited(1500, { "retry-after": "4" }))).toEqual([4000])
      expect(yield* waitAfter(syncLimited(1500))).toEqual([1500])
      expect(yield* waitAfter(syncLimited(1500, { "retry-after": "soon" }))).toEqual([1500])
      expect(yield* waitAfter(syncLimited(50))).toEqual([100])
      // Whatever the server says, the cap bounds the wait.
      expect(yield* waitAfter(storageDown({ "retry-after": "120" }))).toEqual([30000])
      expect(yield* waitAfter(syncLimited(90_000), { cap: "5 seconds" })).toEqual([5000])
    }).pipe(Effect.provide(Live)))

  it.scopedLive("a Retry-After counts for the answer that carried it only: the next answer without one waits the backoff alone", () =>
    Effect.gen(function* () {
      const { waits } = yield* sendThrough([storageDown({ "retry-after": "5" }), storageDown(), accepted()])
      expect(waits).toEqual([5000, 200])
    }).pipe(Effect.provide(Live)))

  it.scopedLive("maxAttempts sends in all (8 by default), then ProducerGaveUp with the attempts, the last error's tag and the last status", () =>
    Effect.gen(function* () {
      const byDefault = yield* sendThrough(Array.from({ length: 9 }, () => storageDown()), { retry: { maxAttempts: undefined } })
      expect(byDefault.outcome).toMatchObject({ _tag: "Left", left: { _tag: "ProducerGaveUp", attempts: 8, last: "InboxStorageUnavailable", status: 503 } })
      expect(byDefault.requests).toHaveLength(8)
      expect(byDefault.waits).toEqual([100, 200, 400, 800, 1600, 3200, 6400])

      // No policy at all: 8 attempts from a 200 ms base, and a 30 s cap on whatever the server says.
      const noPolicy = yield* sendThrough([storageDown({ "retry-after": "120" }), ...Array.from({ length: 8 }, () => storageDown())], { retry: "defaults" })
      expect(noPolicy.outcome).toMatchObject({ _tag: "Left", left: { _tag: "ProducerGaveUp", attempts: 8 } })
      expect(noPolicy.waits).toEqual([30000, 400, 800, 1600, 3200, 6400, 12800])

      const gateway = yield* sendThrough([gatewayPage(502), gatewayPage(504), accepted()], { retry: { maxAttempts: 2 } })
      expect(gateway.outcome).toMatchObject({ _tag: "Left", left: { _tag: "ProducerGaveUp", attempts: 2, status: 504 } })
      expect(gateway.requests).toHaveLength(2)

      const once = yield* sendThrough([syncLimited(0), accepted()], { retry: { maxAttempts: 1 } })
      expect(once.outcome).toMatchObject({ _tag: "Left", left: { _tag: "ProducerGaveUp", attempts: 1, last: "SyncRateLimited", status: 429 } })
      expect(once.waits).toEqual([])
    }).pipe(Effect.provide(Live)))

  it.scopedLive("a refused connection is sent again with backoff, and gives up as RequestError without a status", () =>
    Effect.gen(function* () {
      const nobody = `http://127.0.0.1:${yield* freePort}`
      const { outcome, waits } = yield* sendThrough([], { baseUrl: nobody, retry: { maxAttempts: 3 } })
      expect(outcome).toMatchObject({ _tag: "Left", left: { _tag: "ProducerGaveUp", attempts: 3, last: "RequestError" } })
      if (outcome._tag === "Left") expect(outcome.left).not.toHaveProperty("status")
      expect(waits).toEqual([100, 200])
    }).pipe(Effect.provide(Live)))

  it.scopedLive("an envelope the API's schema cannot encode is never sent and not retried: its ParseError at once", () =>
    Effect.gen(function* () {
      const { outcome, waits, requests } = yield* sendThrough([accepted()], { envelope: { type: "controlplane/v1" } as unknown as Envelope })
      expect(outcome).toMatchObject({ _tag: "Left", left: { _tag: "ParseError" } })
      expect(requests).toEqual([])
      expect(waits).toEqual([])
    }).pipe(Effect.provide(Live)))
})
