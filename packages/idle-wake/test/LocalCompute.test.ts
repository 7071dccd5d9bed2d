import { backendMain, freePort, get, probePort, TestDatabase } from "@delivery/testing"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { describe, expect, it, layer } from "@effect/vitest"
import { ConfigError, ConfigProvider, Duration, Effect, Redacted, Schedule } from "effect"
import { spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { StackId } from "../src/Domain.ts"
import type { ComputeProviderShape, ComputeTarget } from "../src/cloud/ComputeProvider.ts"
import { makeLocalCompute } from "../src/cloud/LocalCompute.ts"
import { IDLE_WAKE_LOCAL_STACKS, LOCAL_COMPUTE_CONFIG, LocalComputeConfig, type LocalComputeSettings } from "../src/cloud/LocalComputeConfig.ts"

// Spec 001's local compute: real tenant processes started, found again and stopped by the provider. The real
// backend proves the start and the SIGTERM stop; a stub tenant (fixtures/StubTenant.ts) plays the misbehaving ones.
// Every child a test causes carries that test's probe variable, and is SIGKILLed (with the pids in its pid files)
// when the test ends.

const stub = new URL("./fixtures/StubTenant.ts", import.meta.url).pathname
const PROBE = "LOCAL_COMPUTE_PROBE"

interface StackSpec {
  readonly port: number
  readonly env?: Record<string, string>
}

const configure = (vars: Record<string, string>) =>
  Effect.withConfigProvider(LocalComputeConfig, ConfigProvider.fromMap(new Map(Object.entries(vars))))

/** Pids of live processes whose initial environment holds `entry` (`NAME=value`). */
const processesWith = (entry: string): ReadonlyArray<number> =>
  readdirSync("/proc").filter((name) => /^\d+$/.test(name)).flatMap((name) => {
    try {
      return readFileSync(`/proc/${name}/environ`, "utf8").split("\0").includes(entry) ? [Number(name)] : []
    } catch {
      return []
    }
  })

const environOf = (pid: number): Record<string, string> =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").filter((item) => item !== "").map((item) => {
      const at = item.indexOf("=")
      return [item.slice(0, at), item.slice(at + 1)]
    })
  )

const isAlive = (pid: number) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return !["Z", "X"].includes(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0]!)
  } catch {
    return false
  }
}

const killGroup = (pid: number) => {
  try {
    process.kill(-pid, "SIGKILL")
  } catch {
    // Gone already.
  }
}

const pidFileOf = (runDir: string, stack: string) => join(runDir, `${stack}.pid`)
const pidOf = (runDir: string, stack: string) => Number(readFileSync(pidFileOf(runDir, stack), "utf8").split("\n")[0])
const logOf = (runDir: string, stack: string) => readFileSync(join(runDir, `${stack}.log`), "utf8")

/** A run dir that does not exist yet (the provider creates it) and a probe token; the release kills what they name. */
const scratch = Effect.acquireRelease(
  Effect.sync(() => {
    const base = mkdtempSync(join(tmpdir(), "local-compute-"))
    return { base, runDir: join(base, "stacks"), probe: randomBytes(8).toString("hex") }
  }),
  ({ base, probe, runDir }) =>
    Effect.sync(() => {
      const pids = new Set(processesWith(`${PROBE}=${probe}`))
      if (existsSync(runDir)) {
        for (const name of readdirSync(runDir).filter((name) => name.endsWith(".pid"))) pids.add(pidOf(runDir, name.slice(0, -4)))
      }
      for (const pid of pids) killGroup(pid)
      rmSync(base, { recursive: true, force: true })
    })
)

/** A provider over a fresh run dir, configured through LocalComputeConfig exactly as the cloud reads it. */
const provider = (stacks: Record<string, StackSpec>, vars: Record<string, string> = {}) =>
  Effect.gen(function* () {
    const { probe, runDir } = yield* scratch
    const json = Object.fromEntries(
      Object.entries(stacks).map(([id, spec]) => [id, { port: spec.port, env: { ...spec.env, [PROBE]: probe } }])
    )
    const settings = yield* configure({
      [IDLE_WAKE_LOCAL_STACKS]: JSON.stringify(json),
      IDLE_WAKE_LOCAL_RUN_DIR: runDir,
      IDLE_WAKE_LOCAL_ENTRY: stub,
      ...vars
    }).pipe(Effect.orDie)
    const compute = yield* makeLocalCompute(settings)
    return { compute, runDir, probe, settings }
  })

const untilReady = (compute: ComputeProviderShape, stack: StackId, target: ComputeTarget) =>
  compute.readiness(stack, target).pipe(
    Effect.filterOrFail((ready) => ready),
    Effect.retry(Schedule.spaced("200 millis")),
    Effect.timeout("60 seconds"),
    Effect.orDie
  )

const stackA = "stack-a" as StackId

layer(TestDatabaseLive, { excludeTestServices: true, timeout: 180_000 })("local compute with the real tenant backend (spec 001)", (it) => {
  const tenantEnv = Effect.map(TestDatabase, (db) => ({
    DATABASE_URL: db.url,
    PASSWORD_RESET_DELIVERY: "disabled",
    RECEIPT_DELIVERY: "disabled",
    IDENTITY_PEER_LIMIT: "1000000"
  }))

  it.scoped("prepare starts the tenant backend on its port (ready, running, /health answers), is idempotent and never spawns twice, and passes only PATH, HOME, NO_COLOR, the stack's env, HOST and PORT", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const env = yield* tenantEnv
      const marker = `cloud-secret-${randomBytes(8).toString("hex")}`
      // A variable of the cloud's own environment, present when the provider spawns: it must not reach the tenant.
      yield* Effect.acquireRelease(
        Effect.sync(() => (process.env.LOCAL_COMPUTE_CLOUD_SECRET = marker)),
        () => Effect.sync(() => delete process.env.LOCAL_COMPUTE_CLOUD_SECRET)
      )
      const { compute, probe, runDir } = yield* provider({ [stackA]: { port, env } }, { IDLE_WAKE_LOCAL_ENTRY: backendMain })

      const [first, second] = yield* Effect.all([compute.prepare(stackA), compute.prepare(stackA)], { concurrency: "unbounded" })
      expect(first).toEqual({ upstream: `http://127.0.0.1:${port}` })
      expect(second).toEqual(first)
      const pid = pidOf(runDir, stackA)
      expect(processesWith(`${PROBE}=${probe}`)).toEqual([pid])

      yield* untilReady(compute, stackA, first)
      expect(yield* compute.status(stackA)).toBe("running")
      expect((yield* get(port, "/health")).status).toBe(200)

      expect(yield* compute.prepare(stackA)).toEqual(first)
      yield* Effect.all([compute.prepare(stackA), compute.prepare(stackA)], { concurrency: "unbounded" })
      expect(pidOf(runDir, stackA)).toBe(pid)
      expect(processesWith(`${PROBE}=${probe}`)).toEqual([pid])

      const environ = environOf(pid)
      expect(Object.keys(environ).sort()).toEqual(
        ["PATH", "HOME", "NO_COLOR", ...Object.keys(env), PROBE, "HOST", "PORT"].sort()
      )
      expect(environ).toMatchObject({ ...env, NO_COLOR: "1", HOST: "127.0.0.1", PORT: String(port) })
      expect(readFileSync(`/proc/${pid}/environ`, "utf8")).not.toContain(marker)
      expect(logOf(runDir, stackA)).toMatch(/listening on http:/)
    }))

  it.scoped("stop sends SIGTERM: the tenant backend exits, its port is refused, status is stopped, its pid file is removed, and a second stop is Stopped", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const { compute, runDir } = yield* provider({ [stackA]: { port, env: yield* tenantEnv } }, { IDLE_WAKE_LOCAL_ENTRY: backendMain })
      const target = yield* compute.prepare(stackA)
      yield* untilReady(compute, stackA, target)
      const pid = pidOf(runDir, stackA)

      expect(yield* compute.stop(stackA)).toEqual({ _tag: "Stopped" })
      expect(isAlive(pid)).toBe(false)
      // Only a SIGTERM lets the backend run its finalizers; a SIGKILL would leave no shutdown lines.
      expect(logOf(runDir, stackA)).toContain("shutdown: database pool disposed")
      expect(yield* probePort(port)).toBe("refused")
      expect(yield* compute.status(stackA)).toBe("stopped")
      expect(existsSync(pidFileOf(runDir, stackA))).toBe(false)
      expect(yield* compute.readiness(stackA, target)).toBe(false)
      expect(yield* compute.stop(stackA)).toEqual({ _tag: "Stopped" })
    }))
})

describe("local compute with a stub tenant (spec 001)", () => {
  it.scopedLive("a tenant that ignores SIGTERM: stop answers Uncertain compute-stop-timeout at the stop timeout, sends no SIGKILL, and the tenant still runs", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const { compute, runDir } = yield* provider(
        { [stackA]: { port, env: { STUB_MODE: "ignore-sigterm" } } },
        { IDLE_WAKE_LOCAL_STOP_TIMEOUT: "1 second" }
      )
      yield* compute.prepare(stackA)
      const pid = pidOf(runDir, stackA)
      const [elapsed, outcome] = yield* Effect.timed(compute.stop(stackA))
      expect(outcome).toEqual({ _tag: "Uncertain", code: "compute-stop-timeout" })
      expect(Duration.toMillis(elapsed)).toBeGreaterThanOrEqual(1000)
      expect(Duration.toMillis(elapsed)).toBeLessThan(10_000)
      expect(isAlive(pid)).toBe(true)
      expect(yield* compute.status(stackA)).toBe("running")
      expect(pidOf(runDir, stackA)).toBe(pid)
      expect(logOf(runDir, stackA)).toContain("SIGTERM received (ignore-sigterm)")
    }))

  it.scopedLive("a port held by a process the provider did not start: stop answers Failed compute-not-owned, status is running, prepare answers its upstream without spawning", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      yield* Effect.acquireRelease(
        Effect.async<ReturnType<typeof createServer>>((resume) => {
          const server = createServer((socket) => socket.destroy())
          server.listen(port, "127.0.0.1", () => resume(Effect.succeed(server)))
        }),
        (server) => Effect.async<void>((resume) => void server.close(() => resume(Effect.void)))
      )
      const { compute, probe, runDir } = yield* provider({ [stackA]: { port } })
      expect(yield* compute.stop(stackA)).toEqual({ _tag: "Failed", code: "compute-not-owned" })
      expect(yield* compute.status(stackA)).toBe("running")
      expect(yield* compute.prepare(stackA)).toEqual({ upstream: `http://127.0.0.1:${port}` })
      expect(existsSync(pidFileOf(runDir, stackA))).toBe(false)
      expect(processesWith(`${PROBE}=${probe}`)).toEqual([])
    }))

  it.scopedLive("an entry that exits at once: prepare fails compute-exited, its pid file is removed, its output is in the stack's log", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const { compute, runDir } = yield* provider({ [stackA]: { port, env: { STUB_MODE: "exit" } } })
      const failure = yield* Effect.flip(compute.prepare(stackA))
      expect(failure).toMatchObject({ _tag: "ComputeStartFailed", stack: stackA, code: "compute-exited" })
      expect(existsSync(pidFileOf(runDir, stackA))).toBe(false)
      expect(logOf(runDir, stackA)).toContain("stub tenant: exiting at once")
      expect(yield* compute.status(stackA)).toBe("stopped")
    }))

  it.scopedLive("an unknown stack: prepare fails compute-unknown-stack, status is unknown, stop answers Failed compute-unknown-stack", () =>
    Effect.gen(function* () {
      const { compute } = yield* provider({ [stackA]: { port: yield* freePort } })
      const other = "stack-b" as StackId
      expect(yield* Effect.flip(compute.prepare(other))).toMatchObject({ _tag: "ComputeStartFailed", stack: other, code: "compute-unknown-stack" })
      expect(yield* compute.status(other)).toBe("unknown")
      expect(yield* compute.stop(other)).toEqual({ _tag: "Failed", code: "compute-unknown-stack" })
    }))

  it.scopedLive("a start that outlasts the start timeout fails compute-start-failed and leaves the process: a later status and prepare find it without spawning", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const { compute, probe, runDir } = yield* provider(
        { [stackA]: { port, env: { STUB_MODE: "late", STUB_DELAY_MS: "2500" } } },
        { IDLE_WAKE_LOCAL_START_TIMEOUT: "1 second" }
      )
      expect(yield* Effect.flip(compute.prepare(stackA))).toMatchObject({ code: "compute-start-failed" })
      const pid = pidOf(runDir, stackA)
      expect(isAlive(pid)).toBe(true)
      expect(yield* compute.status(stackA)).toBe("running")
      const target = yield* compute.prepare(stackA)
      yield* untilReady(compute, stackA, target)
      expect(pidOf(runDir, stackA)).toBe(pid)
      expect(processesWith(`${PROBE}=${probe}`)).toEqual([pid])
    }))

  it.scopedLive("a restarted cloud (a second provider over the same run dir) finds a stack the first started and stops it by its pid file; closing the first provider's scope left it running", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const { runDir, settings } = yield* provider({ [stackA]: { port } })
      yield* Effect.scoped(Effect.flatMap(makeLocalCompute(settings), (first) => first.prepare(stackA)))
      const pid = pidOf(runDir, stackA)
      expect(isAlive(pid)).toBe(true)
      expect(yield* probePort(port)).toBe("open")
      // Private to the cloud: the pid and log files hold what a restarted cloud and an operator need, nobody else.
      expect(statSync(runDir).mode & 0o777).toBe(0o700)
      expect(statSync(pidFileOf(runDir, stackA)).mode & 0o777).toBe(0o600)

      const second = yield* makeLocalCompute(settings)
      expect(yield* second.status(stackA)).toBe("running")
      expect(yield* second.prepare(stackA)).toEqual({ upstream: `http://127.0.0.1:${port}` })
      expect(pidOf(runDir, stackA)).toBe(pid)
      expect(yield* second.stop(stackA)).toEqual({ _tag: "Stopped" })
      expect(isAlive(pid)).toBe(false)
      expect(yield* probePort(port)).toBe("refused")
      expect(existsSync(pidFileOf(runDir, stackA))).toBe(false)
      expect(logOf(runDir, stackA)).toContain("SIGTERM received (listen)")
    }))

  it.scopedLive("a stale pid file whose process is gone is removed: status is stopped, stop is Stopped, prepare starts a new process", () =>
    Effect.gen(function* () {
      const port = yield* freePort
      const { compute, runDir } = yield* provider({ [stackA]: { port } })
      const dead = spawnSync("true").pid
      yield* Effect.sync(() => {
        mkdirSync(runDir, { recursive: true, mode: 0o700 })
        writeFileSync(pidFileOf(runDir, stackA), `${dead}\n`, { mode: 0o600 })
      })
      expect(yield* compute.status(stackA)).toBe("stopped")
      expect(existsSync(pidFileOf(runDir, stackA))).toBe(false)
      yield* Effect.sync(() => writeFileSync(pidFileOf(runDir, stackA), `${dead}\n`, { mode: 0o600 }))
      expect(yield* compute.stop(stackA)).toEqual({ _tag: "Stopped" })
      expect(existsSync(pidFileOf(runDir, stackA))).toBe(false)
      yield* Effect.sync(() => writeFileSync(pidFileOf(runDir, stackA), `${dead}\n`, { mode: 0o600 }))
      yield* compute.prepare(stackA)
      expect(pidOf(runDir, stackA)).not.toBe(dead)
      expect(isAlive(pidOf(runDir, stackA))).toBe(true)
    }))

  it.scopedLive("readiness is one GET /ready: true only for a 200, false for another status or a closed port, and never a failure", () =>
    Effect.gen(function* () {
      const [ready, busy, closed] = [yield* freePort, yield* freePort, yield* freePort]
      const { compute } = yield* provider({
        "ready": { port: ready },
        "busy": { port: busy, env: { STUB_READY: "503" } },
        "closed": { port: closed }
      })
      const readyTarget = yield* compute.prepare("ready" as StackId)
      const busyTarget = yield* compute.prepare("busy" as StackId)
      expect(yield* compute.readiness("ready" as StackId, readyTarget)).toBe(true)
      expect(yield* compute.readiness("busy" as StackId, busyTarget)).toBe(false)
      expect(yield* compute.readiness("closed" as StackId, { upstream: `http://127.0.0.1:${closed}` })).toBe(false)
    }))
})

const problems = (error: ConfigError.ConfigError): ReadonlyArray<string> =>
  ConfigError.reduceWithContext(error, undefined, {
    andCase: (_, left, right) => [...left, ...right],
    orCase: (_, left, right) => [...left, ...right],
    invalidDataCase: (_, path, message) => [`${path.join("_")}: ${message}`],
    missingDataCase: (_, path, message) => [`${path.join("_")}: ${message}`],
    sourceUnavailableCase: (_, path, message) => [`${path.join("_")}: ${message}`],
    unsupportedCase: (_, path, message) => [`${path.join("_")}: ${message}`]
  })

const SECRET = "SekritValue9"
const secretEnv = { DATABASE_URL: `postgres://tenant:${SECRET}@127.0.0.1/db` }
const many = (count: number, make: (index: number) => [string, unknown]) => Object.fromEntries(Array.from({ length: count }, (_, index) => make(index)))

describe("local compute configuration (spec 001)", () => {
  it.effect("unset: no local stacks, the run dir <repository>/.data/stacks, the backend's start.ts (what `bun run start` runs), 60 s to start and 30 s to stop", () =>
    Effect.gen(function* () {
      const settings: LocalComputeSettings = yield* configure({})
      expect(settings.stacks.size).toBe(0)
      expect(settings.runDir).toBe(join(backendMain, "../../../../.data/stacks"))
      expect(settings.entry).toBe(join(backendMain, "../start.ts"))
      expect(Duration.toMillis(settings.startTimeout)).toBe(60_000)
      expect(Duration.toMillis(settings.stopTimeout)).toBe(30_000)
    }))

  it.effect("valid JSON is parsed: each stack's port, and its env kept Redacted", () =>
    Effect.gen(function* () {
      const settings = yield* configure({
        [IDLE_WAKE_LOCAL_STACKS]: JSON.stringify({ "tenant-1": { port: 40123, env: secretEnv }, "t_2": { port: 40124 } }),
        IDLE_WAKE_LOCAL_RUN_DIR: "/var/lib/stacks",
        IDLE_WAKE_LOCAL_STOP_TIMEOUT: "5 seconds"
      })
      expect([...settings.stacks.keys()]).toEqual(["tenant-1", "t_2"])
      const first = settings.stacks.get("tenant-1")!
      expect(first.port).toBe(40123)
      expect(Redacted.value(first.env)).toEqual(secretEnv)
      expect(String(first.env)).not.toContain(SECRET)
      expect(Redacted.value(settings.stacks.get("t_2")!.env)).toEqual({})
      expect(settings.runDir).toBe("/var/lib/stacks")
      expect(Duration.toMillis(settings.stopTimeout)).toBe(5000)
    }))

  const refused: ReadonlyArray<readonly [string, string]> = [
    ["bad JSON", `{"tenant-1": {"port": 40123, "env": {"DATABASE_URL": "${SECRET}"}}`],
    ["not an object", JSON.stringify([SECRET])],
    ["a bad stack id", JSON.stringify({ [`Tenant-${SECRET}`]: { port: 40123 } })],
    ["a duplicate port", JSON.stringify({ "tenant-1": { port: 40123, env: secretEnv }, "tenant-2": { port: 40123 } })],
    ["PORT in env", JSON.stringify({ "tenant-1": { port: 40123, env: { PORT: SECRET } } })],
    ["HOST in env", JSON.stringify({ "tenant-1": { port: 40123, env: { HOST: SECRET } } })],
    ["a bad env name", JSON.stringify({ "tenant-1": { port: 40123, env: { [`lower_${SECRET}`]: "x" } } })],
    ["an env value that is not a string", JSON.stringify({ "tenant-1": { port: 40123, env: { TOKEN: 40125 } } })],
    ["an env value over 4096 characters", JSON.stringify({ "tenant-1": { port: 40123, env: { TOKEN: SECRET.repeat(400) } } })],
    ["an unknown member in a stack", JSON.stringify({ "tenant-1": { port: 40123, env: secretEnv, [SECRET]: true } })],
    ["a port out of range", JSON.stringify({ "tenant-1": { port: 70123, env: secretEnv } })],
    ["a port given as a string", JSON.stringify({ "tenant-1": { port: "40123", env: secretEnv } })],
    ["more than 64 stacks", JSON.stringify(many(65, (index) => [`tenant-${index}`, { port: 40000 + index, env: secretEnv }]))],
    ["more than 128 env entries", JSON.stringify({ "tenant-1": { port: 40123, env: many(129, (index) => [`V_${index}`, SECRET]) } })]
  ]
  for (const [what, value] of refused) {
    it.effect(`refused with IDLE_WAKE_LOCAL_STACKS named and no part of the value shown: ${what}`, () =>
      Effect.gen(function* () {
        const error = yield* Effect.flip(configure({ [IDLE_WAKE_LOCAL_STACKS]: value }))
        const messages = problems(error)
        expect(messages.length).toBe(1)
        expect(messages[0]!.startsWith(`${IDLE_WAKE_LOCAL_STACKS}: `)).toBe(true)
        const text = `${messages.join("\n")}\n${String(error)}`
        for (const part of [SECRET, "tenant", "Tenant", "40123", "70123", "40125", "lower_", "DATABASE_URL"]) expect(text).not.toContain(part)
      }))
  }

  it.effect("every variable's problem is reported together under its own name", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(configure({
        [IDLE_WAKE_LOCAL_STACKS]: "{",
        IDLE_WAKE_LOCAL_START_TIMEOUT: "0 seconds",
        IDLE_WAKE_LOCAL_STOP_TIMEOUT: "soon",
        IDLE_WAKE_LOCAL_RUN_DIR: " "
      }))
      const names = problems(error).map((line) => line.split(":")[0])
      expect(new Set(names)).toEqual(new Set([IDLE_WAKE_LOCAL_STACKS, "IDLE_WAKE_LOCAL_START_TIMEOUT", "IDLE_WAKE_LOCAL_STOP_TIMEOUT", "IDLE_WAKE_LOCAL_RUN_DIR"]))
    }))

  it("the configuration table lists the five variables, only IDLE_WAKE_LOCAL_STACKS secret", () => {
    expect(LOCAL_COMPUTE_CONFIG.map((entry) => entry.name)).toEqual([
      IDLE_WAKE_LOCAL_STACKS,
      "IDLE_WAKE_LOCAL_RUN_DIR",
      "IDLE_WAKE_LOCAL_ENTRY",
      "IDLE_WAKE_LOCAL_START_TIMEOUT",
      "IDLE_WAKE_LOCAL_STOP_TIMEOUT"
    ])
    expect(LOCAL_COMPUTE_CONFIG.filter((entry) => entry.secret).map((entry) => entry.name)).toEqual([IDLE_WAKE_LOCAL_STACKS])
  })
})
