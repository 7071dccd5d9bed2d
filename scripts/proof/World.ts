import { type BackendProcess, backendMain, createDatabase, freePort, makeLoopbackProvider, PgCluster, spawnBun, startCluster, waitForPort } from "@delivery/testing"
import { Duration, Effect, Scope } from "effect"
import { randomBytes } from "node:crypto"
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

// The proof's own world (spec 002, "Local proof"): a PostgreSQL cluster of its own, one loopback HTTP server that is
// both the mail provider (`/emails`) and the webhook receiver (`/hooks`) and can fail on command, private storage
// folders, and real `bun` backend processes on free loopback ports. Everything is removed when the scope closes.

export type Loopback = Effect.Effect.Success<typeof makeLoopbackProvider>

export interface Backend {
  readonly name: string
  readonly role: "backend" | "ingress"
  readonly port: number
  readonly url: string
  readonly process: BackendProcess
  readonly startedAt: number
}

export interface World {
  /** The run's private folder (storage roots, server logs); removed at the end. */
  readonly root: string
  readonly cluster: {
    readonly port: number
    /** An outage: the server stops (connections cut) and later starts again on the same port and data. */
    readonly stop: Effect.Effect<void>
    readonly start: Effect.Effect<void, unknown>
  }
  readonly databaseUrl: string
  readonly loopback: Loopback
  readonly operatorToken: string
  readonly mailToken: string
  readonly roots: { readonly staging: string; readonly storage: string }
  /** The environment every backend of the proof shares (database, operator token, delivery modes, provider). */
  readonly baseEnv: Readonly<Record<string, string>>
  /** Starts a backend (or ingress) process and waits until it listens; it is killed when the world closes. */
  readonly start: (name: string, options?: { readonly role?: "backend" | "ingress"; readonly env?: Readonly<Record<string, string>> }) =>
    Effect.Effect<Backend, unknown>
  /** Starts a process expected to stop by itself (for example a root failure): it is not waited on to listen. */
  readonly spawn: (name: string, options?: { readonly role?: "backend" | "ingress"; readonly env?: Readonly<Record<string, string>> }) =>
    Effect.Effect<Backend, unknown>
  /** Every process started so far (for the evidence: names, pids, ports). */
  readonly processes: () => ReadonlyArray<Backend>
  /** Every loopback port the proof listened on or gave a backend (checked free again at the end). */
  readonly ports: () => ReadonlyArray<number>
  /** A free loopback port for a listener the proof does not start itself (a cloud's proxy, a stack); checked too. */
  readonly reservePort: Effect.Effect<number>
}

const secret = (prefix: string) => `${prefix}-${randomBytes(32).toString("base64url")}`

export const makeWorld: Effect.Effect<World, unknown, Scope.Scope> = Effect.gen(function* () {
  // Processes live as long as the world: spawnBun's release kills each process group when this scope closes.
  const worldScope = yield* Effect.scope
  const root = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const dir = mkdtempSync(join(tmpdir(), "delivery-proof-"))
      chmodSync(dir, 0o700)
      return dir
    }),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )
  const roots = { staging: join(root, "staging"), storage: join(root, "storage") }
  mkdirSync(roots.staging, { mode: 0o700 })
  mkdirSync(roots.storage, { mode: 0o700 })

  const cluster = yield* startCluster({ maxConnections: 300 })
  const db = yield* createDatabase.pipe(Effect.provideService(PgCluster, cluster))
  const loopback = yield* makeLoopbackProvider
  const operatorToken = secret("op")
  const mailToken = secret("mail")
  const processes: Array<Backend> = []
  const ports: Array<number> = [cluster.port, loopback.port]

  const baseEnv: Record<string, string> = {
    DATABASE_URL: db.url,
    OPERATOR_TOKEN: operatorToken,
    IDENTITY_PEER_LIMIT: "1000000",
    LOG_LEVEL: "info",
    SHUTDOWN_DRAIN_MS: "2000",
    MAIL_PROVIDER_URL: loopback.urlFor("/emails"),
    MAIL_PROVIDER_TOKEN: mailToken,
    MAIL_PROVIDER_TIMEOUT: "2 seconds",
    PASSWORD_RESET_DELIVERY: "enabled",
    PASSWORD_RESET_FROM: "no-reply@proof.example",
    PASSWORD_RESET_ORIGIN: "https://app.proof.example",
    PASSWORD_RESET_TOKEN_KEY: randomBytes(32).toString("base64"),
    PASSWORD_RESET_POLL_INTERVAL: "100 millis",
    PASSWORD_RESET_RETRY_BASE: "200 millis",
    PASSWORD_RESET_RETRY_CAP: "1 second",
    RECEIPT_DELIVERY: "enabled",
    RECEIPT_FROM: "receipts@proof.example",
    RECEIPT_STAGING_ROOT: roots.staging,
    RECEIPT_STORAGE_ROOT: roots.storage,
    RECEIPT_POLL_INTERVAL: "100 millis",
    RECEIPT_RETRY_BASE: "200 millis",
    RECEIPT_RETRY_CAP: "1 second",
    TEAM_APPLICATION_DELIVERY: "enabled",
    TEAM_APPLICATION_FROM: "teams@proof.example",
    TEAM_APPLICATION_DELIVERY_POLL_INTERVAL: "50 millis",
    TEAM_APPLICATION_DELIVERY_STALE_MS: "3000",
    TEAM_APPLICATION_RETRY_BASE: "200 millis",
    TEAM_APPLICATION_RETRY_CAP: "1 second"
  }

  const launch = (name: string, options: { readonly role?: "backend" | "ingress"; readonly env?: Readonly<Record<string, string>> }, listen: boolean) =>
    Effect.gen(function* () {
      const port = yield* freePort
      ports.push(port)
      const role = options.role ?? "backend"
      const process = yield* spawnBun(backendMain, { ...baseEnv, ROLE: role, PORT: String(port), ...options.env })
      if (listen) {
        yield* process.waitForOutput(/listening on http:/, Duration.seconds(60))
        yield* waitForPort(port)
      }
      const backend: Backend = { name, role, port, url: `http://127.0.0.1:${port}`, process, startedAt: Date.now() }
      processes.push(backend)
      return backend
    })

  return {
    root,
    cluster: { port: cluster.port, stop: cluster.stop, start: cluster.start },
    databaseUrl: db.url,
    loopback,
    operatorToken,
    mailToken,
    roots,
    baseEnv,
    start: (name, options = {}) => Effect.provideService(launch(name, options, true), Scope.Scope, worldScope),
    spawn: (name, options = {}) => Effect.provideService(launch(name, options, false), Scope.Scope, worldScope),
    processes: () => processes.slice(),
    ports: () => ports.slice(),
    reservePort: Effect.tap(freePort, (port) => Effect.sync(() => ports.push(port)))
  } satisfies World
})
