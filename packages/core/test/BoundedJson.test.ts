import { describe, expect, it } from "@effect/vitest"
import { HttpApiSchema, HttpServerRespondable } from "@effect/platform"
import { Effect, Either, FastCheck as fc, Option, SchemaAST } from "effect"
import { exceededBound, JsonBodyRefused, makeCorrelationId, parseBounded } from "../src/index.ts"

const bytes = (text: string) => new TextEncoder().encode(text)

/** The reference: nesting depth, and containers plus the commas between their members. */
const measure = (value: unknown): { depth: number; values: number } => {
  if (typeof value !== "object" || value === null) return { depth: 0, values: 0 }
  const members = Array.isArray(value) ? value : Object.values(value)
  const inner = members.map(measure)
  return {
    depth: 1 + Math.max(0, ...inner.map((m) => m.depth)),
    values: 1 + Math.max(0, members.length - 1) + inner.reduce((sum, m) => sum + m.values, 0)
  }
}

describe("BoundedJson", () => {
  it("bounds nesting depth and element counts before parsing: 422 reasons json-too-deep and json-too-many-values", () => {
    expect(exceededBound(bytes("[".repeat(33) + "]".repeat(33)))).toBe("json-too-deep")
    expect(exceededBound(bytes("[".repeat(32) + "]".repeat(32)))).toBeUndefined()
    expect(exceededBound(bytes(`[${"0,".repeat(10_000)}0]`))).toBe("json-too-many-values")
    expect(exceededBound(bytes(`[${"0,".repeat(9_998)}0]`))).toBeUndefined()
    // Brackets, commas, quotes and backslashes inside strings are text, not structure.
    expect(exceededBound(bytes(JSON.stringify({ a: "[".repeat(100) + ",".repeat(20_000) + '\\"[' })))).toBeUndefined()
    // A 20,000-deep attack is refused without being parsed, whatever else the body holds.
    expect(parseBounded(bytes(`{"metadata":${"[".repeat(20_000)}${"]".repeat(20_000)}}`))).toEqual(Either.left("json-too-deep"))
  })

  it("malformed JSON and invalid UTF-8 are json-malformed; everything within the bounds parses as JSON.parse does", () => {
    expect(parseBounded(bytes('{"a":'))).toEqual(Either.left("json-malformed"))
    expect(parseBounded(new Uint8Array([0x7b, 0xff, 0x7d]))).toEqual(Either.left("json-malformed"))
    expect(parseBounded(bytes(""))).toEqual(Either.left("json-malformed"))
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), fc.integer({ min: 1, max: 8 }), fc.integer({ min: 1, max: 60 }), (value, maxDepth, maxValues) => {
        const text = JSON.stringify(value)
        const { depth, values } = measure(value)
        const found = exceededBound(bytes(text), { maxDepth, maxValues })
        if (depth <= maxDepth && values <= maxValues) {
          expect(found).toBeUndefined()
          expect(parseBounded(bytes(text), { maxDepth, maxValues })).toEqual(Either.right(JSON.parse(text)))
        } else {
          expect(found === "json-too-deep" ? depth > maxDepth : values > maxValues).toBe(true)
        }
      }),
      { numRuns: 500 }
    )
  })

  it("a refusal names its bound and carries the request's correlation id", () => {
    const correlationId = makeCorrelationId()
    expect(correlationId).toMatch(/^[0-9a-f]{32}$/)
    expect({ ...JsonBodyRefused.of("json-too-deep", correlationId) }).toMatchObject({ reason: "json-too-deep", limit: 32, correlationId })
    expect({ ...JsonBodyRefused.of("json-too-many-values", correlationId) }).toMatchObject({ limit: 10_000 })
    expect(JsonBodyRefused.of("json-malformed", correlationId).limit).toBeUndefined()
  })

  it("every container counts as a value, commas or not: nested empty containers alone can pass the value bound", () => {
    expect(exceededBound(bytes("[[[[]]]]"), { maxDepth: 10, maxValues: 3 })).toBe("json-too-many-values")
    expect(exceededBound(bytes("[[[]]]"), { maxDepth: 10, maxValues: 3 })).toBeUndefined()
  })

  it("invalid UTF-8 inside a string is json-malformed, never read as a replacement character", () => {
    const body = new Uint8Array([0x22, 0xff, 0x22])
    expect(parseBounded(body)).toEqual(Either.left("json-malformed"))
  })

  it.effect("the refusal is a tagged JsonBodyRefused answering 422 with its JSON form wherever it surfaces, declared as 422 in the API; no limit member when no bound was passed", () =>
    Effect.gen(function*() {
      const correlationId = makeCorrelationId()
      const refused = JsonBodyRefused.of("json-too-deep", correlationId)
      expect(refused._tag).toBe("JsonBodyRefused")
      expect("limit" in JsonBodyRefused.of("json-malformed", correlationId)).toBe(false)
      expect(HttpApiSchema.getStatusError(JsonBodyRefused)).toBe(422)
      const ast = JsonBodyRefused.ast
      const described = SchemaAST.getDescriptionAnnotation(SchemaAST.isTransformation(ast) ? ast.to : ast)
      expect(Option.getOrUndefined(described)).toMatch(/not JSON/)
      const response = yield* HttpServerRespondable.toResponse(refused)
      expect(response.status).toBe(422)
      const body = response.body._tag === "Uint8Array" ? JSON.parse(new TextDecoder().decode(response.body.body)) : undefined
      expect(body).toEqual({ _tag: "JsonBodyRefused", reason: "json-too-deep", correlationId, limit: 32 })
    }))
})
