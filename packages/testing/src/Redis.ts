import { Data, Duration, Effect, Schedule } from "effect"
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort } from "./PgCluster.ts"

export class RedisServerError extends Data.TaggedError("RedisServerError")<{ readonly message: string }> {}

const findRedisServer = (): string => {
  const fromEnv = process.env.REDIS_SERVER
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv
  const which = spawnSync("sh", ["-c", "command -v redis-server"], { encoding: "utf8" })
  const found = which.stdout.trim()
  if (found !== "") return found
  throw new Error("redis-server not found: install the redis-server package (.ci/run does) or set REDIS_SERVER")
}

/** One PING over a fresh connection: true when the server answers PONG within a second. */
const pings = (port: number) =>
  Effect.async<boolean>((resume) => {
    const socket = connect({ host: "127.0.0.1", port })
    let data = ""
    const done = (answer: boolean) => {
      socket.destroy()
      resume(Effect.succeed(answer))
    }
    const timer = setTimeout(() => done(false), 1_000)
    socket.on("connect", () => socket.write("PING\r\n"))
    socket.on("data", (chunk) => {
      data += chunk.toString("latin1")
      if (data.includes("\r\n")) {
        clearTimeout(timer)
        done(data.startsWith("+PONG"))
      }
    })
    socket.on("error", () => {
      clearTimeout(timer)
      done(false)
    })
    return Effect.sync(() => socket.destroy())
  })

export interface RedisServer {
  readonly port: number
  readonly url: string
  /** Stops the server (SIGKILL: an outage, not a clean stop) and waits until its port refuses. */
  readonly stop: Effect.Effect<void>
  /** Starts it again on the same port, empty (no persistence), and waits until it answers. */
  readonly start: Effect.Effect<void, RedisServerError>
  /** SIGSTOP / SIGCONT: connections stay open, nothing is answered. */
  readonly pause: Effect.Effect<void>
  readonly resume: Effect.Effect<void>
}

/**
 * A throwaway `redis-server` on a free loopback port, without persistence, removed when the scope closes: the
 * shared-limit tests' own Redis, as `startCluster` is their own PostgreSQL.
 */
export const startRedis = Effect.gen(function* () {
  const binary = findRedisServer()
  const port = yield* freePort
  const dir = yield* Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), "delivery-redis-"))),
    (path) => Effect.sync(() => rmSync(path, { recursive: true, force: true }))
  )
  let child: ChildProcess | undefined

  const waitFor = (answers: boolean, what: string) =>
    pings(port).pipe(
      Effect.filterOrFail((answer) => answer === answers, () => new RedisServerError({ message: `redis-server on ${port}: ${what}` })),
      Effect.retry(Schedule.spaced(Duration.millis(50)).pipe(Schedule.upTo(Duration.seconds(10))))
    )

  const start = Effect.suspend(() => {
    child = spawn(binary, [
      "--port", String(port),
      "--bind", "127.0.0.1",
      "--save", "",
      "--appendonly", "no",
      "--dir", dir,
      "--daemonize", "no",
      "--loglevel", "warning"
    ], { stdio: "ignore" })
    return waitFor(true, "did not answer after start")
  })

  const stop = Effect.suspend(() => {
    const running = child
    child = undefined
    if (running === undefined) return Effect.void
    running.kill("SIGCONT")
    running.kill("SIGKILL")
    return Effect.orDie(waitFor(false, "still answers after SIGKILL"))
  })

  yield* Effect.acquireRelease(start, () => stop)

  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    stop,
    start,
    pause: Effect.sync(() => void child?.kill("SIGSTOP")),
    resume: Effect.sync(() => void child?.kill("SIGCONT"))
  } satisfies RedisServer
})
