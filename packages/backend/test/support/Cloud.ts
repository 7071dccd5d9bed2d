import { createDatabase, freePort, killStacks, OPERATOR_TOKEN, spawnBunScript, stackPids, TestDatabase } from "@delivery/testing"
import { encodeBase64Url, privateKeyFromSeed, rawPublicKey } from "@delivery/signer"
import { PgClusterFromVitest } from "@delivery/testing/vitest"
import { Effect, Schedule } from "effect"
import { createPublicKey, randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { call, type CallOptions } from "./Http.ts"

// Spec 001's cloud side through real processes: a ROLE=cloud process (`bun run start`) on a database of its own, and
// tenant stacks it starts and stops itself through the local compute provider, each a real tenant backend on the
// suite's database (one stack) or on a database of its own.

export const op = { token: OPERATOR_TOKEN }

export interface StackSpec {
  readonly id: string
  readonly port: number
  readonly audience: string
  readonly reportSeed: Buffer
  readonly databaseUrl: string
  readonly env?: Readonly<Record<string, string>>
}

export const reportKeyOf = (stack: StackSpec) =>
  `report-${stack.id}:${encodeBase64Url(rawPublicKey(createPublicKey(privateKeyFromSeed(stack.reportSeed))))}`

/** A stack on the given database (default: the suite's), with a fresh report key and port. */
export const makeStack = (options: { readonly databaseUrl?: string; readonly env?: Readonly<Record<string, string>> } = {}) =>
  Effect.gen(function* () {
    const db = yield* TestDatabase
    const id = `stack-${randomBytes(3).toString("hex")}`
    return {
      id,
      port: yield* freePort,
      audience: `tenant:${id}`,
      reportSeed: randomBytes(32),
      databaseUrl: options.databaseUrl ?? db.url,
      ...(options.env === undefined ? {} : { env: options.env })
    } satisfies StackSpec
  })

export interface CloudOptions {
  readonly stacks: ReadonlyArray<StackSpec>
  readonly env?: Readonly<Record<string, string>>
  /** Reuse a cloud database (a restarted cloud process); default a new one. */
  readonly databaseUrl?: string
  /** Reuse a run dir (a restarted cloud finds its stacks' pid files). */
  readonly runDir?: string
  readonly cloudSeed?: Buffer
}

/** The tenant environment of a stack: idle wake configured for this cloud's signing key. */
const tenantEnv = (stack: StackSpec, cloudPublicKey: string) => ({
  DATABASE_URL: stack.databaseUrl,
  OPERATOR_TOKEN,
  IDENTITY_PEER_LIMIT: "1000000",
  PASSWORD_RESET_DELIVERY: "disabled",
  RECEIPT_DELIVERY: "disabled",
  IDLE_WAKE_STACK: stack.id,
  IDLE_WAKE_AUDIENCE: stack.audience,
  IDLE_WAKE_CLOUD_KEYS: `cloud-1:${cloudPublicKey}`,
  IDLE_WAKE_REPORT_KEY: `report-${stack.id}:${stack.reportSeed.toString("base64url")}`,
  ...stack.env
})

/** `bun run start` with ROLE=cloud, its local compute provider running the given stacks. */
export const startCloud = (options: CloudOptions) =>
  Effect.gen(function* () {
    const databaseUrl = options.databaseUrl ?? (yield* Effect.provide(createDatabase, PgClusterFromVitest)).url
    const runDir = options.runDir ?? mkdtempSync(join(tmpdir(), "cloud-stacks-"))
    if (options.runDir === undefined) yield* Effect.addFinalizer(() => killStacks(runDir, { remove: true }))
    const cloudSeed = options.cloudSeed ?? randomBytes(32)
    const cloudPublicKey = encodeBase64Url(rawPublicKey(createPublicKey(privateKeyFromSeed(cloudSeed))))
    const port = yield* freePort
    const proxyPort = yield* freePort
    const local = Object.fromEntries(options.stacks.map((stack) => [stack.id, { port: stack.port, env: tenantEnv(stack, cloudPublicKey) }]))
    const process = yield* spawnBunScript("start", {
      ROLE: "cloud",
      DATABASE_URL: databaseUrl,
      PORT: String(port),
      OPERATOR_TOKEN,
      IDENTITY_PEER_LIMIT: "1000000",
      IDLE_WAKE_CLOUD_SIGNING_KEY: `cloud-1:${cloudSeed.toString("base64url")}`,
      IDLE_WAKE_PROXY_PORT: String(proxyPort),
      IDLE_WAKE_LOCAL_STACKS: JSON.stringify(local),
      IDLE_WAKE_LOCAL_RUN_DIR: runDir,
      IDLE_WAKE_SLEEP_HOLD: "30 seconds",
      ...options.env
    })
    yield* process.waitForOutput(/wake proxy listening on http:/)
    return { port, proxyPort, process, databaseUrl, runDir, cloudSeed }
  })

export type Cloud = Effect.Effect.Success<ReturnType<typeof startCloud>>

/** A request to the proxy as a client of `host` would send it. */
export const viaProxy = (cloud: Cloud, host: string, method: string, path: string, options: CallOptions = {}) =>
  call(cloud.proxyPort, method, path, { ...options, headers: { host, ...options.headers } })

/** Registers the stack (its compute is started) with one host and the tenant-api-http-v2 profile. */
export const registerStack = (cloud: Cloud, stack: StackSpec, host: string, profiles: ReadonlyArray<string> = ["tenant-api-http-v2"]) =>
  Effect.gen(function* () {
    const registered = yield* call(cloud.port, "POST", "/operator/cloud/stacks", {
      ...op,
      body: { stack: stack.id, audience: stack.audience, reportKey: reportKeyOf(stack), profiles }
    })
    if (registered.status !== 201) return yield* Effect.dieMessage(`register: ${registered.status} ${registered.text}\n${yield* cloud.process.output}`)
    const added = yield* call(cloud.port, "POST", `/operator/cloud/stacks/${stack.id}/hosts`, { ...op, body: { host } })
    if (added.status !== 201) return yield* Effect.dieMessage(`host: ${added.status} ${added.text}`)
    return registered.json
  })

export const stackState = (cloud: Cloud, stack: StackSpec) =>
  Effect.map(call(cloud.port, "GET", `/operator/cloud/stacks/${stack.id}`, op), (answer) => answer.json)

export const sleepStack = (cloud: Cloud, stack: StackSpec) =>
  Effect.map(call(cloud.port, "POST", `/operator/cloud/stacks/${stack.id}/sleep`, op), (answer) => answer.json)

/** The pid in a stack's pid file (the tenant process the provider started), or undefined. */
export const stackPid = (cloud: Cloud, stack: StackSpec): number | undefined => {
  const file = join(cloud.runDir, `${stack.id}.pid`)
  return existsSync(file) ? stackPids(cloud.runDir).find((pid) => readFileSync(file, "utf8").startsWith(`${pid}\n`)) : undefined
}

/** How many times the provider started a stack: "listening on" lines in its log. */
export const startsOf = (cloud: Cloud, stack: StackSpec): number => {
  const file = join(cloud.runDir, `${stack.id}.log`)
  return existsSync(file) ? (readFileSync(file, "utf8").match(/listening on http:/g) ?? []).length : 0
}

/** The cloud's admission counters now. */
export const admissionOf = (cloud: Cloud) => Effect.map(call(cloud.port, "GET", "/operator/cloud/admission", op), (answer) => answer.json)

/** Waits until the cloud holds exactly `count` requests (they are waiting for a stack). */
export const waitForHeld = (cloud: Cloud, count: number) =>
  admissionOf(cloud).pipe(
    Effect.repeat({ until: (admission) => admission.waiting === count, schedule: Schedule.spaced("50 millis") }),
    Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error(`the cloud never held ${count} request(s)`) }),
    Effect.asVoid
  )

/** The tenant entry whose cold start takes SLOW_START_MS (set in the stack's env). */
export const slowTenantEntry = new URL("../fixtures/SlowTenant.ts", import.meta.url).pathname
export const resettingUpstreamEntry = new URL("../fixtures/ResettingUpstream.ts", import.meta.url).pathname
