import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { LoopbackProvider, LoopbackReply, type LoopbackRespondOptions, makeLoopbackProvider } from "@delivery/testing"
import { describe, expect, it, layer } from "@effect/vitest"
import { Cause, ConfigProvider, Effect, Either, Exit, Fiber, Layer, Ref, Schema } from "effect"
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
    const decoded = Schema.decodeEither(ProviderHttp.ProviderEndpointFromString)("https://user:hunter2@example.com/")
    expect(Either.isLeft(decoded) && String(decoded.left)).toContain("endpoint-has-credentials")
    expect(Either.isLeft(decoded) && String(decoded.left)).not.toContain("hunter2")
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
