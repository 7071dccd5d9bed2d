import { HttpIncomingMessage, type HttpServerError, HttpServerRequest } from "@effect/platform"
import { type CorrelationId, JsonBodyRefused, parseBounded } from "@delivery/core"
import { Effect, Either, Inspectable } from "effect"

// What the edge checks and changes on a request before any route sees it. Everything here is a bounded
// amount of work on the request line and headers; the body is only ever counted as it streams.

/** Path and query, in characters: longer request targets are refused with 414 before routing. */
export const MAX_TARGET_LENGTH = 2048

const SLASH = 0x2f
const PERCENT = 0x25
const SEMICOLON = 0x3b

/** Where the path starts in a URL as Bun gives it: absolute, or origin-form for an HTTP/1.0 request without Host. */
const pathStart = (url: string) => (url.charCodeAt(0) === SLASH ? 0 : url.indexOf("/", url.indexOf("//") + 2))

/** The path without the query, for log lines. */
export const pathOf = (url: string) => {
  const start = pathStart(url)
  if (start < 0) return "/"
  const query = url.indexOf("?", start)
  return url.slice(start, query < 0 ? url.length : query)
}

const hexValue = (code: number) =>
  code >= 0x30 && code <= 0x39 ? code - 0x30 : code >= 0x41 && code <= 0x46 ? code - 0x37 : code >= 0x61 && code <= 0x66 ? code - 0x57 : -1

// Escapes the router would decode into something that changes how the path splits or is decoded again:
// `/`, `\`, `;`, `%`, and control characters.
const ambiguousByte = (byte: number) => byte === SLASH || byte === 0x5c || byte === SEMICOLON || byte === PERCENT || byte < 0x20 || byte === 0x7f

/**
 * Paths the router would read differently from a client or a proxy in front: `;` (the router ends a final
 * parameter there and acts on the prefix), ambiguous or malformed escapes, and empty segments (`//`, a trailing
 * `/`). Dot segments and `\` never get here: Bun resolves them before any code runs. Allocation-free.
 */
export const targetProblem = (url: string): "path-invalid" | "uri-too-long" | undefined => {
  const start = pathStart(url)
  if (start < 0) return undefined
  if (url.length - start > MAX_TARGET_LENGTH) return "uri-too-long"
  const query = url.indexOf("?", start)
  const end = query < 0 ? url.length : query
  if (end - start === 1) return undefined
  let previous = 0
  for (let i = start; i < end; i++) {
    const code = url.charCodeAt(i)
    if (code === SEMICOLON || (code === SLASH && previous === SLASH)) return "path-invalid"
    if (code === PERCENT) {
      const high = hexValue(url.charCodeAt(i + 1))
      const low = hexValue(url.charCodeAt(i + 2))
      if (high < 0 || low < 0 || i + 2 >= end || ambiguousByte(high * 16 + low)) return "path-invalid"
      i += 2
    }
    previous = code
  }
  return previous === SLASH ? "path-invalid" : undefined
}

/** The declared body length, when the request has one (Bun has already refused one it cannot parse). */
export const declaredLength = (request: Request): number | undefined => {
  const declared = request.headers.get("content-length")
  return declared === null ? undefined : Number(declared)
}

/**
 * A request whose undeclared (chunked) body fails once more than `limit` bytes have streamed in, calling
 * `exceeded` first: a declared length is checked before anything is read, this bounds the rest.
 */
export const limitUndeclaredBody = (request: Request, limit: number, exceeded: () => void): Request => {
  // The header first: reading `body` makes Bun build a stream, which a declared body never needs.
  if (request.headers.has("content-length") || request.body === null) return request
  let total = 0
  const body = request.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        total += chunk.byteLength
        if (total <= limit) return controller.enqueue(chunk)
        exceeded()
        controller.error(new RangeError("request body over MAX_REQUEST_BODY_BYTES"))
      }
    })
  )
  // An HTTP/1.0 request without Host has an origin-form URL, which a Request cannot be built from.
  const url = request.url.charCodeAt(0) === SLASH ? `http://localhost${request.url}` : request.url
  return new Request(url, { method: request.method, headers: request.headers, body, duplex: "half" } as RequestInit)
}

/**
 * The request as routes see it: the platform's request, except that the framework's JSON reading (every
 * route that declares a JSON payload) goes through `parseBounded`, so a body past JSON_BOUNDS is refused
 * before it is parsed or decoded, with 422 `JsonBodyRefused` (a defect to the framework, which reads JSON
 * with `orDie`, and answers it through the API's error schema). A class rather than a per-request object
 * with its own prototype, so that every request has the same shape.
 */
export class BoundedJsonRequest extends Inspectable.Class implements HttpServerRequest.HttpServerRequest {
  readonly [HttpServerRequest.TypeId]: HttpServerRequest.TypeId = HttpServerRequest.TypeId
  readonly [HttpIncomingMessage.TypeId]: HttpIncomingMessage.TypeId = HttpIncomingMessage.TypeId

  constructor(readonly request: HttpServerRequest.HttpServerRequest, readonly correlationId: CorrelationId) {
    super()
  }

  get json(): Effect.Effect<unknown, HttpServerError.RequestError> {
    return Effect.flatMap(this.request.arrayBuffer, (buffer) =>
      Either.match(parseBounded(new Uint8Array(buffer)), {
        onLeft: (problem) => Effect.die(JsonBodyRefused.of(problem, this.correlationId)),
        onRight: Effect.succeed
      }))
  }

  modify(options: Parameters<HttpServerRequest.HttpServerRequest["modify"]>[0]) {
    return new BoundedJsonRequest(this.request.modify(options), this.correlationId)
  }

  get source() {
    return this.request.source
  }
  get url() {
    return this.request.url
  }
  get originalUrl() {
    return this.request.originalUrl
  }
  get method() {
    return this.request.method
  }
  get cookies() {
    return this.request.cookies
  }
  get headers() {
    return this.request.headers
  }
  get remoteAddress() {
    return this.request.remoteAddress
  }
  get text() {
    return this.request.text
  }
  get urlParamsBody() {
    return this.request.urlParamsBody
  }
  get arrayBuffer() {
    return this.request.arrayBuffer
  }
  get stream() {
    return this.request.stream
  }
  get multipart() {
    return this.request.multipart
  }
  get multipartStream() {
    return this.request.multipartStream
  }
  get upgrade() {
    return this.request.upgrade
  }
  toJSON() {
    return this.request.toJSON()
  }
}
