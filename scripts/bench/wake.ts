import { createDatabase, freePort, killStacks, OPERATOR_TOKEN, PgCluster, spawnBunScript, startCluster } from "@delivery/testing"
import { encodeBase64Url, privateKeyFromSeed, rawPublicKey } from "@delivery/signer"
import { Effect } from "effect"
import { createPublicKey, randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs"
import { connect, type Socket } from "node:net"
import { cpus, loadavg, tmpdir } from "node:os"
import { join } from "node:path"
import { processCpu, selfCpu } from "./cpu.ts"

// `bun run bench wake [--json]`: spec 001's wake proxy (ROLE=cloud through `bun run start`) in front of one real
// tenant stack that the cloud's local compute provider starts and stops, on one throwaway cluster (a database for
// the cloud, one for the stack). In this order, so that no successful API-key request holds the tenant's API
// activity (which would block the next sleep) before the last sleep:
//
// 1. cold wake to first byte: the stack asleep, one `GET /api/does-not-exist` with a projected key through the
//    proxy on a fresh connection; the clock runs from the request's write to the first byte of the answer (404:
//    the tenant answered, no activity held). Three times, slept again between them; the median is reported.
// 2. 100 concurrent requests to the sleeping stack: `GET /api/whoami` with the key, each on its own connection and
//    with its own X-Forwarded-For (the cloud trusts 127.0.0.1 as its proxy hop), so only the per-stack waiting bound
//    (8 by default) refuses; provider starts are counted from the stack's log before and after.
// 3. added latency for the awake stack: `GET /api/whoami` with the key, 10 keep-alive client loops each sending
//    one request after another, directly to the stack's port and through the proxy (Host = the stack's host), in
//    alternating rounds (direct/proxy, then proxy/direct, ...) so machine noise hits both sides alike.
//
// The clients are raw HTTP/1.1 on node:net, so nothing is pooled, retried or hidden and the load generator's own
// cost per request is small and the same for both sides.

export interface WakeBenchOptions {
  readonly log: (line: string) => void
}

export interface WakeBenchResult {
  readonly bench: "wake"
  readonly added_p50_ms: number
  readonly added_p99_ms: number
  readonly direct_p50_ms: number
  readonly direct_p99_ms: number
  readonly proxy_p50_ms: number
  readonly proxy_p99_ms: number
  readonly cold_first_byte_ms: number
  readonly starts_for_100: number
  readonly answered_200_of_100: number
  readonly refusals_of_100: Readonly<Record<string, number>>
}

const CLIENTS = 10
const WARMUP = 500
const MEASURED = 4_000
const ROUNDS = 20
const C1_REQUESTS = 1_000
const C1_ROUNDS = 5
const COLD_WAKES = 3
const BURST = 100
const NO_ROUTE = "/api/does-not-exist"

const ms3 = (n: number) => Math.round(n * 1000) / 1000
const fixed = (n: number, digits = 3) => n.toFixed(digits)

// ---------------------------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client on raw sockets: Content-Length and chunked bodies, keep-alive or one-shot.

interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

/** Parses one whole response at the start of `buffer`; undefined until all of it arrived. */
const parseResponse = (buffer: Buffer): { readonly answer: Answer; readonly length: number } | undefined => {
  const end = buffer.indexOf("\r\n\r\n")
  if (end < 0) return undefined
  const [statusLine, ...lines] = buffer.subarray(0, end).toString("latin1").split("\r\n")
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(":")
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? "")?.[1] ?? 0)
  let at = end + 4
  if (/chunked/i.test(headers["transfer-encoding"] ?? "")) {
    const chunks: Array<Buffer> = []
    while (true) {
      const lineEnd = buffer.indexOf("\r\n", at)
      if (lineEnd < 0) return undefined
      const size = parseInt(buffer.subarray(at, lineEnd).toString("latin1"), 16)
      if (Number.isNaN(size)) throw new Error("bad chunk size")
      at = lineEnd + 2
      if (size === 0) {
        // No trailers are expected: the last chunk is followed by one empty line.
        if (buffer.length < at + 2) return undefined
        return { answer: { status, headers, body: Buffer.concat(chunks).toString("utf8") }, length: at + 2 }
      }
      if (buffer.length < at + size + 2) return undefined
      chunks.push(buffer.subarray(at, at + size))
      at += size + 2
    }
  }
  const length = Number(headers["content-length"] ?? 0)
  if (buffer.length < at + length) return undefined
  return { answer: { status, headers, body: buffer.subarray(at, at + length).toString("utf8") }, length: at + length }
}

const requestText = (path: string, headers: Readonly<Record<string, string>>) =>
  `GET ${path} HTTP/1.1\r\n${Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join("")}\r\n`

/** One request on a fresh connection (`Connection: close`): the answer, and when its first byte came (ms after the write). */
const oneShot = (port: number, path: string, headers: Readonly<Record<string, string>>) =>
  new Promise<Answer & { readonly firstByteMs: number; readonly totalMs: number }>((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port })
    socket.setNoDelay(true)
    let buffer = Buffer.alloc(0)
    let sent = 0
    let firstByte = 0
    let done = false
    const finish = (error?: Error) => {
      if (done) return
      done = true
      socket.destroy()
      if (error !== undefined) return reject(error)
      const parsed = parseResponse(buffer)
      if (parsed === undefined) return reject(new Error(`incomplete answer from port ${port}: ${buffer.toString("latin1").slice(0, 200)}`))
      resolve({ ...parsed.answer, firstByteMs: firstByte - sent, totalMs: performance.now() - sent })
    }
    socket.once("connect", () => {
      sent = performance.now()
      socket.write(requestText(path, { connection: "close", ...headers }))
    })
    socket.on("data", (chunk: Buffer) => {
      if (firstByte === 0) firstByte = performance.now()
      buffer = Buffer.concat([buffer, chunk])
      if (parseResponse(buffer) !== undefined) finish()
    })
    socket.once("error", (error) => finish(error))
    socket.once("close", () => finish())
  })

/** One keep-alive connection sending requests one after another; reconnects when the server closes it. */
class KeepAlive {
  private socket: Socket | undefined
  private buffer: Buffer = Buffer.alloc(0)
  private pending: { resolve: (answer: Answer) => void; reject: (error: Error) => void } | undefined
  reconnects = 0

  constructor(private readonly port: number, private readonly text: string) {}

  private open() {
    return new Promise<Socket>((resolve, reject) => {
      const socket = connect({ host: "127.0.0.1", port: this.port })
      socket.setNoDelay(true)
      socket.once("connect", () => resolve(socket))
      socket.once("error", reject)
      socket.on("data", (chunk: Buffer) => {
        this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk])
        const parsed = parseResponse(this.buffer)
        if (parsed === undefined) return
        this.buffer = this.buffer.subarray(parsed.length)
        if (parsed.answer.headers.connection === "close") this.drop()
        const waiting = this.pending
        this.pending = undefined
        waiting?.resolve(parsed.answer)
      })
      socket.once("close", () => {
        if (this.socket === socket) this.drop()
        const waiting = this.pending
        this.pending = undefined
        waiting?.reject(new Error(`connection to port ${this.port} closed mid-request`))
      })
    })
  }

  private drop() {
    this.socket?.destroy()
    this.socket = undefined
    this.buffer = Buffer.alloc(0)
  }

  /** Sends the request and resolves with its answer and its latency in ms (connecting, when needed, is not timed). */
  async send(): Promise<{ readonly answer: Answer; readonly ms: number }> {
    if (this.socket === undefined) {
      this.socket = await this.open()
      this.reconnects++
    }
    const socket = this.socket
    const started = performance.now()
    const answer = await new Promise<Answer>((resolve, reject) => {
      this.pending = { resolve, reject }
      socket.write(this.text)
    })
    return { answer, ms: performance.now() - started }
  }

  close() {
    this.drop()
  }
}

/** `count` requests over the clients (each sending one after another); every answer must be 200. Latencies in ms. */
const runLoad = async (clients: ReadonlyArray<KeepAlive>, count: number) => {
  const perClient = Math.ceil(count / clients.length)
  const latencies: Array<number> = []
  const started = performance.now()
  await Promise.all(clients.map(async (client) => {
    for (let i = 0; i < perClient; i++) {
      const { answer, ms } = await client.send()
      if (answer.status !== 200) throw new Error(`unexpected status ${answer.status}: ${answer.body.slice(0, 300)}`)
      latencies.push(ms)
    }
  }))
  return { latencies, wall: (performance.now() - started) / 1000 }
}

/** Nearest-rank percentile of sorted values. */
const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!

const median = (values: ReadonlyArray<number>) => percentile([...values].sort((a, b) => a - b), 50)

// ---------------------------------------------------------------------------------------------------------------
// The cloud and its stack (after packages/backend/test/support/Cloud.ts, without vitest).

const json = async (port: number, method: string, path: string, body?: unknown) => {
  const response = await fetch(`http://127.0.0.1:${port}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${OPERATOR_TOKEN}`,
      connection: "close",
      ...(body === undefined ? {} : { "content-type": "application/json" })
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  const text = await response.text()
  let parsed: any
  try {
    parsed = text === "" ? undefined : JSON.parse(text)
  } catch {
    parsed = undefined
  }
  return { status: response.status, text, json: parsed }
}

const expectStatus = (what: string, answer: { readonly status: number; readonly text: string }, status: number) =>
  answer.status === status ? Effect.void : Effect.dieMessage(`${what}: expected ${status}, got ${answer.status} ${answer.text.slice(0, 500)}`)

const call = (port: number, method: string, path: string, body?: unknown) => Effect.promise(() => json(port, method, path, body))

/** The pids of `root` and every process below it (`bun run start` runs the cloud in a child process). */
const processTree = (root: number): Array<number> => {
  const parents = new Map<number, number>()
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue
    try {
      const text = readFileSync(`/proc/${name}/stat`, "utf8")
      parents.set(Number(name), Number(text.slice(text.lastIndexOf(")") + 2).split(" ")[1]))
    } catch {
      // Gone meanwhile.
    }
  }
  const tree = [root]
  for (let i = 0; i < tree.length; i++) for (const [pid, parent] of parents) if (parent === tree[i]) tree.push(pid)
  return tree
}

/** CPU of `root`'s tree without the subtrees of `excluded` (the tenant is a child of the cloud process). */
const treeCpu = (root: number, excluded: ReadonlyArray<number>) => {
  const skip = new Set(excluded.flatMap(processTree))
  return processTree(root).filter((pid) => !skip.has(pid)).reduce((sum, pid) => sum + processCpu(pid), 0)
}

/**
 * Where a cold wake's time went, from the tenant's own log (its pretty logger stamps local wall-clock time to the
 * millisecond): request sent → the tenant's first log line (process spawned, bun up, the backend's modules loaded)
 * → its "listening on" line (database, workers, listener) → the first byte of the answer at the client.
 */
const startTimeline = (log: string, sentWall: number) => {
  const at = (line: string | undefined) => {
    const match = /^\[(\d\d):(\d\d):(\d\d)\.(\d{3})\]/.exec(line ?? "")
    if (match === null) return undefined
    const date = new Date(sentWall)
    date.setHours(Number(match[1]), Number(match[2]), Number(match[3]), Number(match[4]))
    return date.getTime()
  }
  const lines = log.split("\n")
  let startIndex = lines.length - 1
  while (startIndex > 0 && !lines[startIndex]!.includes("starting delivery backend")) startIndex--
  const listening = lines.slice(startIndex).find((line) => line.includes("listening on http:"))
  const started = at(lines[startIndex])
  const listened = at(listening)
  return started === undefined || listened === undefined ? undefined : { firstLine: started - sentWall, listening: listened - sentWall }
}

export const runWakeBench = (options: WakeBenchOptions): Effect.Effect<WakeBenchResult, unknown> =>
  Effect.scoped(Effect.gen(function* () {
    const { log } = options
    const cluster = yield* startCluster()
    const cloudDb = yield* createDatabase.pipe(Effect.provideService(PgCluster, cluster))
    const stackDb = yield* createDatabase.pipe(Effect.provideService(PgCluster, cluster))
    // Registered after the databases: closed first, so no tenant outlives the bench or holds its database.
    const runDir = mkdtempSync(join(tmpdir(), "bench-wake-"))
    yield* Effect.addFinalizer(() => killStacks(runDir, { remove: true }))

    const stack = `stack-${randomBytes(3).toString("hex")}`
    const host = `${stack}.tenants.test`
    const stackPort = yield* freePort
    const reportSeed = randomBytes(32)
    const reportKey = `report-${stack}:${encodeBase64Url(rawPublicKey(createPublicKey(privateKeyFromSeed(reportSeed))))}`
    const cloudSeed = randomBytes(32)
    const cloudPublicKey = encodeBase64Url(rawPublicKey(createPublicKey(privateKeyFromSeed(cloudSeed))))
    const tenantEnv = {
      DATABASE_URL: stackDb.url,
      OPERATOR_TOKEN,
      IDENTITY_PEER_LIMIT: "1000000",
      PASSWORD_RESET_DELIVERY: "disabled",
      RECEIPT_DELIVERY: "disabled",
      TEAM_APPLICATION_DELIVERY: "disabled",
      IDLE_WAKE_STACK: stack,
      IDLE_WAKE_AUDIENCE: `tenant:${stack}`,
      IDLE_WAKE_CLOUD_KEYS: `cloud-1:${cloudPublicKey}`,
      IDLE_WAKE_REPORT_KEY: `report-${stack}:${reportSeed.toString("base64url")}`
    }
    const port = yield* freePort
    const proxyPort = yield* freePort
    const cloud = yield* spawnBunScript("start", {
      ROLE: "cloud",
      DATABASE_URL: cloudDb.url,
      PORT: String(port),
      OPERATOR_TOKEN,
      IDENTITY_PEER_LIMIT: "1000000",
      IDLE_WAKE_CLOUD_SIGNING_KEY: `cloud-1:${cloudSeed.toString("base64url")}`,
      IDLE_WAKE_PROXY_PORT: String(proxyPort),
      IDLE_WAKE_LOCAL_STACKS: JSON.stringify({ [stack]: { port: stackPort, env: tenantEnv } }),
      IDLE_WAKE_LOCAL_RUN_DIR: runDir,
      // BENCH_TENANT_ENTRY compares another tenant entry (e.g. packages/backend/src/main.ts, the sources) with the default.
      ...(process.env.BENCH_TENANT_ENTRY === undefined ? {} : { IDLE_WAKE_LOCAL_ENTRY: process.env.BENCH_TENANT_ENTRY }),
      IDLE_WAKE_SLEEP_HOLD: "30 seconds",
      // Each request names its own source, so the per-source bounds never decide what is measured here.
      TRUSTED_PROXY_HOPS: "1"
    })
    yield* cloud.waitForOutput(/wake proxy listening on http:/, "60 seconds")
    log(`load average at start ${loadavg().map((n) => n.toFixed(2)).join(" ")} (${cpus().length} cores; other work on the machine shows in every figure)`)
    log(`cluster on port ${cluster.port}; cloud (bun run start, ROLE=cloud) operator port ${port}, wake proxy port ${proxyPort}`)

    const startsOf = () => {
      const file = join(runDir, `${stack}.log`)
      return existsSync(file) ? (readFileSync(file, "utf8").match(/listening on http:/g) ?? []).length : 0
    }
    const stackPid = () => {
      const file = join(runDir, `${stack}.pid`)
      return existsSync(file) ? Number(readFileSync(file, "utf8").split("\n")[0]) : undefined
    }
    const stateOf = Effect.map(call(port, "GET", `/operator/cloud/stacks/${stack}`), (answer) => answer.json?.state as string)
    const sleep = Effect.gen(function* () {
      const started = performance.now()
      const slept = yield* call(port, "POST", `/operator/cloud/stacks/${stack}/sleep`)
      if (slept.json?.outcome !== "asleep") return yield* Effect.dieMessage(`sleep: ${slept.status} ${slept.text.slice(0, 500)}`)
      return (performance.now() - started) / 1000
    })

    // Registration starts the stack's compute; the tenant, account and key go through the stack's own operator routes.
    const registeredAt = performance.now()
    yield* expectStatus("register", yield* call(port, "POST", "/operator/cloud/stacks", {
      stack,
      audience: `tenant:${stack}`,
      reportKey,
      profiles: ["tenant-api-http-v2"]
    }), 201)
    yield* expectStatus("host", yield* call(port, "POST", `/operator/cloud/stacks/${stack}/hosts`, { host }), 201)
    log(`stack ${stack} registered and started in ${fixed((performance.now() - registeredAt) / 1000, 2)} s (tenant backend on port ${stackPort}, host ${host})`)
    const tenant = `t-${randomBytes(4).toString("hex")}`
    yield* expectStatus("tenant", yield* call(stackPort, "POST", "/operator/tenants", { id: tenant }), 201)
    const account = yield* call(stackPort, "POST", `/operator/tenants/${tenant}/accounts`, { email: `ops@${tenant}.example` })
    yield* expectStatus("account", account, 201)
    const key = yield* call(stackPort, "POST", `/operator/tenants/${tenant}/api-keys`, {
      account: account.json.account.id,
      kind: "agent",
      name: "bench",
      permissions: ["receipts:write"]
    })
    yield* expectStatus("api key", key, 201)
    const token = key.json.token as string
    const viaProxy = (path: string, source: string) =>
      Effect.promise(() => oneShot(proxyPort, path, { host, authorization: `Bearer ${token}`, "x-forwarded-for": source }))

    // 1. Cold wakes: each from a source of its own (a source may cause 3 wakes per 10 minutes).
    const coldFirstBytes: Array<number> = []
    for (let i = 0; i < COLD_WAKES; i++) {
      const sleptIn = yield* sleep
      const before = startsOf()
      const sentWall = Date.now()
      const answer = yield* viaProxy(NO_ROUTE, `198.51.100.${i + 1}`)
      if (answer.status !== 404 || answer.body.includes("WakeRefused")) {
        return yield* Effect.dieMessage(`cold wake ${i + 1}: ${answer.status} ${answer.body.slice(0, 500)}\n${yield* cloud.output}`)
      }
      const starts = startsOf() - before
      coldFirstBytes.push(answer.firstByteMs)
      const timeline = startTimeline(readFileSync(join(runDir, `${stack}.log`), "utf8"), sentWall)
      log(`cold wake ${i + 1}: first byte ${fixed(answer.firstByteMs, 1)} ms, whole answer ${fixed(answer.totalMs, 1)} ms ` +
        `(${answer.status}; provider starts ${starts}; the sleep before it took ${fixed(sleptIn, 2)} s)` +
        (timeline === undefined ? "" : `; tenant's first log line after ~${timeline.firstLine} ms, listening after ~${timeline.listening} ms, ` +
          `so ~${Math.round(answer.firstByteMs - timeline.listening)} ms from listening to first byte`))
    }
    const cold_first_byte_ms = ms3(median(coldFirstBytes))

    // 2. 100 requests at once to the sleeping stack, each from its own source.
    yield* sleep
    const startsBefore = startsOf()
    const burstStarted = performance.now()
    const burst = yield* Effect.promise(() =>
      Promise.all(Array.from({ length: BURST }, (_, i) =>
        oneShot(proxyPort, "/api/whoami", { host, authorization: `Bearer ${token}`, "x-forwarded-for": `203.0.113.${i + 1}` }))))
    const burstWall = performance.now() - burstStarted
    const starts_for_100 = startsOf() - startsBefore
    let answered_200_of_100 = 0
    const refusals_of_100: Record<string, number> = {}
    const statuses: Record<string, number> = {}
    for (const answer of burst) {
      statuses[answer.status] = (statuses[answer.status] ?? 0) + 1
      if (answer.status === 200) {
        answered_200_of_100++
        continue
      }
      let reason = `status-${answer.status}`
      try {
        reason = JSON.parse(answer.body).reason ?? reason
      } catch {
        // Not a refusal body: counted by its status.
      }
      refusals_of_100[reason] = (refusals_of_100[reason] ?? 0) + 1
    }
    const answered = burst.filter((answer) => answer.status === 200).map((answer) => answer.totalMs).sort((a, b) => a - b)
    const refused = burst.filter((answer) => answer.status !== 200).map((answer) => answer.totalMs).sort((a, b) => a - b)
    const retryAfters = [...new Set(burst.filter((answer) => answer.status !== 200).map((answer) => answer.headers["retry-after"] ?? "none"))]
    log(`100 concurrent to the sleeping stack: provider starts ${starts_for_100}; statuses ${JSON.stringify(statuses)}; ` +
      `200: ${answered_200_of_100}, refused by reason ${JSON.stringify(refusals_of_100)} (Retry-After ${retryAfters.join(", ")}); ` +
      `all answered in ${fixed(burstWall, 0)} ms` +
      (answered.length > 0 ? `; 200s after ${fixed(answered[0]!, 0)}..${fixed(answered.at(-1)!, 0)} ms` : "") +
      (refused.length > 0 ? `; refusals after ${fixed(refused[0]!, 1)}..${fixed(refused.at(-1)!, 1)} ms` : ""))
    const state = yield* stateOf
    if (state !== "awake") return yield* Effect.dieMessage(`after the burst the stack is ${state}, not awake`)

    // 3. Added latency, awake stack: direct and through the proxy, alternating rounds on kept-alive connections.
    const whoami = (extra: Readonly<Record<string, string>>) => requestText("/api/whoami", { authorization: `Bearer ${token}`, ...extra })
    const direct = Array.from({ length: CLIENTS }, () => new KeepAlive(stackPort, whoami({ host: `127.0.0.1:${stackPort}` })))
    const proxied = Array.from({ length: CLIENTS }, () => new KeepAlive(proxyPort, whoami({ host })))
    yield* Effect.addFinalizer(() => Effect.sync(() => [...direct, ...proxied].forEach((client) => client.close())))
    yield* Effect.promise(() => runLoad(direct, WARMUP))
    yield* Effect.promise(() => runLoad(proxied, WARMUP))

    const tenantPid = stackPid()
    const cloudCpu = () => treeCpu(cloud.pid, tenantPid === undefined ? [] : [tenantPid])
    const cpu = { direct: { client: 0, cloud: 0, tenant: 0, wall: 0 }, proxy: { client: 0, cloud: 0, tenant: 0, wall: 0 } }
    const samples = { direct: [] as Array<number>, proxy: [] as Array<number> }
    const perRound = MEASURED / ROUNDS
    for (let round = 0; round < ROUNDS; round++) {
      const order: ReadonlyArray<"direct" | "proxy"> = round % 2 === 0 ? ["direct", "proxy"] : ["proxy", "direct"]
      for (const side of order) {
        const client0 = selfCpu(), cloud0 = cloudCpu(), tenant0 = tenantPid === undefined ? 0 : processCpu(tenantPid)
        const run = yield* Effect.promise(() => runLoad(side === "direct" ? direct : proxied, perRound))
        cpu[side].client += selfCpu() - client0
        cpu[side].cloud += cloudCpu() - cloud0
        cpu[side].tenant += (tenantPid === undefined ? 0 : processCpu(tenantPid)) - tenant0
        cpu[side].wall += run.wall
        samples[side].push(...run.latencies)
      }
    }
    const figures = (side: "direct" | "proxy") => {
      const sorted = [...samples[side]].sort((a, b) => a - b)
      return { p50: percentile(sorted, 50), p90: percentile(sorted, 90), p99: percentile(sorted, 99), max: sorted.at(-1)!, n: sorted.length }
    }
    const d = figures("direct")
    const p = figures("proxy")
    const reconnects = [...direct, ...proxied].reduce((sum, client) => sum + client.reconnects, 0) - 2 * CLIENTS
    for (const [label, side, f] of [["direct", "direct", d], ["proxy ", "proxy", p]] as const) {
      const c = cpu[side]
      const us = (seconds: number) => Math.round((seconds * 1e6) / f.n)
      log(`${label} GET /api/whoami, c${CLIENTS}: p50 ${fixed(f.p50)} ms, p90 ${fixed(f.p90)} ms, p99 ${fixed(f.p99)} ms, max ${fixed(f.max)} ms ` +
        `(${f.n} requests in ${ROUNDS} rounds, ${Math.round(f.n / c.wall)} req/s; CPU µs/request: client ${us(c.client)}, ` +
        `cloud ${us(c.cloud)}, tenant ${us(c.tenant)})`)
    }
    // For the reader only (not in the JSON): one client per side, where no queue at the tenant hides the proxy's own cost.
    const c1 = { direct: [] as Array<number>, proxy: [] as Array<number> }
    for (let round = 0; round < C1_ROUNDS; round++) {
      for (const side of round % 2 === 0 ? ["direct", "proxy"] as const : ["proxy", "direct"] as const) {
        const run = yield* Effect.promise(() => runLoad([side === "direct" ? direct[0]! : proxied[0]!], C1_REQUESTS / C1_ROUNDS))
        c1[side].push(...run.latencies)
      }
    }
    const c1d = [...c1.direct].sort((a, b) => a - b)
    const c1p = [...c1.proxy].sort((a, b) => a - b)
    log(`c1 (information only, ${C1_REQUESTS} requests per side): direct p50 ${fixed(percentile(c1d, 50))} ms, p99 ${fixed(percentile(c1d, 99))} ms; ` +
      `proxy p50 ${fixed(percentile(c1p, 50))} ms, p99 ${fixed(percentile(c1p, 99))} ms; added p50 ${fixed(percentile(c1p, 50) - percentile(c1d, 50))} ms, ` +
      `p99 ${fixed(percentile(c1p, 99) - percentile(c1d, 99))} ms`)
    if (reconnects > 0) log(`note: ${reconnects} client connection(s) were closed by a server and opened again`)

    const result: WakeBenchResult = {
      bench: "wake",
      added_p50_ms: ms3(p.p50 - d.p50),
      added_p99_ms: ms3(p.p99 - d.p99),
      direct_p50_ms: ms3(d.p50),
      direct_p99_ms: ms3(d.p99),
      proxy_p50_ms: ms3(p.p50),
      proxy_p99_ms: ms3(p.p99),
      cold_first_byte_ms,
      starts_for_100,
      answered_200_of_100,
      refusals_of_100
    }
    log(`added by the proxy: p50 ${fixed(result.added_p50_ms)} ms (aim ≤ 1), p99 ${fixed(result.added_p99_ms)} ms (aim ≤ 5); ` +
      `cold wake to first byte, median of ${COLD_WAKES}: ${fixed(cold_first_byte_ms, 1)} ms; starts for 100 concurrent: ${starts_for_100} (aim 1)`)

    // Anything the cloud or the tenant logged at warning level or above, for the reader to judge.
    const worrying = (text: string) => text.split("\n").filter((line) => /^\[[\d:.]+\] (WARN|ERROR|FATAL)\b/.test(line))
    const stackLog = join(runDir, `${stack}.log`)
    for (const [who, lines] of [["cloud", worrying(yield* cloud.output)], ["tenant", worrying(existsSync(stackLog) ? readFileSync(stackLog, "utf8") : "")]] as const) {
      log(lines.length === 0
        ? `${who} log: no warnings or errors`
        : `${who} log: ${lines.length} warning/error line(s): ${lines.slice(0, 3).map((line) => line.slice(0, 300)).join(" | ")}`)
    }
    return result
  }))
