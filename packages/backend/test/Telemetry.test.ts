import { expect, layer } from "@effect/vitest"
import { Identity } from "@delivery/identity"
import { backendMain, freePort, LoopbackProvider, OPERATOR_TOKEN, spawnBun, startBackend, TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Effect, Layer } from "effect"
import { createPrivateKey, randomBytes, sign } from "node:crypto"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import { tenantWithCredentials } from "./support/Backend.ts"
import { signingKey } from "./support/Console.ts"
import { call } from "./support/Http.ts"

// Traces and log lines of the real backend process: spans sent over OTLP/HTTP to a loopback collector, found by the
// correlation id a response carried, with nothing of a payload or a credential in them; LOG_FORMAT=json.

interface ExportedSpan {
  readonly name: string
  readonly attributes: Readonly<Record<string, unknown>>
  readonly service: unknown
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly links: ReadonlyArray<string>
}

/** A collector on 127.0.0.1 that accepts OTLP/HTTP JSON on POST /v1/traces and keeps every request body. */
const collector = Effect.acquireRelease(
  Effect.async<{ readonly url: string; readonly bodies: Array<string>; readonly server: Http.Server }>((resume) => {
    const bodies: Array<string> = []
    const server = Http.createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.on("end", () => {
        if (request.method === "POST" && request.url === "/v1/traces") bodies.push(Buffer.concat(chunks).toString("utf8"))
        response.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    server.listen(0, "127.0.0.1", () => resume(Effect.succeed({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies, server })))
  }),
  ({ server }) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
)

const valueOf = (value: Record<string, unknown>) => value.stringValue ?? value.intValue ?? value.boolValue ?? value.doubleValue

const spansOf = (bodies: ReadonlyArray<string>): Array<ExportedSpan> =>
  bodies.flatMap((body) =>
    (JSON.parse(body).resourceSpans as Array<any>).flatMap((resource) => {
      const service = valueOf(resource.resource.attributes.find((attribute: any) => attribute.key === "service.name").value)
      return (resource.scopeSpans as Array<any>).flatMap((scope) =>
        (scope.spans as Array<any>).map((span): ExportedSpan => ({
          name: span.name,
          service,
          spanId: span.spanId,
          parentSpanId: span.parentSpanId || undefined,
          links: (span.links ?? []).map((link: any) => link.spanId),
          attributes: Object.fromEntries((span.attributes ?? []).map((attribute: any) => [attribute.key, valueOf(attribute.value)]))
        }))
      )
    })
  )

/** RFC 8785 for the plain values of this envelope, written here so the check does not lean on the product's own. */
const canonicalize = (value: unknown): string =>
  typeof value === "object" && value !== null
    ? `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonicalize((value as any)[key])}`).join(",")}}`
    : JSON.stringify(value)

const TENANT = `traces-${randomBytes(3).toString("hex")}`
const PAYLOAD_MARKER = `payload-${randomBytes(6).toString("hex")}`
const key = signingKey()
const privateKey = createPrivateKey({
  key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), Buffer.from(key.seed, "base64url")]),
  format: "der",
  type: "pkcs8"
})

const SuiteLayer = Layer.mergeAll(Identity.Default, LoopbackProvider.Default).pipe(Layer.provideMerge(TestDatabaseLive))

layer(SuiteLayer, { excludeTestServices: true })("traces and JSON logs of a real backend process", (it) => {
  it.scoped(
    "with OTEL_EXPORTER_OTLP_ENDPOINT the collector gets the spans of an ingest and of a delivery (server, inbox, enqueue, claim, delivery, provider call; the provider call nested in the delivery, the delivery in the worker's tick), each request's carrying the response's x-correlation-id; no span attribute holds the payload, a signature or a token; with LOG_FORMAT=json every output line is a JSON object with message and logLevel",
    () =>
      Effect.gen(function* () {
        const otlp = yield* collector
        const receiver = yield* LoopbackProvider
        yield* receiver.reset
        const { backend, port } = yield* startBackend({
          SIGNER_KEYS: `${TENANT}:k1:${key.seed}`,
          OUTBOX_POLL_INTERVAL: "100 millis",
          LOG_FORMAT: "json",
          OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url
        })
        const tenant = yield* tenantWithCredentials(TENANT)
        const registered = yield* call(port, "POST", `/operator/tenants/${TENANT}/signing-keys`, { token: OPERATOR_TOKEN, body: { keyId: "k1", publicKey: key.publicKey } })
        expect(registered.status).toBe(201)
        const target = yield* call(port, "PUT", `/operator/outbox/targets/${TENANT}/web`, { token: OPERATOR_TOKEN, body: { endpoint: receiver.urlFor("/hooks/traces") } })
        expect(target.status).toBe(200)

        // An ingest: a signed envelope from the tenant's device.
        const unsigned = {
          type: "controlplane/v1",
          route: { tenant: TENANT, project: "web", producer: "d-1" },
          eventId: "evt-traces-0000000001",
          idempotencyKey: "traces:1",
          sequence: 1,
          keyId: "k1",
          createdAt: "2026-12-03T12:00:00.000Z",
          schemaVersion: 1,
          metadata: { kind: "task.proposed", subject: PAYLOAD_MARKER, attributes: {} }
        }
        const signature = sign(null, Buffer.from(canonicalize(unsigned)), privateKey).toString("base64url")
        const ingest = yield* call(port, "POST", "/controlplane/v1/envelopes", { token: tenant.device, body: { ...unsigned, signature } })
        expect(ingest.status).toBe(201)
        const ingestId = ingest.headers["x-correlation-id"]!

        // A delivery: an enqueued message reaches the receiver.
        const { keyId: _, ...toEnqueue } = unsigned
        const enqueued = yield* call(port, "POST", "/api/outbox/messages", {
          token: tenant.apiKey,
          body: { envelope: { ...toEnqueue, route: { tenant: TENANT, project: "web", producer: "scheduler" } } }
        })
        expect(enqueued.status).toBe(201)
        const enqueueId = enqueued.headers["x-correlation-id"]!
        yield* receiver.awaitRequests(1).pipe(Effect.timeout("30 seconds"), Effect.orDie)

        // Spans are batched; stopping flushes what is buffered.
        yield* backend.signal("SIGTERM")
        expect(yield* backend.exitCode()).toBe(0)
        const spans = spansOf(otlp.bodies)
        const named = (name: string) => spans.filter((span) => span.name === name)

        expect(new Set(spans.map((span) => span.service))).toEqual(new Set(["delivery-backend"]))
        const ingestServer = named("POST /controlplane/v1/envelopes")
        expect(ingestServer.map((span) => span.attributes)).toEqual([{
          "correlation.id": ingestId,
          "http.request.method": "POST",
          "http.route": "/controlplane/v1/envelopes",
          "http.response.status_code": 201
        }])
        expect(named("EnvelopeInbox.receive").map((span) => span.attributes["correlation.id"])).toEqual([ingestId])
        // The ingest statement runs for every envelope of its batch (group commit): a root span linked to each one's.
        const [receiveSpan] = named("EnvelopeInbox.receive")
        expect(named("InboxRepo.ingest").map((span) => [span.parentSpanId, span.links, span.attributes["batch.size"]]))
          .toEqual([[undefined, [receiveSpan!.spanId], 1]])
        expect(named("POST /api/outbox/messages").map((span) => span.attributes["correlation.id"])).toEqual([enqueueId])
        expect(named("Outbox.enqueue").map((span) => span.attributes["correlation.id"])).toEqual([enqueueId])
        // The worker's spans belong to no request.
        expect(named("OutboxDelivery.claim").some((span) => span.attributes["delivery.claimed"] === 1)).toBe(true)
        expect(named("OutboxDelivery.deliver").map((span) => span.attributes)).toEqual([{ "delivery.family": "outbox" }])
        expect(named("ProviderHttp.send").map((span) => span.attributes["provider.outcome"])).toEqual(["provider-2xx"])
        // A delivery runs in a context of its own (only the parent span and the fetch settings): its spans still nest,
        // the send in the delivery, the delivery in the worker's tick.
        const parentOf = (span: ExportedSpan) => spans.find((candidate) => candidate.spanId === span.parentSpanId)?.name
        expect(named("ProviderHttp.send").map(parentOf)).toEqual(["OutboxDelivery.deliver"])
        expect(named("OutboxDelivery.deliver").map(parentOf)).toEqual(["OutboxDelivery.tick"])

        const exported = otlp.bodies.join("\n")
        for (const secret of [PAYLOAD_MARKER, signature, tenant.device, tenant.apiKey, OPERATOR_TOKEN, key.seed, TENANT, "/hooks/traces"]) {
          expect(exported).not.toContain(secret)
        }

        const lines = (yield* backend.output).split("\n").filter((line) => line.trim() !== "")
        expect(lines.length).toBeGreaterThan(10)
        for (const line of lines) {
          const entry = JSON.parse(line)
          expect(typeof entry.message === "string" || Array.isArray(entry.message)).toBe(true)
          expect(entry.logLevel).toMatch(/^(TRACE|DEBUG|INFO|WARN|ERROR|FATAL)$/)
        }
        expect(lines.some((line) => JSON.parse(line).message === "shutdown: HTTP server closed")).toBe(true)
      })
  )

  it.scoped("an invalid LOG_FORMAT stops start-up naming it: exit 1, nothing listening", () =>
    Effect.gen(function* () {
      const db = yield* TestDatabase
      const port = yield* freePort
      const backend = yield* spawnBun(backendMain, {
        DATABASE_URL: db.url,
        PORT: String(port),
        PASSWORD_RESET_DELIVERY: "disabled",
        RECEIPT_DELIVERY: "disabled",
        LOG_FORMAT: "yaml"
      })
      expect(yield* backend.exitCode()).toBe(1)
      const output = yield* backend.output
      expect(output).toContain("(1 problem: LOG_FORMAT)")
      expect(output).toContain("LOG_FORMAT: Expected one of pretty, logfmt, json")
      expect(output).not.toContain("listening on")
    }))
})
