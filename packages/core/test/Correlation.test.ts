import { HttpApp, HttpServerResponse } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, FiberRef, HashMap, Option, Runtime, Schema } from "effect"
import {
  CORRELATION_HEADER,
  CORRELATION_SPAN_ATTRIBUTE,
  CorrelationId,
  correlationRefs,
  makeCorrelationId,
  requestCorrelationId
} from "../src/index.ts"

const HEX32 = /^[0-9a-f]{32}$/

describe("correlation ids: one per request, chosen by the server", () => {
  it("an id is exactly 32 lower-case hex digits, safe to log, store and put in a header; fresh ones differ", () => {
    const decode = Schema.decodeUnknownEither(CorrelationId)
    const id = makeCorrelationId()
    expect(id).toMatch(HEX32)
    expect(Either.isRight(decode(id))).toBe(true)
    expect(makeCorrelationId()).not.toBe(id)
    for (const bad of [id.toUpperCase(), id.slice(1), id + "0", "x" + id.slice(1), id.slice(1) + "g", ` ${id.slice(1)}`, `${id}\n`, ""]) {
      expect([bad, Either.isLeft(decode(bad))]).toEqual([bad, true])
    }
    expect(CORRELATION_HEADER).toBe("x-correlation-id")
  })

  it("a request fiber made with correlationRefs(id) reads that id and logs it as the correlationId annotation", async () => {
    const id = makeCorrelationId()
    const probe = Effect.all([requestCorrelationId, FiberRef.get(FiberRef.currentLogAnnotations)])
    const [read, annotations] = await new Promise<readonly [unknown, HashMap.HashMap<string, unknown>]>((resolve, reject) => {
      const fiber = Runtime.runFork(Runtime.defaultRuntime)(probe, { updateRefs: correlationRefs(id) })
      fiber.addObserver((exit) => exit._tag === "Success" ? resolve(exit.value) : reject(exit.cause))
    })
    expect(read).toBe(id)
    expect(Option.getOrUndefined(HashMap.get(annotations, "correlationId"))).toBe(id)
  })

  it("every span started while the request is handled carries its correlation id as the correlation.id attribute", async () => {
    const id = makeCorrelationId()
    const probe = Effect.useSpan("outer", (outer) =>
      Effect.map(Effect.useSpan("inner", (inner) => Effect.succeed(inner.attributes)), (inner) => [outer.attributes, inner] as const))
    const [outer, inner] = await new Promise<readonly [ReadonlyMap<string, unknown>, ReadonlyMap<string, unknown>]>((resolve, reject) => {
      const fiber = Runtime.runFork(Runtime.defaultRuntime)(probe, { updateRefs: correlationRefs(id) })
      fiber.addObserver((exit) => exit._tag === "Success" ? resolve(exit.value) : reject(exit.cause))
    })
    expect(CORRELATION_SPAN_ATTRIBUTE).toBe("correlation.id")
    expect(outer.get(CORRELATION_SPAN_ATTRIBUTE)).toBe(id)
    expect(inner.get(CORRELATION_SPAN_ATTRIBUTE)).toBe(id)
  })

  it("without the edge, the first reader assigns the id for the rest of the request and the response carries it in x-correlation-id", async () => {
    const app = Effect.gen(function*() {
      const first = yield* requestCorrelationId
      const again = yield* requestCorrelationId
      const annotations = yield* FiberRef.get(FiberRef.currentLogAnnotations)
      return yield* HttpServerResponse.json({ first, again, logged: HashMap.get(annotations, "correlationId") })
    })
    const handler = HttpApp.toWebHandler(app)
    const response = await handler(new Request("http://localhost/"))
    const body = await response.json() as { first: string; again: string; logged: { value: string } }
    expect(body.first).toMatch(HEX32)
    expect(body.again).toBe(body.first)
    expect(body.logged.value).toBe(body.first)
    expect(response.headers.get(CORRELATION_HEADER)).toBe(body.first)
    const other = await (await handler(new Request("http://localhost/"))).json() as { first: string }
    expect(other.first).not.toBe(body.first)
  })
})
