import { positiveDuration, repositoryRootOf } from "@delivery/core"
import { Config, ConfigError, type Duration, Either, Redacted } from "effect"
import { join, resolve } from "node:path"

// The local compute provider's settings (LocalCompute.ts): the stacks it may start, where their pid files and logs
// live, what each runs and how long a start or a stop may take.

export const IDLE_WAKE_LOCAL_STACKS = "IDLE_WAKE_LOCAL_STACKS"
export const IDLE_WAKE_LOCAL_RUN_DIR = "IDLE_WAKE_LOCAL_RUN_DIR"
export const IDLE_WAKE_LOCAL_ENTRY = "IDLE_WAKE_LOCAL_ENTRY"
export const IDLE_WAKE_LOCAL_START_TIMEOUT = "IDLE_WAKE_LOCAL_START_TIMEOUT"
export const IDLE_WAKE_LOCAL_STOP_TIMEOUT = "IDLE_WAKE_LOCAL_STOP_TIMEOUT"

export const MAX_LOCAL_STACKS = 64
export const MAX_LOCAL_ENV_ENTRIES = 128
export const MAX_LOCAL_ENV_VALUE = 4096

const STACK_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/
const ENV_NAME = /^[A-Z_][A-Z0-9_]{0,127}$/
// The provider decides where a tenant listens; a stack's own HOST or PORT would make its port probe lie.
const RESERVED_ENV = new Set(["PORT", "HOST"])

export const repoRoot = repositoryRootOf(import.meta.url)
const defaultRunDir = join(repoRoot, ".data/stacks")
// What `bun run start` runs: the backend as one bundle (docs/operations.md, "Start"), which a stack starts faster.
const defaultEntry = join(repoRoot, "packages/backend/src/start.ts")

export interface LocalStackSettings {
  readonly port: number
  /** The tenant's own variables (its DATABASE_URL, keys): secret, so kept Redacted. */
  readonly env: Redacted.Redacted<Readonly<Record<string, string>>>
}

export interface LocalComputeSettings {
  readonly stacks: ReadonlyMap<string, LocalStackSettings>
  /** Pid files and per-stack logs. */
  readonly runDir: string
  readonly entry: string
  readonly startTimeout: Duration.Duration
  readonly stopTimeout: Duration.Duration
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * The stacks' JSON. Every message names a rule and a position (in the object's key order), never a value or any
 * part of one: stack ids, ports and variable names are part of a secret variable too.
 */
export const parseLocalStacks = (text: string): Either.Either<ReadonlyMap<string, LocalStackSettings>, string> => {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    // JSON.parse's own message quotes the text around the mistake.
    return Either.left("Expected a JSON object of stacks (value not shown)")
  }
  if (!isObject(parsed)) return Either.left("Expected a JSON object of stacks (value not shown)")
  const entries = Object.entries(parsed)
  if (entries.length > MAX_LOCAL_STACKS) return Either.left(`Expected at most ${MAX_LOCAL_STACKS} stacks`)
  const stacks = new Map<string, LocalStackSettings>()
  const ports = new Set<number>()
  for (const [index, [id, value]] of entries.entries()) {
    const at = `stack ${index + 1}`
    if (!STACK_ID.test(id)) return Either.left(`${at}: expected a stack id matching ${STACK_ID.source}`)
    if (!isObject(value)) return Either.left(`${at}: expected an object { "port": ..., "env": { ... } }`)
    if (Object.keys(value).some((key) => key !== "port" && key !== "env")) {
      return Either.left(`${at}: unknown member; expected only "port" and "env"`)
    }
    const port = value.port
    if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
      return Either.left(`${at}: expected "port" to be an integer between 1 and 65535`)
    }
    if (ports.has(port)) return Either.left(`${at}: its port is already another stack's`)
    ports.add(port)
    const env = value.env ?? {}
    if (!isObject(env)) return Either.left(`${at}: expected "env" to be an object of strings`)
    const names = Object.entries(env)
    if (names.length > MAX_LOCAL_ENV_ENTRIES) return Either.left(`${at}: expected at most ${MAX_LOCAL_ENV_ENTRIES} env entries`)
    for (const [position, [name, setting]] of names.entries()) {
      const where = `${at}, env entry ${position + 1}`
      if (!ENV_NAME.test(name)) return Either.left(`${where}: expected a name matching ${ENV_NAME.source}`)
      if (RESERVED_ENV.has(name)) return Either.left(`${where}: PORT and HOST are set by the provider`)
      // A NUL cannot be passed in an environment: spawn would refuse it at the first wake instead of at start-up.
      if (typeof setting !== "string" || setting.length > MAX_LOCAL_ENV_VALUE || setting.includes("\u0000")) {
        return Either.left(`${where}: expected a string of at most ${MAX_LOCAL_ENV_VALUE} characters without NUL`)
      }
    }
    stacks.set(id, { port, env: Redacted.make(Object.freeze({ ...(env as Record<string, string>) })) })
  }
  return Either.right(stacks)
}

// Before `nested(name)`: the path is filled in by `nested`, so the start-up message names the variable.
const refusal = (message: string) => ConfigError.InvalidData([], message)

const stacksConfig = Config.redacted().pipe(
  Config.mapOrFail((secret) => Either.mapLeft(parseLocalStacks(Redacted.value(secret)), refusal)),
  Config.nested(IDLE_WAKE_LOCAL_STACKS),
  Config.withDefault<ReadonlyMap<string, LocalStackSettings>>(new Map())
)

// Resolved once: a pid file must not move when the working directory does.
const pathConfig = (name: string, fallback: string) =>
  Config.string().pipe(
    Config.validate({ message: "Expected a non-empty path", validation: (text) => text.trim() !== "" }),
    Config.map((text) => resolve(text)),
    Config.nested(name),
    Config.withDefault(fallback)
  )

export const LocalComputeConfig: Config.Config<LocalComputeSettings> = Config.all({
  stacks: stacksConfig,
  runDir: pathConfig(IDLE_WAKE_LOCAL_RUN_DIR, defaultRunDir),
  entry: pathConfig(IDLE_WAKE_LOCAL_ENTRY, defaultEntry),
  startTimeout: positiveDuration(IDLE_WAKE_LOCAL_START_TIMEOUT, "60 seconds"),
  stopTimeout: positiveDuration(IDLE_WAKE_LOCAL_STOP_TIMEOUT, "30 seconds")
})

/** The local compute's variables, for the backend's configuration table. */
export const LOCAL_COMPUTE_CONFIG = [
  { name: IDLE_WAKE_LOCAL_STACKS, default: "(unset: no local stacks)", meaning: `ROLE=cloud, local compute: JSON \`{ "<stack id>": { "port": <1-65535>, "env": { "<NAME>": "<value>" } } }\`; at most ${MAX_LOCAL_STACKS} stacks with distinct ports, ids matching ${STACK_ID.source}, at most ${MAX_LOCAL_ENV_ENTRIES} env entries each (names matching ${ENV_NAME.source}, not PORT or HOST; values at most ${MAX_LOCAL_ENV_VALUE} characters); unknown members refused. Each stack's tenant backend gets only PATH, HOME, NO_COLOR=1, its env, HOST=127.0.0.1 and PORT`, secret: true },
  { name: IDLE_WAKE_LOCAL_RUN_DIR, default: "<repository>/.data/stacks", meaning: "ROLE=cloud, local compute: where each stack's pid file and log live (created with mode 0700)", secret: false },
  { name: IDLE_WAKE_LOCAL_ENTRY, default: "<repository>/packages/backend/src/start.ts", meaning: "ROLE=cloud, local compute: the script each stack runs with `bun --no-env-file` (the default runs the backend as one bundle, as `bun run start` does)", secret: false },
  { name: IDLE_WAKE_LOCAL_START_TIMEOUT, default: "60 seconds", meaning: "ROLE=cloud, local compute: how long a start waits for the stack's port to accept connections", secret: false },
  { name: IDLE_WAKE_LOCAL_STOP_TIMEOUT, default: "30 seconds", meaning: "ROLE=cloud, local compute: how long a stop waits for the stack to exit after SIGTERM before answering uncertain (no SIGKILL: the tenant drains on SIGTERM)", secret: false }
] as const

/** A process this provider started, or found through a pid file. `start` fences pid reuse where /proc exists. */
