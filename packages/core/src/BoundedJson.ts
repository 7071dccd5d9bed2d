import { HttpApiSchema, HttpServerRespondable, HttpServerResponse } from "@effect/platform"
import { Either, Schema } from "effect"
import { CorrelationId } from "./Correlation.ts"

/**
 * Bounds on a JSON request body, checked before it is parsed. Parsing, decoding and formatting a decode
 * error are all recursive or proportional to the number of values: past these bounds a small body could
 * cost a stack overflow or gigabytes. No request of this API comes near them (an envelope nests 4 deep).
 */
export interface JsonBounds {
  /** Arrays and objects open at once. */
  readonly maxDepth: number
  /** Containers plus separating commas in the whole body: at least the number of values it holds. */
  readonly maxValues: number
}

export const JSON_BOUNDS: JsonBounds = { maxDepth: 32, maxValues: 10_000 }

export type JsonBoundExceeded = "json-too-deep" | "json-too-many-values"
export type JsonProblem = "json-malformed" | JsonBoundExceeded

const QUOTE = 0x22
const BACKSLASH = 0x5c
const COMMA = 0x2c

/**
 * One pass over the UTF-8 bytes, allocating nothing: which bound the body passes, if any. It does not
 * validate JSON (the parser does that afterwards); bytes inside strings never count. Multi-byte UTF-8
 * sequences never contain these ASCII bytes, so the scan needs no decoding.
 */
export const exceededBound = (bytes: Uint8Array, bounds: JsonBounds = JSON_BOUNDS): JsonBoundExceeded | undefined => {
  let depth = 0
  let values = 0
  let inString = false
  // Stryker disable next-line EqualityOperator: one step past the end reads undefined, which matches no byte
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i]!
    if (inString) {
      if (byte === BACKSLASH) i++
      else if (byte === QUOTE) inString = false
      continue
    }
    if (byte === QUOTE) inString = true
    else if (byte === 0x5b || byte === 0x7b) {
      if (++depth > bounds.maxDepth) return "json-too-deep"
      if (++values > bounds.maxValues) return "json-too-many-values"
    } else if (byte === 0x5d || byte === 0x7d) depth--
    else if (byte === COMMA && ++values > bounds.maxValues) return "json-too-many-values"
  }
  return undefined
}

const utf8 = new TextDecoder("utf-8", { fatal: true })

/** The body as a JSON value, refused before parsing when it passes a bound; invalid UTF-8 is malformed too. */
export const parseBounded = (bytes: Uint8Array, bounds: JsonBounds = JSON_BOUNDS): Either.Either<unknown, JsonProblem> => {
  const exceeded = exceededBound(bytes, bounds)
  if (exceeded !== undefined) return Either.left(exceeded)
  try {
    return Either.right(JSON.parse(utf8.decode(bytes)))
  } catch {
    return Either.left("json-malformed")
  }
}

/** 422: the body is not JSON, or passes a bound of `JSON_BOUNDS` (`limit` says which value). */
export class JsonBodyRefused extends Schema.TaggedError<JsonBodyRefused>()(
  "JsonBodyRefused",
  {
    reason: Schema.Literal("json-malformed", "json-too-deep", "json-too-many-values"),
    correlationId: CorrelationId,
    limit: Schema.optional(Schema.Number)
  },
  HttpApiSchema.annotations({ status: 422, description: "The body is not JSON, or nests deeper or holds more values than the server reads" })
) {
  static of(problem: JsonProblem, correlationId: CorrelationId, bounds: JsonBounds = JSON_BOUNDS): JsonBodyRefused {
    const limit = problem === "json-too-deep" ? bounds.maxDepth : problem === "json-too-many-values" ? bounds.maxValues : undefined
    return new JsonBodyRefused({ reason: problem, correlationId, ...(limit === undefined ? {} : { limit }) })
  }

  // Answered the same wherever it surfaces, also from an API that does not declare it.
  [HttpServerRespondable.symbol]() {
    return HttpServerResponse.json(Schema.encodeSync(JsonBodyRefused)(this), { status: 422 })
  }
}
