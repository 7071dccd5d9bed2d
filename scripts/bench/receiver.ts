// The outbox bench's webhook receiver, in a process of its own so that its CPU is not charged to any
// queue: `bun --no-env-file scripts/bench/receiver.ts`. Listens on a free loopback port (printed as one
// JSON line `{"port":N}` on stdout once listening), answers every POST 200 with an empty body (`Content-Length: 0`) and keep-alive, and counts
// deliveries per `webhook-id`. `GET /count` answers `{"requests":…,"distinct":…,"duplicates":…,"unsigned":…}`
// (`duplicates`: ids received more than once; `unsigned`: POSTs missing a Standard Webhooks header or
// whose Idempotency-Key differs from webhook-id); `POST /reset` clears the counts before a run.

const seen = new Map<string, number>()
let requests = 0
let duplicates = 0
let unsigned = 0

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  // A slow run on a busy machine must not see its idle connections closed under it.
  idleTimeout: 60,
  async fetch(request) {
    const url = new URL(request.url)
    if (request.method === "GET" && url.pathname === "/count") {
      return Response.json({ requests, distinct: seen.size, duplicates, unsigned })
    }
    if (request.method === "POST" && url.pathname === "/reset") {
      seen.clear()
      requests = duplicates = unsigned = 0
      return new Response(null, { status: 204 })
    }
    if (request.method !== "POST") return new Response(null, { status: 405 })
    // Read the body, as a real receiver must before it can verify the signature.
    await request.arrayBuffer()
    requests++
    const id = request.headers.get("webhook-id")
    if (
      id === null || request.headers.get("webhook-timestamp") === null ||
      request.headers.get("webhook-signature")?.startsWith("v1a,") !== true ||
      request.headers.get("idempotency-key") !== id
    ) {
      unsigned++
      return new Response("")
    }
    const before = seen.get(id) ?? 0
    if (before === 1) duplicates++
    seen.set(id, before + 1)
    return new Response("")
  }
})

console.log(JSON.stringify({ port: server.port }))
