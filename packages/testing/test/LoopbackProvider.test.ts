import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { LoopbackProvider, LoopbackReply, makeLoopbackProvider } from "../src/LoopbackProvider.ts"

// Plain fetch is fine here: this suite tests the server, not the adapter.
const post = (url: string, options: { key?: string; body?: string; signal?: AbortSignal } = {}) =>
  Effect.tryPromise(async () => {
    const response = await fetch(url, {
      method: "POST",
      body: options.body ?? "payload",
      headers: options.key !== undefined ? { "Idempotency-Key": options.key } : {},
      redirect: "manual",
      ...(options.signal ? { signal: options.signal } : {})
    })
    return { status: response.status, retryAfter: response.headers.get("retry-after"), body: await response.text() }
  })

const withProvider = <A, E>(f: (provider: LoopbackProvider) => Effect.Effect<A, E>) =>
  Effect.flatMap(LoopbackProvider, f).pipe(Effect.provide(LoopbackProvider.Default))

describe("LoopbackProvider", () => {
  it.live("deduplicates by Idempotency-Key: a retry of an accepted key is answered, not delivered again", () =>
    withProvider((provider) =>
      Effect.gen(function*() {
        yield* provider.script({ key: "k-1", times: 1, reply: LoopbackReply.status(201, { body: "accepted-1" }) })
        const first = yield* post(provider.urlFor("/send"), { key: "k-1", body: "one" })
        const retry = yield* post(provider.urlFor("/send"), { key: "k-1", body: "one" })
        const other = yield* post(provider.urlFor("/send"), { key: "k-2", body: "two" })
        yield* post(provider.urlFor("/send"), { body: "no key" })
        yield* post(provider.urlFor("/send"), { body: "no key" })
        expect(first).toEqual({ status: 201, retryAfter: null, body: "accepted-1" })
        expect(retry).toEqual(first)
        expect(other.status).toBe(200)

        const requests = yield* provider.requests
        expect(requests.map((r) => [r.idempotencyKey, r.handling, r.status])).toEqual([
          ["k-1", "responded", 201],
          ["k-1", "replayed", 201],
          ["k-2", "responded", 200],
          [undefined, "responded", 200],
          [undefined, "responded", 200]
        ])
        expect(requests[0]!.method).toBe("POST")
        expect(requests[0]!.path).toBe("/send")
        expect(requests[0]!.headers["idempotency-key"]).toBe("k-1")
        expect(requests[0]!.bodyText).toBe("one")
        expect(requests[0]!.body).toEqual(new TextEncoder().encode("one"))

        const deliveries = yield* provider.deliveries
        expect(deliveries.map((d) => [d.idempotencyKey, d.status, d.requestSeq])).toEqual([
          ["k-1", 201, 1],
          ["k-2", 200, 3],
          [undefined, 200, 4],
          [undefined, 200, 5]
        ])
      })
    ))

  it.live("a delayed answer is written after its delay, with the time it was answered; a client gone meanwhile gets nothing accepted", () =>
    withProvider((provider) =>
      Effect.gen(function*() {
        yield* provider.script({ key: "slow", reply: LoopbackReply.status(200, { delayMs: 150 }) })
        const sent = Date.now()
        expect((yield* post(provider.urlFor("/send"), { key: "slow" })).status).toBe(200)
        const [answered] = yield* provider.requests
        expect(answered!.answeredAt!.getTime() - answered!.receivedAt.getTime()).toBeGreaterThanOrEqual(140)
        expect(Date.now() - sent).toBeGreaterThanOrEqual(140)
        const controller = new AbortController()
        const aborted = yield* Effect.fork(Effect.either(post(provider.urlFor("/send"), { key: "slow", signal: controller.signal })))
        yield* provider.awaitRequests(2)
        controller.abort()
        yield* provider.awaitAborts(1)
        yield* Effect.flatMap(Effect.sync(() => aborted), (fiber) => fiber.await)
        const [, gone] = yield* provider.requests
        expect(gone).toMatchObject({ clientAborted: true, answeredAt: undefined, status: undefined })
        expect((yield* provider.deliveries).length).toBe(1)
      })
    ))

  it.live("answers the next N requests as scripted, then falls back to 200", () =>
    withProvider((provider) =>
      Effect.gen(function*() {
        yield* provider.script(
          { times: 2, reply: LoopbackReply.status(503, { retryAfter: "7", body: "busy" }) },
          { path: "/gone", reply: LoopbackReply.status(404) },
          { key: "vip", reply: LoopbackReply.status(202) }
        )
        const url = provider.urlFor("/send")
        // Key rules win over count rules, so this does not use up a 503.
        expect((yield* post(url, { key: "vip" })).status).toBe(202)
        expect(yield* post(url, { key: "a" })).toEqual({ status: 503, retryAfter: "7", body: "busy" })
        expect((yield* post(url, { key: "a" })).status).toBe(503)
        expect((yield* post(url, { key: "a" })).status).toBe(200)
        // A path rule without `times` holds until reset.
        expect((yield* post(provider.urlFor("/gone"))).status).toBe(404)
        expect((yield* post(provider.urlFor("/gone"))).status).toBe(404)
        expect((yield* provider.deliveries).map((d) => d.idempotencyKey)).toEqual(["vip", "a"])

        yield* provider.reset
        expect(yield* provider.requests).toEqual([])
        expect(yield* provider.deliveries).toEqual([])
        expect((yield* post(provider.urlFor("/gone"))).status).toBe(200)
      })
    ))

  it.live("hangs until the client aborts, and records the abort", () =>
    withProvider((provider) =>
      Effect.gen(function*() {
        yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
        const controller = new AbortController()
        const pending = yield* Effect.fork(Effect.either(post(provider.url, { key: "h", signal: controller.signal })))
        const [request] = yield* provider.awaitRequests(1)
        expect(request!.handling).toBe("hung")
        controller.abort()
        const [aborted] = yield* provider.awaitAborts(1).pipe(Effect.timeout("5 seconds"))
        expect(aborted!.clientAborted).toBe(true)
        expect(aborted!.idempotencyKey).toBe("h")
        yield* pending.await
        expect(yield* provider.deliveries).toEqual([])
      })
    ))

  it.live("hangs until released, then answers through the idempotency store", () =>
    withProvider((provider) =>
      Effect.gen(function*() {
        yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
        const pending = yield* Effect.fork(post(provider.url, { key: "r" }))
        yield* provider.awaitRequests(1)
        expect(yield* provider.release(LoopbackReply.status(201, { body: "late" }))).toBe(1)
        expect(yield* pending.await.pipe(Effect.flatten)).toEqual({ status: 201, retryAfter: null, body: "late" })
        expect((yield* provider.requests)[0]!.clientAborted).toBe(false)
        expect((yield* provider.deliveries).map((d) => d.idempotencyKey)).toEqual(["r"])
      })
    ))

  it.live("drops the connection after reading the request; accept: true loses only the acknowledgement", () =>
    withProvider((provider) =>
      Effect.gen(function*() {
        yield* provider.script(
          { key: "lost", times: 1, reply: LoopbackReply.drop() },
          { key: "acked", times: 1, reply: LoopbackReply.drop({ accept: true }) }
        )
        const lost = yield* Effect.either(post(provider.url, { key: "lost", body: "x" }))
        expect(lost._tag).toBe("Left")
        const acked = yield* Effect.either(post(provider.url, { key: "acked", body: "y" }))
        expect(acked._tag).toBe("Left")
        // The retry finds the key already accepted: answered, not delivered twice.
        expect((yield* post(provider.url, { key: "acked", body: "y" })).status).toBe(200)

        const requests = yield* provider.requests
        expect(requests.map((r) => [r.idempotencyKey, r.handling, r.clientAborted, r.bodyText])).toEqual([
          ["lost", "dropped", false, "x"],
          ["acked", "dropped", false, "y"],
          ["acked", "replayed", false, "y"]
        ])
        expect((yield* provider.deliveries).map((d) => d.idempotencyKey)).toEqual(["acked"])
      })
    ))

  it.live("closes its server when the scope closes", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const provider = yield* makeLoopbackProvider.pipe(Scope.extend(scope))
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      const hung = yield* Effect.fork(Effect.either(post(provider.url, { key: "z" })))
      yield* provider.awaitRequests(1)
      yield* Scope.close(scope, Exit.void).pipe(Effect.timeout("5 seconds"))
      expect((yield* hung.await.pipe(Effect.flatten))._tag).toBe("Left")
      const after = yield* Effect.either(post(provider.url))
      expect(after._tag).toBe("Left")
    }))
})
