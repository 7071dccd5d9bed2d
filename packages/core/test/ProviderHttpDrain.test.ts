import { FetchHttpClient } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { ProviderHttp } from "../src/index.ts"

// The body of a response is read and discarded after the status decided the outcome. These tests use a
// plain node:http server (the loopback provider always answers with a declared length, in one write),
// so a body can be chunked, declared at an exact size, or trickle in.

interface Served {
  readonly url: string
  /** How each response ended on the server: "finished" (fully written and flushed) or "closed" early. */
  readonly endings: Array<"finished" | "closed">
}

const serve = (answer: (res: Http.ServerResponse) => void) =>
  Effect.acquireRelease(
    Effect.async<Served & { readonly server: Http.Server }>((resume) => {
      const endings: Served["endings"] = []
      const server = Http.createServer((req, res) => {
        req.resume()
        req.on("end", () => {
          let finished = false
          res.on("finish", () => {
            finished = true
            endings.push("finished")
          })
          res.on("close", () => {
            if (!finished) endings.push("closed")
          })
          answer(res)
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const { port } = server.address() as AddressInfo
        resume(Effect.succeed({ server, url: `http://127.0.0.1:${port}/send`, endings }))
      })
    }),
    ({ server }) =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )

const requestTo = (url: string, timeout: Duration.DurationInput): ProviderHttp.ProviderRequest => ({
  endpoint: Either.getOrThrow(ProviderHttp.ProviderEndpoint.parse(url)),
  idempotencyKey: "drain-1",
  body: "{}",
  contentType: "application/json",
  timeout
})

// The real fetch, with each response wrapped to record which of its body readers the adapter used. The
// request and the response still cross a real socket.
const recordingReads = () => {
  const reads: Array<string> = []
  const recording: typeof globalThis.fetch = Object.assign(
    (input: Parameters<typeof globalThis.fetch>[0], init?: RequestInit) =>
      globalThis.fetch(input, init).then((response) =>
        new Proxy(response, {
          get: (target, property) => {
            if (property === "arrayBuffer") reads.push("arrayBuffer")
            if (property === "body") reads.push("stream")
            const value = Reflect.get(target, property, target)
            return typeof value === "function" ? value.bind(target) : value
          }
        })),
    { preconnect: globalThis.fetch.preconnect }
  )
  return { fetch: recording, reads }
}

const bytes = (n: number) => "b".repeat(n)

describe("ProviderHttp body drain", () => {
  it.scopedLive("a body with a declared length up to 64 KiB is read in one call; larger or undeclared bodies stream", () =>
    Effect.gen(function*() {
      const cases: Array<[string, (res: Http.ServerResponse) => void, string]> = [
        ["declared 0 bytes", (res) => res.writeHead(200, { "content-length": "0" }).end(), "arrayBuffer"],
        ["declared 10 bytes", (res) => res.writeHead(200, { "content-length": "10" }).end(bytes(10)), "arrayBuffer"],
        [
          "declared 65536 bytes",
          (res) => res.writeHead(200, { "content-length": "65536" }).end(bytes(65536)),
          "arrayBuffer"
        ],
        ["declared 65537 bytes", (res) => res.writeHead(503, { "content-length": "65537" }).end(bytes(65537)), "stream"],
        [
          "declared 1 MiB",
          (res) => res.writeHead(200, { "content-length": String(1 << 20) }).end(bytes(1 << 20)),
          "stream"
        ],
        ["chunked, 10 bytes", (res) => {
          res.writeHead(200)
          res.write(bytes(5))
          res.end(bytes(5))
        }, "stream"]
      ]
      for (const [name, answer, expected] of cases) {
        const served = yield* serve(answer)
        const { fetch, reads } = recordingReads()
        const outcome = yield* ProviderHttp.send(requestTo(served.url, "5 seconds")).pipe(
          Effect.provideService(FetchHttpClient.Fetch, fetch)
        )
        expect(outcome._tag).not.toBe("Ambiguous")
        expect([name, reads]).toEqual([name, [expected]])
      }
    }))

  it.scopedLive("the body drain gets what is left of the timeout: a body still arriving within it is read to its end", () =>
    Effect.gen(function*() {
      const served = yield* serve((res) => {
        res.writeHead(200, { "content-type": "text/plain" })
        res.write("first part, ")
        setTimeout(() => res.end("and the rest"), 300)
      })
      const [elapsed, outcome] = yield* Effect.timed(ProviderHttp.send(requestTo(served.url, "5 seconds")))
      expect(outcome).toEqual(new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 }))
      // The adapter waited for the end of the body rather than giving up on it at once.
      expect(Duration.toMillis(elapsed)).toBeGreaterThanOrEqual(250)
      expect(served.endings).toEqual(["finished"])
    }))

  it.scopedLive("a body cut off mid-way ends the drain at once: the status decides without waiting for the timeout", () =>
    Effect.gen(function*() {
      const served = yield* serve((res) => {
        res.writeHead(200, { "content-length": "100000" })
        res.write(bytes(10), () => res.socket?.destroy())
      })
      const [elapsed, outcome] = yield* Effect.timed(ProviderHttp.send(requestTo(served.url, "10 seconds")))
      expect(outcome).toEqual(new ProviderHttp.Delivered({ code: "provider-2xx", status: 200 }))
      expect(Duration.toMillis(elapsed)).toBeLessThan(5_000)
    }))

  it.scopedLive("a body that never ends cannot hold the send past its timeout, and the status still decides the outcome", () =>
    Effect.gen(function*() {
      const served = yield* serve((res) => {
        res.writeHead(503, { "retry-after": "30" })
        res.write("never finished")
      })
      const [elapsed, outcome] = yield* Effect.timed(ProviderHttp.send(requestTo(served.url, "400 millis")))
      expect(outcome).toEqual(new ProviderHttp.Temporary({ code: "provider-5xx", status: 503, retryAfter: "30" }))
      expect(Duration.toMillis(elapsed)).toBeLessThan(5_000)
    }))
})
