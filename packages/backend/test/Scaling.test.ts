import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { DeviceId, Identity, TenantId } from "@delivery/identity"
import { spawnBun, spawnBunScript, startRedis, TestDatabase, freePort, backendMain } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Duration, Effect, Fiber, Layer, Redacted, Ref, Schedule } from "effect"
import { spawnSync } from "node:child_process"
import { readdirSync, readFileSync, readlinkSync } from "node:fs"
import { connect } from "node:net"
import { randomBytes } from "node:crypto"
import { OPERATOR_TOKEN, startBackend, tenantWithCredentials } from "./support/Backend.ts"
import { signingKey } from "./support/Console.ts"
import { envelopeProducer } from "./support/Envelopes.ts"
import { call } from "./support/Http.ts"
import { readScrape } from "./support/Scrape.ts"

// docs/scaling.md through real processes: backends sharing one real Redis (started by the test on a free port), the
// WORKERS supervisor with several processes on one port, and SIGTERM to all of them under load.

const SuiteLayer = Identity.Default.pipe(Layer.provideMerge(TestDatabaseLive))

/** A tenant with a registered signing key and `devices` device credentials (d-1, d-2, ...), each a producer. */
const producers = (baseUrl: string, devices: number) =>
  Effect.gen(function* () {
    const name = `scale-${randomBytes(4).toString("hex")}`
    const tenant = yield* tenantWithCredentials(name)
    const identity = yield* Identity
    const key = signingKey()
    const registered = yield* Effect.promise(() =>
      fetch(`${baseUrl}/operator/tenants/${name}/signing-keys`, {
        method: "POST",
        headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({ keyId: "k1", publicKey: key.publicKey })
      })
    )
    expect(registered.status).toBe(201)
    const tokens = [tenant.device]
    for (let i = 2; i <= devices; i++) {
      const credential = yield* identity.issueDeviceCredential({
        tenant: TenantId.make(name),
        account: tenant.account,
        device: DeviceId.make(`d-${i}`)
      })
      tokens.push(Redacted.value(credential.token))
    }
    return {
      tenant: name,
      devices: tokens.map((token, i) => ({ token, envelope: envelopeProducer({ tenant: name, device: `d-${i + 1}`, seed: key.seed }) }))
    }
  })

interface Sent {
  readonly eventId: string
  readonly status: number | "connection-error"
  readonly reason?: string
}

/** One envelope on a fresh connection; a connection refused or cut is recorded as such, not thrown. */
const send = (port: number, token: string, envelope: { readonly eventId: string }) =>
  call(port, "POST", "/controlplane/v1/envelopes", { token, body: envelope }).pipe(
    Effect.map((answer): Sent => ({ eventId: envelope.eventId, status: answer.status, reason: answer.json?.reason })),
    Effect.catchAllDefect(() => Effect.succeed<Sent>({ eventId: envelope.eventId, status: "connection-error" }))
  )

const acceptedIn = (tenant: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ readonly event_id: string }>`
      SELECT i.event_id FROM inbox_identities i JOIN inbox_streams s USING (stream_id) WHERE s.tenant = ${tenant}`
    return new Set(rows.map((row) => row.event_id))
  })

/** The pids of a supervisor's processes. */
const childrenOf = (pid: number) =>
  spawnSync("pgrep", ["-P", String(pid)], { encoding: "utf8" }).stdout.split("\n").filter(Boolean).map(Number)

/** The bundle a process started by `bun run start` runs (BACKEND_BUNDLE, as its environment holds it). */
const bundleOf = (pid: number) => environmentOf(pid, "BACKEND_BUNDLE")

const environmentOf = (pid: number, name: string) =>
  readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").find((entry) => entry.startsWith(`${name}=`))?.slice(name.length + 1)

/** Which process holds each established connection on `port` (socket inodes of /proc/<pid>/fd against /proc/net/tcp). */
const connectionsByProcess = (port: number, pids: ReadonlyArray<number>) => {
  const established = new Set<string>()
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/)
      if (fields.length < 10) continue
      const localPort = parseInt(fields[1]!.split(":")[1]!, 16)
      if (localPort === port && fields[3] === "01") established.add(fields[9]!)
    }
  }
  return pids.map((pid) => {
    let count = 0
    for (const fd of readdirSync(`/proc/${pid}/fd`)) {
      try {
        const inode = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1]
        if (inode !== undefined && established.has(inode)) count++
      } catch {
        // Closed while listed.
      }
    }
    return count
  })
}

/** A keep-alive connection that has had one `GET /health` answered; closed with the test's scope. */
const openHealthConnection = (port: number) =>
  Effect.acquireRelease(
    Effect.async<{ readonly socket: ReturnType<typeof connect>; readonly status: string }>((resume) => {
      const socket = connect({ host: "127.0.0.1", port })
      let data = ""
      socket.on("connect", () => socket.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
      socket.on("data", (chunk) => {
        data += chunk.toString("latin1")
        if (data.includes("\r\n\r\n")) resume(Effect.succeed({ socket, status: data.slice(9, 12) }))
      })
      socket.on("error", (error) => resume(Effect.die(error)))
    }),
    ({ socket }) => Effect.sync(() => socket.destroy())
  )

const scrape = (port: number) => Effect.map(call(port, "GET", "/metrics"), (answer) => readScrape(answer.text))

const eventually = <A, E, R>(what: string, probe: Effect.Effect<A, E, R>, check: (a: A) => boolean, timeout = Duration.seconds(30)) =>
  probe.pipe(
    Effect.filterOrFail(check, () => what),
    Effect.retry(Schedule.spaced("100 millis")),
    Effect.timeoutFail({ duration: timeout, onTimeout: () => `timed out: ${what}` }),
    Effect.orDie
  )

layer(SuiteLayer, { excludeTestServices: true })("several processes: shared limits on Redis, WORKERS on one port (docs/scaling.md)", (it) => {
  it.scoped(
    "shared limits: two real backend processes with one real Redis enforce one sync limit: of 60 envelopes from one device sent to both in turn, exactly SYNC_INGEST_LIMIT (20) are accepted in all, the rest 429 with Retry-After; each process says at start-up that its limits are in Redis",
    () =>
      Effect.gen(function* () {
        const redis = yield* startRedis
        const env = { REDIS_URL: redis.url, SYNC_INGEST_LIMIT: "20", SYNC_INGEST_WINDOW: "10 minutes" }
        const first = yield* startBackend(env)
        const second = yield* startBackend(env)
        for (const { backend } of [first, second]) {
          yield* backend.waitForOutput(new RegExp(`limit store: redis at redis://127\\.0\\.0\\.1:${redis.port}/0`))
        }
        const { devices } = yield* producers(first.baseUrl, 1)
        const device = devices[0]!
        const answers: Array<Sent> = []
        for (let sequence = 1; sequence <= 60; sequence++) {
          answers.push(yield* send(sequence % 2 === 0 ? first.port : second.port, device.token, device.envelope(sequence)))
        }
        expect(answers.filter((a) => a.status === 201)).toHaveLength(20)
        expect(answers.filter((a) => a.status === 429).map((a) => a.reason)).toEqual(Array(40).fill("sync-rate-limited"))
        // Both processes granted part of the one budget.
        expect(new Set(answers.slice(0, 20).map((a) => a.status))).toEqual(new Set([201]))
        // Without the shared store each process would have granted its own 20: 40 in all.
        const limited = yield* call(first.port, "POST", "/controlplane/v1/envelopes", { token: device.token, body: device.envelope(61) })
        expect(limited.status).toBe(429)
        expect(Number(limited.headers["retry-after"])).toBeGreaterThan(0)
      }),
    { timeout: 90_000 }
  )

  it.scoped(
    "Redis stopped and restarted under load: while it is down every envelope is refused 503 storage-unavailable (the sync limit fails closed) and authentication still answers (the peer limit falls back to the process's own window); nothing answered 201 is missing; delivery_limit_store_up is 0 meanwhile and the failed commands are counted; after Redis is back the same processes accept again without a restart",
    () =>
      Effect.gen(function* () {
        const redis = yield* startRedis
        const env = { REDIS_URL: redis.url, SYNC_INGEST_LIMIT: "1000000", IDENTITY_PEER_LIMIT: "1000000" }
        const first = yield* startBackend(env)
        const second = yield* startBackend(env)
        const { devices, tenant } = yield* producers(first.baseUrl, 2)
        const answers = yield* Ref.make<Array<Sent & { readonly phase: string }>>([])
        const phase = yield* Ref.make("before")
        const sender = (index: number) =>
          Effect.gen(function* () {
            const device = devices[index]!
            // Requests alternate between the processes, retries included, so each one meets the outage.
            for (let sequence = 1, request = 0; (yield* Ref.get(phase)) !== "done"; sequence++, request++) {
              const answer = yield* send(request % 2 === 0 ? first.port : second.port, device.token, device.envelope(sequence))
              const now = yield* Ref.get(phase)
              yield* Ref.update(answers, (all) => [...all, { ...answer, phase: now }])
              // A refused envelope is sent again, as a producer does, so the stream has no gap.
              if (answer.status !== 201) sequence--
              yield* Effect.sleep(Duration.millis(10))
            }
          })
        const senders = yield* Effect.forkScoped(Effect.all([sender(0), sender(1)], { concurrency: "unbounded" }))

        yield* eventually("accepted before the outage", Ref.get(answers), (all) => all.filter((a) => a.status === 201).length >= 20)
        yield* redis.stop
        yield* Effect.sleep(Duration.millis(300))
        yield* Ref.set(phase, "outage")
        expect((yield* scrape(first.port)).value("delivery_limit_store_up")).toBe(0)
        yield* Effect.sleep(Duration.seconds(2))
        yield* Ref.set(phase, "restarting")
        yield* redis.start
        yield* eventually(
          "accepted again after the restart",
          Ref.get(answers),
          (all) => all.filter((a) => a.phase === "restarting" && a.status === 201).length >= 20
        )
        // Stopped between requests, not interrupted: every request sent has its answer recorded.
        yield* Ref.set(phase, "done")
        yield* Fiber.join(senders)

        const all = yield* Ref.get(answers)
        const duringOutage = all.filter((a) => a.phase === "outage")
        expect(duringOutage.length).toBeGreaterThan(10)
        // Authenticated and refused by the sync limit's store, never accepted without it, never a 401 or 429.
        expect(new Set(duringOutage.map((a) => `${a.status} ${a.reason}`))).toEqual(new Set(["503 storage-unavailable"]))
        const accepted = all.filter((a) => a.status === 201).map((a) => a.eventId)
        const stored = yield* acceptedIn(tenant)
        expect(accepted.filter((id) => !stored.has(id))).toEqual([])
        expect(stored.size).toBe(accepted.length)
        for (const { backend, port } of [first, second]) {
          yield* backend.waitForOutput(/limit store unreachable/)
          expect((yield* backend.output).match(/limit store reachable/g)?.length).toBe(2)
          const metrics = yield* scrape(port)
          expect(metrics.value("delivery_limit_store_up")).toBe(1)
          expect(metrics.sample("delivery_limit_store_errors_total")).toBeGreaterThan(0)
        }
      }),
    { timeout: 120_000 }
  )

  it.scoped(
    "WORKERS=3 under bun run start: three processes listen on one port, each runs the bundle its supervisor ran with the heap sizing bun run start sets (BUN_JSC_forceRAMSize, 320 MiB), and each serves requests; SIGTERM under load: every process drains and exits 0, the supervisor exits 0, and every envelope answered 201 is in the database",
    () =>
      Effect.gen(function* () {
        const db = yield* TestDatabase
        const port = yield* freePort
        const supervisor = yield* spawnBunScript("start", {
          DATABASE_URL: db.url,
          PORT: String(port),
          WORKERS: "3",
          DATABASE_POOL_MAX: "4",
          OPERATOR_TOKEN,
          IDENTITY_PEER_LIMIT: "1000000",
          SYNC_INGEST_LIMIT: "1000000",
          PASSWORD_RESET_DELIVERY: "disabled",
          RECEIPT_DELIVERY: "disabled"
        })
        yield* supervisor.waitForOutput(/all 3 backend processes listening/, "60 seconds")
        // `bun run start` -> the supervisor (start.ts) -> its three copies.
        const [supervisorPid] = childrenOf(supervisor.pid)
        const pids = childrenOf(supervisorPid!)
        expect(pids).toHaveLength(3)
        expect(connectionsByProcess(port, [supervisorPid!])).toEqual([0])
        const bundles = pids.map((pid) => bundleOf(pid))
        expect(bundles[0]).toMatch(/\/\.build\/[0-9a-f]{24}\/main\.js$/)
        expect(new Set(bundles).size).toBe(1)
        expect([supervisorPid!, ...pids].map((pid) => environmentOf(pid, "BUN_JSC_forceRAMSize"))).toEqual(Array(4).fill("335544320"))

        // 30 connections, each answered: the kernel spreads them, so each process holds some (a process left out
        // of 30 has a chance of 3 * (2/3)^30, about 1.5e-5).
        const connections = yield* Effect.all(Array.from({ length: 30 }, () => openHealthConnection(port)), { concurrency: 10 })
        expect(connections.every((c) => c.status === "200")).toBe(true)
        const held = connectionsByProcess(port, pids)
        expect(held.reduce((a, b) => a + b, 0)).toBe(30)
        expect(held.every((count) => count > 0)).toBe(true)

        const { devices, tenant } = yield* producers(`http://127.0.0.1:${port}`, 3)
        const answers = yield* Ref.make<Array<Sent>>([])
        const sender = (index: number) =>
          Effect.gen(function* () {
            const device = devices[index]!
            for (let sequence = 1; sequence <= 10_000; sequence++) {
              const answer = yield* send(port, device.token, device.envelope(sequence))
              yield* Ref.update(answers, (all) => [...all, answer])
              if (answer.status === "connection-error") return
              if (answer.status !== 201) sequence--
            }
          })
        const senders = yield* Effect.forkScoped(Effect.all([0, 1, 2].map(sender), { concurrency: "unbounded" }))
        yield* eventually("load running", Ref.get(answers), (all) => all.filter((a) => a.status === 201).length >= 60)

        yield* supervisor.signal("SIGTERM")
        expect(yield* supervisor.exitCode("60 seconds")).toBe(0)
        yield* Fiber.join(senders)
        for (const pid of pids) {
          expect(spawnSync("kill", ["-0", String(pid)]).status).not.toBe(0)
        }
        const output = yield* supervisor.output
        expect(output.match(/shutdown: in-flight requests drained/g)).toHaveLength(3)
        expect(output).not.toMatch(/did not all stop cleanly/)

        const all = yield* Ref.get(answers)
        const accepted = all.filter((a) => a.status === 201).map((a) => a.eventId)
        const stored = yield* acceptedIn(tenant)
        expect(accepted.filter((id) => !stored.has(id))).toEqual([])
        // Answers during the drain are acceptances or the documented refusals, never anything else.
        expect([...new Set(all.map((a) => (a.status === 201 ? "201" : `${a.status} ${a.reason ?? ""}`.trim())))].sort()).toEqual(
          expect.arrayContaining(["201"])
        )
        for (const answer of all) {
          expect([201, 503, "connection-error"]).toContain(answer.status)
          if (answer.status === 503) expect(answer.reason).toBe("shutting-down")
        }
      }),
    { timeout: 120_000 }
  )

  it.scoped(
    "WORKERS: a process killed after it listened is started again and serves; the processes of a supervisor killed with SIGKILL stop themselves cleanly; processes that fail at start-up (an unreachable REDIS_URL) stop the supervisor non-zero with the reason, and WORKERS above 1 without DATABASE_URL is refused before anything starts",
    () =>
      Effect.gen(function* () {
        const db = yield* TestDatabase
        const port = yield* freePort
        const base = {
          DATABASE_URL: db.url,
          PORT: String(port),
          WORKERS: "2",
          DATABASE_POOL_MAX: "3",
          PASSWORD_RESET_DELIVERY: "disabled",
          RECEIPT_DELIVERY: "disabled"
        }
        const supervisor = yield* spawnBun(backendMain, base)
        yield* supervisor.waitForOutput(/all 2 backend processes listening/, "60 seconds")
        const [victim, survivor] = childrenOf(supervisor.pid)
        process.kill(victim!, "SIGKILL")
        yield* supervisor.waitForOutput(/backend process \d exited with code \d+; starting it again in 1s/)
        yield* eventually("a new process in its place", Effect.sync(() => childrenOf(supervisor.pid)), (pids) =>
          pids.length === 2 && !pids.includes(victim!) && pids.includes(survivor!))
        yield* eventually(
          "listening again",
          supervisor.output,
          (text) => (text.match(/backend process \d listening/g) ?? []).length === 3
        )
        const held = yield* Effect.all(Array.from({ length: 20 }, () => openHealthConnection(port)), { concurrency: 10 })
        expect(held.every((c) => c.status === "200")).toBe(true)
        // A supervisor killed outright cannot pass SIGTERM on: its processes notice and stop themselves, cleanly.
        const orphans = childrenOf(supervisor.pid)
        expect(orphans).toHaveLength(2)
        yield* supervisor.signal("SIGKILL")
        yield* eventually(
          "the processes of a killed supervisor stop",
          Effect.sync(() => orphans.filter((pid) => spawnSync("kill", ["-0", String(pid)]).status === 0)),
          (alive) => alive.length === 0,
          Duration.seconds(20)
        )
        const stoppedAlone = yield* supervisor.output
        expect(stoppedAlone.match(/shutdown: in-flight requests drained/g)).toHaveLength(2)

        const unreachable = yield* freePort
        const failing = yield* spawnBun(backendMain, { ...base, PORT: String(yield* freePort), REDIS_URL: `redis://app:pw-not-shown@127.0.0.1:${unreachable}` })
        expect(yield* failing.exitCode("60 seconds")).toBe(1)
        const failed = yield* failing.output
        expect(failed).toContain(`REDIS_URL: the limit store redis://127.0.0.1:${unreachable}/0 did not answer within 5s`)
        expect(failed).toMatch(/backend process \d exited with code 1 before it listened; stopping the others/)
        expect(failed).not.toContain("pw-not-shown")

        const embedded = yield* spawnBun(backendMain, { PORT: String(yield* freePort), WORKERS: "2", PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" })
        expect(yield* embedded.exitCode("30 seconds")).toBe(1)
        const refused = yield* embedded.output
        expect(refused).toContain("WORKERS: Expected 1 without DATABASE_URL")
        expect(refused).not.toMatch(/starting \d backend processes/)
      }),
    { timeout: 150_000 }
  )
})
