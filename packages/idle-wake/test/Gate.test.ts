import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { AuthenticatedRequest, type VerifiedIdentity } from "@delivery/identity"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Fiber, Layer, Option } from "effect"
import { ApiActivity } from "../src/ApiActivity.ts"
import { DrainGate } from "../src/DrainGate.ts"
import { makeTenantGate } from "../src/Gate.ts"

// The gate around a tenant backend's whole HTTP app (spec 001): the idle hold's real 503 with Retry-After before
// routing, requests in flight counted from admission to answer, and local API activity only for a current board or
// agent key followed by a 2xx. The inner app stands in for the router and the Authentication middleware.

const boardKey: VerifiedIdentity = { _tag: "ApiKey", tenant: "t" as never, account: "a" as never, keyId: "k" as never, kind: "board", permissions: [] }

/** An app that authenticates as `identity` (as the middleware does, through the note) and answers `status`. */
const app = (identity: VerifiedIdentity | undefined, status: number) =>
  Effect.gen(function* () {
    const note = yield* AuthenticatedRequest
    note.identity = identity
    return HttpServerResponse.empty({ status })
  })

const State = Layer.mergeAll(DrainGate.Default, ApiActivity.Default)

const through = <E>(path: string, inner: Effect.Effect<HttpServerResponse.HttpServerResponse, E, AuthenticatedRequest>) =>
  Effect.gen(function* () {
    const gate = yield* makeTenantGate
    return yield* gate(inner).pipe(
      Effect.provideService(HttpServerRequest.HttpServerRequest, HttpServerRequest.fromWeb(new Request(`http://tenant.local${path}`)))
    )
  })

const activityHeld = Effect.flatMap(ApiActivity, (activity) => Effect.map(activity.remaining, Option.isSome))

describe("the tenant gate", () => {
  it.effect("while the idle hold lasts: 503 tenant-draining with Retry-After before the app runs; protocol, status, health, docs and the metrics scrape pass", () =>
    Effect.gen(function* () {
      const gate = yield* DrainGate
      yield* gate.take("hold", Duration.seconds(42))
      let ran = 0
      const counting = Effect.suspend(() => {
        ran += 1
        return app(boardKey, 200)
      })
      const refused = yield* through("/api/whoami?x=1", counting)
      expect(refused.status).toBe(503)
      expect(refused.headers["retry-after"]).toBe("42")
      const body = JSON.parse(new TextDecoder().decode((refused.body as { body: Uint8Array }).body))
      expect(body).toMatchObject({ _tag: "TenantDraining", reason: "tenant-draining", retryAfter: 42 })
      expect(body.correlationId).toMatch(/^[0-9a-f]{32}$/)
      expect(ran).toBe(0)
      for (const path of ["/operator/idle-wake/connectors/state", "/operator/tenants", "/controlplane/v1/envelopes", "/healthz", "/idle-wakex/v1", "/docs/x", "/metrics/x"]) {
        expect([path, (yield* through(path, counting)).status]).toEqual([path, 503])
      }
      for (const path of ["/idle-wake/v1/drain-reads", "/operator/idle-wake/status", "/health", "/ready", "/openapi.json", "/docs", "/metrics"]) {
        expect([path, (yield* through(path, counting)).status]).toEqual([path, 200])
      }
      expect(ran).toBe(7)
      // Drain refusals and the exempt routes never count as activity.
      expect(yield* activityHeld).toBe(false)
    }).pipe(Effect.provide(State)))

  it.effect("an admitted request is in flight until it is answered, whether it succeeds or fails; exempt routes are never counted", () =>
    Effect.gen(function* () {
      const gate = yield* DrainGate
      const release = yield* Deferred.make<void>()
      const slow = Effect.zipRight(Deferred.await(release), app(undefined, 200))
      const running = yield* Effect.fork(through("/api/receipts", slow))
      yield* Effect.yieldNow()
      expect(yield* gate.inFlight).toBe(1)
      const exempt = yield* Effect.fork(through("/idle-wake/v1/drain-reads", slow))
      yield* Effect.yieldNow()
      expect(yield* gate.inFlight).toBe(1)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(running)
      yield* Fiber.join(exempt)
      expect(yield* gate.inFlight).toBe(0)
      yield* Effect.exit(through("/api/receipts", Effect.fail("broken")))
      expect(yield* gate.inFlight).toBe(0)
    }).pipe(Effect.provide(State)))

  it.effect("local API activity: a board key's 2xx holds it; a 4xx, an unauthenticated 2xx or a failure does not", () =>
    Effect.gen(function* () {
      yield* through("/api/whoami", app(boardKey, 403))
      yield* through("/api/whoami", app(undefined, 200))
      yield* Effect.exit(through("/api/whoami", Effect.zipRight(Effect.flatMap(AuthenticatedRequest, (note) => Effect.sync(() => (note.identity = boardKey))), Effect.fail("boom"))))
      expect(yield* activityHeld).toBe(false)
      // An exempt route's success with a key does not count either.
      yield* through("/operator/idle-wake/status", app(boardKey, 200))
      expect(yield* activityHeld).toBe(false)
      yield* through("/api/whoami", app(boardKey, 200))
      expect(yield* activityHeld).toBe(true)
    }).pipe(Effect.provide(State)))
})
