import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { LoopbackProvider, LoopbackReply, type LoopbackRespondOptions, makeLoopbackProvider } from "@delivery/testing"
import { describe, expect, it, layer } from "@effect/vitest"
import { Cause, ConfigProvider, Effect, Either, Exit, Fiber, Layer, Option, Ref, Schema } from "effect"
import { ProviderHttp } from "../src/index.ts"

const endpointOf = (url: string) => Either.getOrThrow(ProviderHttp.ProviderEndpoint.parse(url))

describe("ProviderEndpoint", () => {
  const table: Array<[string, string | "ok"]> = [
    ["https://mail.example.com/v1/send", "ok"],
    ["https://mail.example.com:8443/", "ok"],
    ["http://127.0.0.1:8025/send", "ok"],
    ["http://127.9.3.4/send", "ok"],
    ["http://localhost:3000/hook", "ok"],
    ["http://[::1]:3000/hook", "ok"],
    ["http://mail.example.com/send", "endpoint-insecure-scheme"],
    ["http://10.0.0.1/send", "endpoint-insecure-scheme"],
    ["http://127.0.0.1.example.com/send", "endpoint-insecure-scheme"],
    ["http://localhost.example.com/", "endpoint-insecure-scheme"],
    ["ftp://mail.example.com/", "endpoint-unsupported-scheme"],
    ["file:///etc/passwd", "endpoint-unsupported-scheme"],
    ["javascript:alert(1)", "endpoint-unsupported-scheme"],
    ["https://user:secret@mail.example.com/", "endpoint-has-credentials"],
    ["https://user@mail.example.com/", "endpoint-has-credentials"],
    ["https://mail.example.com/send?token=abc", "endpoint-has-query"],
    ["https://mail.example.com/send?", "endpoint-has-query"],
    ["https://mail.example.com/send#frag", "endpoint-has-fragment"],
    ["https://mail.example.com/send#", "endpoint-has-fragment"],
    ["not a url", "endpoint-invalid-url"],
    ["", "endpoint-invalid-url"],
    ["https://", "endpoint-invalid-url"],
    ["mail.example.com/send", "endpoint-invalid-url"]
  ]

  it("'Endpoints cannot contain credentials, query strings, or fragments' (validation table)", () => {
    for (const [input, expected] of table) {
      const result = ProviderHttp.ProviderEndpoint.parse(input)
      const actual = Either.isRight(result) ? "ok" : result.left.code
      expect([input, actual]).toEqual([input, expected])
    }
  })

  it("a refusal never echoes the URL, which may hold credentials", () => {
    const error = Either.getLeft(ProviderHttp.ProviderEndpoint.parse("https://user:hunter2@example.com/"))
    expect(error._tag).toBe("Some")
    if (error._tag === "Some") {
      expect(error.value.message).toBe("endpoint-has-credentials")
      expect(JSON.stringify(error.value)).not.toContain("hunter2")
    }
  })

  it.effect("Config fails loading with the variable named and the code", () =>
    Effect.gen(function*() {
      const load = (value: string) =>
        ProviderHttp.ProviderEndpoint.config("RESET_MAIL_PROVIDER_URL").pipe(
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["RESET_MAIL_PROVIDER_URL", value]])))
        )
      expect(yield* load("https://mail.example.com/send")).toBe("https://mail.example.com/send")
      const error = yield* Effect.flip(load("http://mail.example.com/send"))
      expect(String(error)).toContain("RESET_MAIL_PROVIDER_URL")
      expect(String(error)).toContain("endpoint-insecure-scheme")
      // The refusal's path is the variable, so a start-up report that lists problems by path can name it.
      expect(error._op === "InvalidData" && error.path).toEqual(["RESET_MAIL_PROVIDER_URL"])
      const missing = yield* Effect.flip(
        ProviderHttp.ProviderEndpoint.config("RESET_MAIL_PROVIDER_URL").pipe(
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map()))
        )
      )
      expect(String(missing)).toContain("RESET_MAIL_PROVIDER_URL")
    }))
})

describe("ProviderOutcome", () => {
  it("round-trips through its Schema (what rows store)", () => {
    const outcomes = [
      new ProviderHttp.Delivered({ code: "provider-2xx", status: 202 }),
      new ProviderHttp.Rejected({ code: "provider-redirect", status: 302 }),
      new ProviderHttp.Ambiguous({ code: "provider-timeout" }),
      new ProviderHttp.Temporary({ code: "provider-5xx", status: 503, retryAfter: "30" })
    ]
    for (const outcome of outcomes) {
      const encoded = Schema.encodeSync(ProviderHttp.ProviderOutcome)(outcome)
      expect(Schema.decodeUnknownSync(ProviderHttp.ProviderOutcome)(JSON.parse(JSON.stringify(encoded)))).toEqual(
        outcome
      )
    }
  })

  it("the stored form names each class by its tag, with exactly its own fields", () => {
    // Rows and workers switch on `_tag` and read `code`: both must survive encoding literally.
    const encode = Schema.encodeSync(ProviderHttp.ProviderOutcome)
    expect(encode(new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 }))).toEqual({
      _tag: "Delivered",
      code: "provider-2xx",
      status: 200
    })
    expect(encode(new ProviderHttp.Rejected({ code: "provider-4xx", status: 422, retryAfter: "5" }))).toEqual({
      _tag: "Rejected",
      code: "provider-4xx",
      status: 422,
      retryAfter: "5"
    })
    expect(encode(new ProviderHttp.Ambiguous({ code: "provider-timeout" }))).toEqual({
      _tag: "Ambiguous",
      code: "provider-timeout"
    })
    expect(encode(new ProviderHttp.Ambiguous({ code: "provider-interrupted", status: 200, retryAfter: "1" }))).toEqual(
      { _tag: "Ambiguous", code: "provider-interrupted", status: 200, retryAfter: "1" }
    )
    expect(encode(new ProviderHttp.Temporary({ code: "provider-transport-error" }))).toEqual({
      _tag: "Temporary",
      code: "provider-transport-error"
    })
    expect(new ProviderHttp.Ambiguous({ code: "provider-timeout" }).code).toBe("provider-timeout")
  })

  it("optional status and retryAfter are absent or set, never present as undefined (exact optional fields)", () => {
    const decode = Schema.decodeUnknownEither(ProviderHttp.ProviderOutcome)
    expect(Either.isRight(decode({ _tag: "Ambiguous", code: "provider-timeout" }))).toBe(true)
    expect(Either.isLeft(decode({ _tag: "Ambiguous", code: "provider-timeout", status: undefined }))).toBe(true)
    expect(Either.isLeft(decode({ _tag: "Temporary", code: "provider-5xx", status: 503, retryAfter: undefined })))
      .toBe(true)
    expect(Either.isLeft(decode({ _tag: "Temporary", code: "provider-timeout" }))).toBe(true)
  })

  it("status classes: 2xx delivered, 3xx redirect and 4xx rejected (permanent), 5xx temporary, anything else unexpected (temporary)", () => {
    const table: Array<[number, string, ProviderHttp.ProviderOutcome["code"]]> = [
      [0, "Temporary", "provider-unexpected-status"],
      [100, "Temporary", "provider-unexpected-status"],
      [199, "Temporary", "provider-unexpected-status"],
      [200, "Delivered", "provider-2xx"],
      [299, "Delivered", "provider-2xx"],
      [300, "Rejected", "provider-redirect"],
      [399, "Rejected", "provider-redirect"],
      [400, "Rejected", "provider-4xx"],
      [499, "Rejected", "provider-4xx"],
      [500, "Temporary", "provider-5xx"],
      [599, "Temporary", "provider-5xx"],
      [600, "Temporary", "provider-unexpected-status"],
      [999, "Temporary", "provider-unexpected-status"]
    ]
    for (const [status, tag, code] of table) {
      const outcome = ProviderHttp.classifyStatus(status)
      expect([status, outcome._tag, outcome.code, outcome.status]).toEqual([status, tag, code, status])
    }
    expect(ProviderHttp.classifyStatus(600, { retryAfter: "7" })).toEqual(
      new ProviderHttp.Temporary({ code: "provider-unexpected-status", status: 600, retryAfter: "7" })
    )
  })

  it("every known transport error code is temporary with its kind: refused, never connected (DNS, routing, TLS), dropped", () => {
    const table: Array<[string, ProviderHttp.ProviderOutcome["code"]]> = [
      ["ECONNREFUSED", "provider-connection-refused"],
      ["ConnectionRefused", "provider-connection-refused"],
      ["ENOTFOUND", "provider-connection-failed"],
      ["EAI_AGAIN", "provider-connection-failed"],
      ["ENETUNREACH", "provider-connection-failed"],
      ["EHOSTUNREACH", "provider-connection-failed"],
      ["ENETDOWN", "provider-connection-failed"],
      ["EADDRNOTAVAIL", "provider-connection-failed"],
      ["FailedToOpenSocket", "provider-connection-failed"],
      ["UNABLE_TO_VERIFY_LEAF_SIGNATURE", "provider-connection-failed"],
      ["DEPTH_ZERO_SELF_SIGNED_CERT", "provider-connection-failed"],
      ["SELF_SIGNED_CERT_IN_CHAIN", "provider-connection-failed"],
      ["CERT_HAS_EXPIRED", "provider-connection-failed"],
      ["ERR_TLS_CERT_ALTNAME_INVALID", "provider-connection-failed"],
      ["ECONNRESET", "provider-connection-dropped"],
      ["ConnectionClosed", "provider-connection-dropped"],
      ["EPIPE", "provider-connection-dropped"],
      ["UND_ERR_SOCKET", "provider-connection-dropped"],
      ["ECONNABORTED", "provider-connection-dropped"],
      ["", "provider-transport-error"],
      ["EWHATEVER", "provider-transport-error"]
    ]
    for (const [code, expected] of table) {
      // Bun puts the code on the error itself, undici one level down under `cause`.
      for (const cause of [{ code }, { message: "fetch failed", cause: { code } }]) {
        const outcome = ProviderHttp.classifyTransportError(cause)
        expect([code, outcome._tag, outcome.code]).toEqual([code, "Temporary", expected])
      }
    }
  })

  it("the cause chain is read at most five levels deep, and a null or cyclic cause ends it", () => {
    const nested = (levels: number, code: string): unknown => {
      let cause: unknown = { code }
      for (let i = 0; i < levels; i++) cause = { message: `level ${i}`, cause }
      return cause
    }
    const codeOf = (cause: unknown) => ProviderHttp.classifyTransportError(cause).code
    expect(codeOf(nested(4, "ECONNRESET"))).toBe("provider-connection-dropped")
    expect(codeOf(nested(5, "ECONNRESET"))).toBe("provider-transport-error")
    expect(codeOf({ message: "fetch failed", cause: null })).toBe("provider-transport-error")
    expect(codeOf({ code: 111, cause: { code: "EPIPE" } })).toBe("provider-connection-dropped")
    const cyclic: { message: string; cause?: unknown } = { message: "loop" }
    cyclic.cause = cyclic
    expect(codeOf(cyclic)).toBe("provider-transport-error")
    expect(codeOf(null)).toBe("provider-transport-error")
    expect(codeOf("ECONNRESET")).toBe("provider-transport-error")
  })

  it("classifies transport errors by cause code (Bun and undici shapes)", () => {
    const codeOf = (cause: unknown) => ProviderHttp.classifyTransportError(cause).code
    expect(codeOf({ code: "ECONNREFUSED" })).toBe("provider-connection-refused")
    expect(codeOf({ code: "ConnectionRefused" })).toBe("provider-connection-refused")
    expect(codeOf({ message: "fetch failed", cause: { code: "ECONNREFUSED" } })).toBe("provider-connection-refused")
    expect(codeOf({ code: "ENOTFOUND" })).toBe("provider-connection-failed")
    expect(codeOf({ code: "ECONNRESET" })).toBe("provider-connection-dropped")
    expect(codeOf({ cause: { code: "UND_ERR_SOCKET" } })).toBe("provider-connection-dropped")
    expect(codeOf(new Error("something else"))).toBe("provider-transport-error")
    // Spec 002 "Provider limits": only a timeout is ambiguous; every other transport failure is temporary.
    for (const cause of [{ code: "ECONNRESET" }, { code: "EPIPE" }, { cause: { code: "UND_ERR_SOCKET" } }, { code: "ECONNREFUSED" }, {}]) {
      expect(ProviderHttp.classifyTransportError(cause)._tag).toBe("Temporary")
    }
  })
})

const TestLayer = Layer.mergeAll(LoopbackProvider.Default, FetchHttpClient.layer)

layer(TestLayer, { excludeTestServices: true })("ProviderHttp.send over real loopback sockets", (it) => {
  const sendTo = (path: string, key: string, extra: Partial<ProviderHttp.ProviderRequest> = {}) =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      return yield* ProviderHttp.send({
        endpoint: endpointOf(provider.urlFor(path)),
        idempotencyKey: key,
        body: `{"to":"someone@example.com"}`,
        contentType: "application/json",
        timeout: "2 seconds",
        ...extra
      })
    })

  const scripted = (status: number, options: LoopbackRespondOptions = {}) =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const key = `key-${status}`
      yield* provider.script({ key, times: 1, reply: LoopbackReply.status(status, options) })
      return yield* sendTo("/send", key)
    })

  it.effect("2xx is 'delivered' (provider acknowledgement)", () =>
    Effect.gen(function*() {
      for (const status of [200, 201, 202, 204]) {
        const outcome = yield* scripted(status)
        expect(outcome).toEqual(new ProviderHttp.Delivered({ code: "provider-2xx", status }))
      }
    }))

  it.effect("4xx is 'rejected' (permanent)", () =>
    Effect.gen(function*() {
      for (const status of [400, 401, 404, 409, 422, 429]) {
        const outcome = yield* scripted(status)
        expect(outcome).toEqual(new ProviderHttp.Rejected({ code: "provider-4xx", status }))
      }
    }))

  it.effect("5xx is 'temporary'", () =>
    Effect.gen(function*() {
      for (const status of [500, 502, 503, 504]) {
        const outcome = yield* scripted(status)
        expect(outcome).toEqual(new ProviderHttp.Temporary({ code: "provider-5xx", status }))
      }
    }))

  it.effect("'Delivery does not follow redirects': 3xx is rejected and the target is never requested", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      for (const status of [301, 302, 303, 307, 308]) {
        const outcome = yield* scripted(status, { headers: { location: provider.urlFor("/second") } })
        expect(outcome).toEqual(new ProviderHttp.Rejected({ code: "provider-redirect", status }))
        const requests = yield* provider.requests
        expect(requests.map((r) => r.path)).toEqual(["/send"])
      }
    }))

  it.effect("control: the same fetch client without the adapter's setting does follow a 302", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({
        path: "/send",
        times: 1,
        reply: LoopbackReply.status(302, { headers: { location: provider.urlFor("/second") } })
      })
      const client = yield* HttpClient.HttpClient
      const response = yield* client.execute(HttpClientRequest.post(provider.urlFor("/send")))
      expect(response.status).toBe(200)
      // fetch's default turns the POST into a GET on the redirect target.
      expect((yield* provider.requests).map((r) => `${r.method} ${r.path}`)).toEqual(["POST /send", "GET /second"])
    }))

  it.effect("a hang past the timeout is 'ambiguous' and the request is aborted", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      const outcome = yield* sendTo("/send", "slow", { timeout: "300 millis" })
      expect(outcome).toEqual(new ProviderHttp.Ambiguous({ code: "provider-timeout" }))
      const [aborted] = yield* provider.awaitAborts(1).pipe(Effect.timeout("5 seconds"))
      expect(aborted!.idempotencyKey).toBe("slow")
    }))

  it.effect("spec 002 'timeout as ambiguous, and other transport failures as temporary': a connection dropped after the request was read is 'temporary'", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.drop() })
      const outcome = yield* sendTo("/send", "dropped")
      expect(outcome).toEqual(new ProviderHttp.Temporary({ code: "provider-connection-dropped" }))
      expect((yield* provider.requests).map((r) => r.handling)).toEqual(["dropped"])
    }))

  it.effect("a refused connection (closed port) is 'temporary'", () =>
    Effect.gen(function*() {
      // A provider whose scope already closed leaves a port nobody listens on.
      const closedUrl = yield* Effect.scoped(Effect.map(makeLoopbackProvider, (p) => p.urlFor("/send")))
      const outcome = yield* ProviderHttp.send({
        endpoint: endpointOf(closedUrl),
        idempotencyKey: "refused",
        body: "x",
        contentType: "text/plain",
        timeout: "2 seconds"
      })
      expect(outcome).toEqual(new ProviderHttp.Temporary({ code: "provider-connection-refused" }))
    }))

  it.effect("the Idempotency-Key, body and content type reach the provider exactly", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const key = "effect_01J9Z3K7Q8-x.y~z:1"
      const body = new Uint8Array([0, 1, 2, 250, 255, 10])
      yield* sendTo("/v1/messages", key, {
        body,
        contentType: "application/octet-stream",
        headers: { "Idempotency-Key": "caller-override", "X-Trace": "t1", "content-type": "text/plain" }
      })
      const [request] = yield* provider.requests
      expect(request!.method).toBe("POST")
      expect(request!.path).toBe("/v1/messages")
      expect(request!.idempotencyKey).toBe(key)
      expect(request!.headers["content-type"]).toBe("application/octet-stream")
      expect(request!.headers["x-trace"]).toBe("t1")
      expect(request!.body).toEqual(body)
      // No tracing ids leak to a third party.
      expect(Object.keys(request!.headers).filter((h) => h === "traceparent" || h === "b3")).toEqual([])
      // A retry sends the same key, and the provider answers it without a second delivery.
      yield* sendTo("/v1/messages", key, { body, contentType: "application/octet-stream" })
      expect((yield* provider.requests).map((r) => r.idempotencyKey)).toEqual([key, key])
      expect((yield* provider.deliveries).length).toBe(1)
    }))

  it.effect("Retry-After is surfaced; odd values are dropped rather than stored", () =>
    Effect.gen(function*() {
      expect(yield* scripted(503, { retryAfter: "120" })).toEqual(
        new ProviderHttp.Temporary({ code: "provider-5xx", status: 503, retryAfter: "120" })
      )
      expect(yield* scripted(429, { retryAfter: "Wed, 21 Oct 2015 07:28:00 GMT" })).toEqual(
        new ProviderHttp.Rejected({ code: "provider-4xx", status: 429, retryAfter: "Wed, 21 Oct 2015 07:28:00 GMT" })
      )
      expect(yield* scripted(503, { retryAfter: "9".repeat(200) })).toEqual(
        new ProviderHttp.Temporary({ code: "provider-5xx", status: 503 })
      )
    }))

  it.effect("the response body never appears in the outcome", () =>
    Effect.gen(function*() {
      const secret = "PROVIDER-BODY-with-token-abc123"
      for (const status of [200, 302, 422, 503]) {
        const outcome = yield* scripted(status, {
          body: secret.repeat(1000),
          headers: { "x-provider-debug": secret, location: "/elsewhere" }
        })
        expect(JSON.stringify(outcome)).not.toContain("PROVIDER-BODY")
        expect(Object.keys(outcome).sort()).toEqual(["_tag", "code", "status"])
      }
    }))

  it.effect("interrupting the caller interrupts the send and the provider sees the socket close", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      const recorded = yield* Ref.make<Array<ProviderHttp.ProviderOutcome>>([])
      const fiber = yield* Effect.fork(
        sendTo("/send", "interrupted", { timeout: "30 seconds" }).pipe(
          ProviderHttp.onInterrupted((outcome) => Ref.update(recorded, (xs) => [...xs, outcome]))
        )
      )
      yield* provider.awaitRequests(1)
      const exit = yield* Fiber.interrupt(fiber)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(yield* Ref.get(recorded)).toEqual([new ProviderHttp.Ambiguous({ code: "provider-interrupted" })])
      const [aborted] = yield* provider.awaitAborts(1).pipe(Effect.timeout("5 seconds"))
      expect(aborted!.idempotencyKey).toBe("interrupted")
      expect(yield* provider.deliveries).toEqual([])
    }))

  it.effect("interruptionAsAmbiguous gives a value when the send (not the caller) is interrupted", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.hang() })
      const fiber = yield* Effect.fork(sendTo("/send", "joined", { timeout: "30 seconds" }))
      yield* provider.awaitRequests(1)
      yield* Fiber.interrupt(fiber)
      const outcome = yield* ProviderHttp.interruptionAsAmbiguous(Fiber.join(fiber))
      expect(outcome).toEqual(new ProviderHttp.Ambiguous({ code: "provider-interrupted" }))
      yield* provider.awaitAborts(1).pipe(Effect.timeout("5 seconds"))
    }))

  it.effect("a malformed key is a caller bug (defect), never a transport outcome", () =>
    Effect.gen(function*() {
      for (const key of ["", "has space", "line\r\nbreak", "x".repeat(256)]) {
        const exit = yield* Effect.exit(sendTo("/send", key))
        expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      }
    }))

  const defectMessage = (exit: Exit.Exit<unknown, unknown>) =>
    Exit.isFailure(exit) ? Option.getOrUndefined(Option.map(Cause.dieOption(exit.cause), (d) => (d as Error).message)) : undefined

  it.effect("a malformed Content-Type, header name or header value is a caller bug (defect) that names what is wrong, and nothing is sent", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const cases: Array<[Partial<ProviderHttp.ProviderRequest>, string]> = [
        [{ idempotencyKey: "" }, "invalid Idempotency-Key"],
        [{ idempotencyKey: "k".repeat(256) }, "invalid Idempotency-Key"],
        [{ idempotencyKey: "caf\u00e9" }, "invalid Idempotency-Key"],
        [{ contentType: "text/plain\r\nX-Injected: 1" }, "invalid Content-Type"],
        [{ contentType: "text/plain\u00ff" }, "invalid Content-Type"],
        [{ headers: { "X Trace": "t1" } }, "invalid header"],
        [{ headers: { "X-Trace:": "t1" } }, "invalid header"],
        [{ headers: { "(X-Trace)": "t1" } }, "invalid header"],
        [{ headers: { "X-Ok": "fine", "X-Trace": "t1\r\nX-Injected: 1" } }, "invalid header"],
        [{ headers: { "X-Trace": "\u0000t1" } }, "invalid header"],
        [{ headers: { "X-Trace": "t1\u007f" } }, "invalid header"]
      ]
      for (const [extra, reason] of cases) {
        const exit = yield* Effect.exit(sendTo("/send", "valid-key", extra))
        expect([reason, defectMessage(exit)]).toEqual([reason, `ProviderHttp.send: ${reason}`])
      }
      expect(yield* provider.requests).toEqual([])
    }))

  it.effect("a key of 1 to 255 visible characters, and tabs and spaces in header values, are valid", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      expect(yield* sendTo("/send", "k")).toEqual(new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 }))
      yield* provider.reset
      const key = "k".repeat(254) + "~"
      const outcome = yield* sendTo("/send", key, {
        contentType: "text/plain; charset=utf-8",
        headers: { "X-Signature": "t=1,\tv1=abc def", "x-a!#$%&'*+-.^_`|~09": "" }
      })
      expect(outcome).toEqual(new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 }))
      const [request] = yield* provider.requests
      expect(request!.idempotencyKey).toBe(key)
      expect(request!.headers["content-type"]).toBe("text/plain; charset=utf-8")
    }))

  it.effect("a text body is sent as its UTF-8 bytes, with a matching Content-Length", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const body = `{"subject":"R\u00e9initialiser \u2713","to":"\u65e5\u672c@example.com","emoji":"\u{1F510}"}`
      const bytes = new TextEncoder().encode(body)
      const outcome = yield* ProviderHttp.send({
        endpoint: endpointOf(provider.urlFor("/send")),
        idempotencyKey: "utf8-body",
        body,
        contentType: "application/json; charset=utf-8",
        timeout: "2 seconds"
      })
      expect(outcome._tag).toBe("Delivered")
      // A receiver that trusts the declared length needs bytes and their count, not characters.
      const [request] = yield* provider.requests
      expect(request!.body).toEqual(bytes)
      expect(request!.bodyText).toBe(body)
      expect(request!.headers["content-length"]).toBe(String(bytes.length))
    }))

  it.effect("300 Multiple Choices is a redirect (rejected), and a status outside 2xx-5xx is 'temporary' as unexpected", () =>
    Effect.gen(function*() {
      expect(yield* scripted(300)).toEqual(new ProviderHttp.Rejected({ code: "provider-redirect", status: 300 }))
      expect(yield* scripted(299)).toEqual(new ProviderHttp.Delivered({ code: "provider-2xx", status: 299 }))
      expect(yield* scripted(599)).toEqual(new ProviderHttp.Temporary({ code: "provider-5xx", status: 599 }))
      expect(yield* scripted(600)).toEqual(new ProviderHttp.Temporary({ code: "provider-unexpected-status", status: 600 }))
    }))

  it.effect("the ProviderHttp service sends with the client it was built with", () =>
    Effect.gen(function*() {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const adapter = yield* Effect.provide(ProviderHttp.ProviderHttp, ProviderHttp.ProviderHttp.layerFetch)
      const outcome = yield* adapter.send({
        endpoint: endpointOf(provider.urlFor("/svc")),
        idempotencyKey: "svc-1",
        body: "hello",
        contentType: "text/plain",
        timeout: "2 seconds"
      })
      expect(outcome._tag).toBe("Delivered")
      expect((yield* provider.requests)[0]!.bodyText).toBe("hello")
    }))
})
