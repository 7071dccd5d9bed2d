// A small delivery receiver (docs/quickstart.md): listens on 127.0.0.1:$RECEIVER_PORT (default 4000), verifies
// every POST with the client's verifier (keys read from the backend's operator route, so a revoked key is
// refused at once) and prints one line per delivery. Answers 204 to a verified delivery and 400 with the
// reason to anything else, so the outbox dead-letters what does not verify instead of retrying it.
import { FetchHttpClient } from "@effect/platform"
import { Config, Effect } from "effect"
import { makeClient } from "../Client.ts"
import { makeVerifier, operatorKeys } from "../Verifier.ts"

const program = Effect.gen(function* () {
  const baseUrl = yield* Config.string("DELIVERY_URL").pipe(Config.withDefault("http://127.0.0.1:3000"))
  const token = yield* Config.redacted("OPERATOR_TOKEN")
  const port = yield* Config.port("RECEIVER_PORT").pipe(Config.withDefault(4000))
  const operator = yield* makeClient({ baseUrl, token })
  const verifier = makeVerifier({ keys: operatorKeys(operator) })

  const answer = (request: Request) =>
    Effect.gen(function* () {
      if (request.method !== "POST") return new Response(null, { status: 405 })
      const body = yield* Effect.promise(() => request.text())
      return yield* verifier.verifyDelivery({ headers: request.headers, body }).pipe(
        Effect.map((delivery) => {
          const { route, metadata, sequence } = delivery.envelope
          console.log(`verified ${delivery.webhookId} ${route.tenant}/${route.project} #${sequence} ${metadata.kind} ${metadata.subject}`)
          return new Response(null, { status: 204 })
        }),
        Effect.catchTag("DeliveryRejected", ({ reason }) =>
          Effect.sync(() => {
            console.log(`rejected ${reason}`)
            return Response.json({ reason }, { status: 400 })
          })),
        // The backend could not be asked for the keys: not the sender's fault, so it retries later.
        Effect.catchAll(() => Effect.succeed(new Response(null, { status: 503, headers: { "retry-after": "5" } })))
      )
    })

  const server = Bun.serve({
    hostname: "127.0.0.1",
    port,
    fetch: (request) => Effect.runPromise(answer(request))
  })
  console.log(`receiver listening on http://127.0.0.1:${server.port}`)
  yield* Effect.addFinalizer(() => Effect.promise(() => server.stop()))
  yield* Effect.never
}).pipe(Effect.scoped, Effect.provide(FetchHttpClient.layer))

Effect.runPromise(program).catch((error) => {
  // Configuration errors name the variable, never its value.
  console.error(`receiver: ${String(error)}`)
  process.exit(2)
})
