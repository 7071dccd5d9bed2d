import { Context, Data, Effect, Layer } from "effect"
import { spawnSync } from "node:child_process"
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"

export class PgClusterError extends Data.TaggedError("PgClusterError")<{ readonly message: string }> {}

/** A PostgreSQL server reachable at `url` (an admin connection to its `postgres` database). */
export class PgCluster extends Context.Tag("@delivery/testing/PgCluster")<
  PgCluster,
  { readonly url: string; readonly port: number; readonly external: boolean }
>() {}

const findBinDir = (): string => {
  const fromEnv = process.env.PG_BIN
  if (fromEnv !== undefined && existsSync(join(fromEnv, "initdb"))) return fromEnv
  const root = "/usr/lib/postgresql"
  if (existsSync(root)) {
    const versions = readdirSync(root).filter((v) => existsSync(join(root, v, "bin", "initdb")))
    versions.sort((a, b) => Number(b) - Number(a))
    if (versions[0] !== undefined) return join(root, versions[0], "bin")
  }
  const which = spawnSync("sh", ["-c", "command -v initdb"], { encoding: "utf8" })
  const found = which.stdout.trim()
  if (found !== "") return found.slice(0, found.lastIndexOf("/"))
  throw new Error("initdb not found: install the PostgreSQL server packages or set PG_BIN")
}

/** initdb and postgres refuse to run as root, so as root they run as the `postgres` user. */
const asServerUser = (command: string, args: ReadonlyArray<string>): [string, Array<string>] =>
  process.getuid?.() === 0 ? ["runuser", ["-u", "postgres", "--", command, ...args]] : [command, [...args]]

/** Whether `port` can be listened on right now (127.0.0.1), or the port the system chose for 0. */
const bindable = (port: number) =>
  Effect.async<number | undefined>((resume) => {
    const server = createServer()
    server.once("error", () => resume(Effect.succeed(undefined)))
    server.listen(port, "127.0.0.1", () => {
      const address = server.address()
      const bound = typeof address === "object" && address !== null ? address.port : undefined
      server.close(() => resume(Effect.succeed(bound)))
    })
  })

// Below the ephemeral ranges (Linux 32768-60999, macOS 49152-65535): a port the system hands out for listen(0) is
// also handed to outgoing connections, and the many database connections of parallel tests took one between its
// check and the server's own bind ("Is port … in use?").
const UNASSIGNED_FROM = 20_000
const UNASSIGNED_TO = 32_000

/** A port free on 127.0.0.1 for a server a test starts next: one outside the ephemeral range when one is found. */
export const freePort: Effect.Effect<number> = Effect.suspend(function loop(tries = 0): Effect.Effect<number> {
  if (tries >= 50) return Effect.map(bindable(0), (port) => port ?? 0)
  const candidate = UNASSIGNED_FROM + Math.floor(Math.random() * (UNASSIGNED_TO - UNASSIGNED_FROM))
  return Effect.flatMap(bindable(candidate), (port) => (port === undefined ? loop(tries + 1) : Effect.succeed(port)))
})

export interface ClusterOptions {
  /** Durability off for speed; a crashed test process loses nothing that matters. */
  readonly fsync?: boolean
  readonly maxConnections?: number
}

/** Starts a throwaway cluster (initdb, postgres on a free 127.0.0.1 port) and removes it when the scope closes. */
export const startCluster = (options: ClusterOptions = {}) =>
  Effect.gen(function* () {
    const bin = findBinDir()
    const root = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join(tmpdir(), "delivery-pg-"))),
      (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
    )
    if (process.getuid?.() === 0) {
      const pw = spawnSync("id", ["-u", "postgres"], { encoding: "utf8" })
      const gid = spawnSync("id", ["-g", "postgres"], { encoding: "utf8" })
      chownSync(root, Number(pw.stdout.trim()), Number(gid.stdout.trim()))
    }
    const data = join(root, "data")
    const [initCmd, initArgs] = asServerUser(join(bin, "initdb"), [
      "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"
    ])
    const init = spawnSync(initCmd, initArgs, { encoding: "utf8" })
    if (init.status !== 0) {
      return yield* new PgClusterError({ message: `initdb failed: ${init.stderr.slice(0, 2000)}` })
    }
    const port = yield* freePort
    const options_ = [
      "-p", String(port), "-k", root,
      "-c", "listen_addresses=127.0.0.1",
      "-c", `max_connections=${options.maxConnections ?? 200}`,
      "-c", `fsync=${options.fsync === true ? "on" : "off"}`,
      "-c", `synchronous_commit=${options.fsync === true ? "on" : "off"}`,
      "-c", "full_page_writes=off",
      "-c", "shared_buffers=128MB"
    ].join(" ")
    const pgCtl = (args: ReadonlyArray<string>) => {
      const [cmd, argv] = asServerUser(join(bin, "pg_ctl"), args)
      return spawnSync(cmd, argv, { encoding: "utf8" })
    }
    // pg_ctl -w returns once the server accepts connections, and stops it with a fast shutdown.
    const start = Effect.suspend(() => {
      const started = pgCtl(["start", "-w", "-t", "60", "-D", data, "-l", join(root, "server.log"), "-o", options_])
      return started.status === 0
        ? Effect.void
        : new PgClusterError({ message: `postgres did not start: ${started.stdout}${started.stderr}`.slice(0, 2000) })
    })
    const stop = Effect.sync(() => void pgCtl(["stop", "-w", "-m", "fast", "-D", data]))
    yield* Effect.acquireRelease(start, () => stop)
    return {
      url: `postgres://postgres@127.0.0.1:${port}/postgres`,
      port,
      external: false,
      /** Stops the server (an outage: connections are cut) and starts it again on the same port and data. */
      stop,
      start
    }
  })

/** `DATABASE_URL` when set (an existing server), otherwise a throwaway cluster. */
export const PgClusterLive = Layer.scoped(
  PgCluster,
  Effect.suspend(() => {
    const url = process.env.DATABASE_URL
    if (url !== undefined && url !== "") {
      return Effect.succeed({ url, port: Number(new URL(url).port || 5432), external: true })
    }
    return Effect.map(startCluster(), ({ external, port, url }) => ({ url, port, external }))
  })
)
