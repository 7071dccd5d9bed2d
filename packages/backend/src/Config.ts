import {
  IDENTITY_CONFIG,
  OPERATOR_CONFIG,
  OperatorTokenConfig,
  PeerLimitConfig,
  ResetTokenKeyConfig,
  ResetTtlConfig,
  SessionTtlConfig,
  SignInLimitConfig
} from "@delivery/identity"
import { SIGNER_CONFIG, SIGNER_REPLAY_WINDOW, SignerConfig } from "@delivery/signer"
import { INBOX_CONFIG, InboxConfig } from "@delivery/envelope-inbox"
import { OUTBOX_CONFIG, OutboxConfig } from "@delivery/outbox"
import { loadResetDelivery, RESET_MAIL_CONFIG, type ResetDelivery, ResetRequestConfig } from "@delivery/reset-mail"
import { loadReceiptsSettings, RECEIPTS_CONFIG, type ReceiptsSettings } from "@delivery/receipts"
import { loadTeamApplicationsSettings, TEAM_APPLICATIONS_CONFIG, type TeamApplicationsSettings } from "@delivery/team-applications"
import { CLOUD_CONFIG, type CloudSettings, IDLE_WAKE_CONFIG, type IdleWakeSettings, loadIdleWakeSettings } from "@delivery/idle-wake"
import { familyDefault, loadCloudSettings } from "./RoleConfig.ts"
import { CONSOLE_CONFIG, ConsoleConfig } from "@delivery/console"
import { describeObservability, OBSERVABILITY_CONFIG, ObservabilityConfig } from "./ObservabilityConfig.ts"
import { integerBetween, LIMIT_STORE_CONFIG, LimitStoreConfig, repositoryRootOf } from "@delivery/core"
import { Config, ConfigError, Context, Data, Duration, Effect, Either, Layer, LogLevel, Option, Redacted, Schema } from "effect"
import { isIP } from "node:net"
import { join } from "node:path"

/**
 * `backend` runs HTTP and the delivery workers; `ingress` runs HTTP only and never starts delivery workers (spec 002);
 * `cloud` is idle wake's cloud side (spec 001): the stack registry, the sleep operation and the wake proxy.
 */
export const Role = Schema.Literal("backend", "ingress", "cloud")
export type Role = typeof Role.Type

/** The repository's `.data/pglite` (git-ignored), wherever the process was started from. */
export const defaultEmbeddedDataDir = join(repositoryRootOf(import.meta.url), ".data/pglite")

export interface ConfigEntry {
  readonly name: string
  readonly default: string
  readonly meaning: string
  readonly secret: boolean
}

/** Every variable the backend reads, for docs/configuration.md and for the start-up error message. */
export const CONFIG: ReadonlyArray<ConfigEntry> = [
  { name: "ROLE", default: "backend", meaning: "`backend` (HTTP + delivery workers), `ingress` (HTTP only, never starts delivery workers) or `cloud` (idle wake's cloud side: stacks, the sleep operation and the wake proxy; requires DATABASE_URL, docs/idle-wake-cloud.md)", secret: false },
  { name: "HOST", default: "127.0.0.1", meaning: "interface the HTTP server binds to: a host name, or an IPv4 or IPv6 address literal without brackets (`0.0.0.0`, `::` for all interfaces)", secret: false },
  { name: "PORT", default: "3000", meaning: "TCP port of the HTTP server (1-65535)", secret: false },
  { name: "DATABASE_URL", default: "(unset: embedded PGlite, development only)", meaning: "postgres:// or postgresql:// URL of the PostgreSQL database", secret: true },
  { name: "DATABASE_POOL_MAX", default: "10", meaning: "maximum pooled connections to DATABASE_URL, 1-1000 (the embedded database always uses 1); keep the sum over all processes below the server's max_connections", secret: false },
  { name: "WORKERS", default: "1", meaning: "backend processes on this host, 1-64: above 1 the started process supervises that many processes listening on one PORT (SO_REUSEPORT), each with its own pool of DATABASE_POOL_MAX; needs DATABASE_URL; not with ROLE=cloud (docs/scaling.md)", secret: false },
  { name: "SHUTDOWN_DRAIN_MS", default: "10000", meaning: "how long SIGTERM/SIGINT waits for in-flight HTTP requests before interrupting them (0-3600000)", secret: false },
  { name: "MAX_REQUEST_BODY_BYTES", default: "1048576", meaning: "largest accepted request body (1 byte to 1 GiB), enforced by the HTTP edge on the declared length and while a chunked body streams in; larger bodies get 413 `body-too-large` (docs/http.md)", secret: false },
  { name: "READY_CHECK_TIMEOUT_MS", default: "2000", meaning: "bound on each database check behind GET /ready (1-60000)", secret: false },
  { name: "EMBEDDED_DATA_DIR", default: "<repo>/.data/pglite", meaning: "data folder of the embedded development database (relative paths resolve from the working directory; set but empty is refused); used only when DATABASE_URL is unset", secret: false },
  { name: "LOG_LEVEL", default: "info", meaning: "minimum log level, case-insensitive: all, trace, debug, info, warn, error, fatal, off", secret: false },
  ...LIMIT_STORE_CONFIG,
  ...OBSERVABILITY_CONFIG,
  // The packages' own variables, validated up front with the backend's (see `appConfig`).
  ...IDENTITY_CONFIG,
  ...OPERATOR_CONFIG,
  ...CONSOLE_CONFIG,
  ...SIGNER_CONFIG,
  ...INBOX_CONFIG,
  ...OUTBOX_CONFIG,
  ...RESET_MAIL_CONFIG,
  ...RECEIPTS_CONFIG,
  ...TEAM_APPLICATIONS_CONFIG,
  ...IDLE_WAKE_CONFIG,
  ...CLOUD_CONFIG
]

const secretNames = new Set(CONFIG.filter((entry) => entry.secret).map((entry) => entry.name))

// A DNS name of RFC 1123 labels. A numeric last label is refused, as URL parsers do: "1.2.3" or
// "256.1.1.1" are broken addresses, not names.
const LABEL = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/
const isHostName = (text: string) => {
  const name = text.endsWith(".") ? text.slice(0, -1) : text
  const labels = name.split(".")
  return name.length > 0 && name.length <= 253 && labels.every((label) => LABEL.test(label)) && !/^\d+$/.test(labels.at(-1)!)
}

const host = Config.string().pipe(
  Config.validate({
    message: "Expected a host name or an IPv4/IPv6 address literal without brackets, e.g. 127.0.0.1, ::1 or api.internal",
    validation: (text) => isIP(text) !== 0 || isHostName(text)
  }),
  Config.nested("HOST"),
  Config.withDefault("127.0.0.1")
)

// `Config.nonEmptyString` reports "" as missing, so `withDefault` would quietly replace a variable that was set.
const nonEmptyPath = (name: string) =>
  Config.string().pipe(
    Config.validate({ message: "Expected a path; an empty value is refused (unset the variable for the default)", validation: (text) => text.length > 0 }),
    Config.nested(name)
  )

const isPostgresUrl = (text: string) => {
  try {
    const url = new URL(text)
    return (url.protocol === "postgres:" || url.protocol === "postgresql:") && url.hostname !== ""
  } catch {
    return false
  }
}

// The message never echoes the value: a URL may carry the password.
const databaseUrlMessage =
  "Expected a postgres:// or postgresql:// URL with a host (value not shown; unset it to use the embedded development database)"
const safeSecretMessages = new Set([databaseUrlMessage])
// The packages' validations of secrets (OPERATOR_TOKEN, SIGNER_KEYS) never include the value and say so in their
// message; only those messages are printed as they are.
const isSafeSecretMessage = (message: string) => safeSecretMessages.has(message) || message.endsWith("(value not shown)")

const databaseUrl = Config.redacted().pipe(
  Config.validate({
    message: databaseUrlMessage,
    validation: (url) => isPostgresUrl(Redacted.value(url))
  }),
  Config.nested("DATABASE_URL"),
  Config.option
)

const MaxRequestBodyBytes = integerBetween("MAX_REQUEST_BODY_BYTES", 1, 1024 ** 3, 1024 * 1024)

/** One `Config.all`: every variable is read and every problem is reported together. */
const baseConfig = Config.all({
  role: Config.literal("backend", "ingress", "cloud")("ROLE").pipe(Config.withDefault<Role>("backend")),
  host,
  port: Config.port("PORT").pipe(Config.withDefault(3000)),
  databaseUrl,
  // A pool bigger than the server's max_connections only turns load into connection errors.
  databasePoolMax: integerBetween("DATABASE_POOL_MAX", 1, 1_000, 10),
  workers: integerBetween("WORKERS", 1, 64, 1),
  // Whether REDIS_URL is set; the store itself is built by core's LimitStoreLive from the same variables.
  limitStore: Config.map(LimitStoreConfig, (settings) => (Option.isSome(settings.url) ? "redis" as const : "memory" as const)),
  shutdownDrainMs: integerBetween("SHUTDOWN_DRAIN_MS", 0, 3_600_000, 10_000),
  maxRequestBodyBytes: MaxRequestBodyBytes,
  readyCheckTimeoutMs: integerBetween("READY_CHECK_TIMEOUT_MS", 1, 60_000, 2_000),
  embeddedDataDir: nonEmptyPath("EMBEDDED_DATA_DIR").pipe(Config.withDefault(defaultEmbeddedDataDir)),
  logLevel: Config.logLevel("LOG_LEVEL").pipe(Config.withDefault(LogLevel.Info)),
  // LOG_FORMAT, METRICS_TOKEN and the trace export: read again by main.ts before the runtime starts (the format),
  // used by the runtime's telemetry layer (the rest).
  observability: ObservabilityConfig,
  // Read again by the packages' layers from the same environment; checked here so that every bad variable is in
  // the one start-up message. Only whether OPERATOR_TOKEN is set is kept, not the token.
  identity: PeerLimitConfig,
  sessionTtl: SessionTtlConfig,
  signInLimit: SignInLimitConfig,
  // Whether reset tokens can be made here; the key itself is read again by the identity layer.
  resetTokenKey: Config.map(Config.option(ResetTokenKeyConfig), (key) => (Option.isSome(key) ? "set" : "unset")),
  resetTtl: ResetTtlConfig,
  resetRequests: ResetRequestConfig,
  operatorRoutes: Config.map(OperatorTokenConfig, (token) => (Option.isSome(token) ? "enabled" : "disabled")),
  console: ConsoleConfig,
  signer: SignerConfig,
  inbox: InboxConfig,
  outbox: OutboxConfig
}).pipe(
  // Spec 000: "old public keys remain verifiable for the retention/replay window". A retired key that stops
  // verifying while payloads it signed are still retained would make their resends unverifiable.
  Config.mapOrFail((config) =>
    Duration.lessThan(config.signer.replayWindow, config.inbox.payloadRetention)
      ? Either.left(ConfigError.InvalidData(
        [SIGNER_REPLAY_WINDOW],
        `Expected at least INBOX_PAYLOAD_RETENTION (${Duration.format(config.inbox.payloadRetention)}), got ${
          Duration.format(config.signer.replayWindow)
        }: retired keys must keep verifying while the payloads they signed are retained; lengthen ${SIGNER_REPLAY_WINDOW} or shorten INBOX_PAYLOAD_RETENTION`
      ))
      : Either.right(config)
  ),
  // Each process of WORKERS would start its own embedded database; the cloud's compute and admission are per process.
  Config.mapOrFail((config) =>
    config.workers > 1 && Option.isNone(config.databaseUrl)
      ? Either.left(ConfigError.InvalidData(["WORKERS"], "Expected 1 without DATABASE_URL: the embedded development database serves one process"))
      : config.workers > 1 && config.role === "cloud"
      ? Either.left(ConfigError.InvalidData(["WORKERS"], "Expected 1 with ROLE=cloud: run one cloud process per host (docs/scaling.md)"))
      : Either.right(config)
  )
)

export type AppConfigShape = Config.Config.Success<typeof baseConfig> & {
  /** PASSWORD_RESET_DELIVERY and, when enabled, the reset-mail worker's settings (spec 002: required for every role). */
  readonly passwordReset: ResetDelivery
  /** RECEIPT_DELIVERY, the receipt provider configuration and storage roots (spec 002: required for every role). */
  readonly receipts: ReceiptsSettings
  /** TEAM_APPLICATION_DELIVERY (optional, `disabled` when unset), the sender and, when enabled, the provider. */
  readonly teamApplications: TeamApplicationsSettings
  /** Spec 001's tenant side: this stack's id, the cloud signer's keys, the report key and the configured ingress. */
  readonly idleWake: IdleWakeSettings
  /** Spec 001's cloud side, with ROLE=cloud only. */
  readonly cloud: Option.Option<CloudSettings>
}

// The receipts' file limit defaults to it; a bad value is reported by the base configuration.
const bodyLimit = Effect.orElseSucceed(MaxRequestBodyBytes, () => 1024 * 1024)

/**
 * Every variable, every problem reported together: the base variables and the reset-mail delivery mode, whose
 * worker variables are read (and all required) only when it is `enabled`.
 */
export const appConfig: Effect.Effect<AppConfigShape, ConfigError.ConfigError> = Effect.all(
  [
    baseConfig,
    Effect.flatMap(familyDefault, loadResetDelivery),
    Effect.flatMap(Effect.all([familyDefault, bodyLimit]), ([isDefaulted, limit]) => loadReceiptsSettings(isDefaulted, limit)),
    loadTeamApplicationsSettings,
    loadIdleWakeSettings,
    loadCloudSettings
  ],
  { mode: "either" }
).pipe(
  Effect.flatMap(([base, reset, receipts, teamApplications, idleWake, cloud]) => {
    if (
      Either.isRight(base) && Either.isRight(reset) && Either.isRight(receipts) && Either.isRight(teamApplications) &&
      Either.isRight(idleWake) && Either.isRight(cloud)
    ) {
      return Effect.succeed({
        ...base.right,
        passwordReset: reset.right,
        receipts: receipts.right,
        teamApplications: teamApplications.right,
        idleWake: idleWake.right,
        cloud: cloud.right
      })
    }
    const errors: Array<ConfigError.ConfigError> = []
    if (Either.isLeft(base)) errors.push(base.left)
    if (Either.isLeft(reset)) errors.push(reset.left)
    if (Either.isLeft(receipts)) errors.push(receipts.left)
    if (Either.isLeft(teamApplications)) errors.push(teamApplications.left)
    if (Either.isLeft(idleWake)) errors.push(idleWake.left)
    if (Either.isLeft(cloud)) errors.push(cloud.left)
    return Effect.fail(errors.reduce((left, right) => ConfigError.And(left, right)))
  })
)

export class AppConfig extends Context.Tag("@delivery/backend/AppConfig")<AppConfig, AppConfigShape>() {}

/** Stops start-up; `message` names every bad variable and never a secret's value. */
export class ConfigurationError extends Data.TaggedError("ConfigurationError")<{
  readonly message: string
  readonly variables: ReadonlyArray<string>
}> {
  constructor(args: { readonly message: string; readonly variables: ReadonlyArray<string> }) {
    super(args)
    // The message is the whole report: a stack trace would only repeat it at start-up.
    this.stack = `${this.name}: ${this.message}`
  }
}

interface Problem {
  readonly variable: string
  readonly message: string
}

const problemsOf = (error: ConfigError.ConfigError): ReadonlyArray<Problem> =>
  ConfigError.reduceWithContext(error, undefined, {
    andCase: (_, left, right) => [...left, ...right],
    orCase: (_, left, right) => [...left, ...right],
    invalidDataCase: (_, path, message) => [{ variable: path.join("_"), message }],
    missingDataCase: (_, path, message) => [{ variable: path.join("_"), message }],
    sourceUnavailableCase: (_, path, message) => [{ variable: path.join("_"), message }],
    unsupportedCase: (_, path, message) => [{ variable: path.join("_"), message }]
  } satisfies ConfigError.ConfigErrorReducer<undefined, ReadonlyArray<Problem>>)

/** One message listing each bad variable once, in CONFIG order. */
export const formatConfigError = (error: ConfigError.ConfigError): ConfigurationError => {
  const byVariable = new Map<string, Array<string>>()
  for (const problem of problemsOf(error)) {
    // A secret's problem is restated generically in case a validation ever echoes the value.
    const message = secretNames.has(problem.variable) && !isSafeSecretMessage(problem.message)
      ? "invalid (value not shown: secret)"
      : problem.message
    const messages = byVariable.get(problem.variable) ?? []
    if (!messages.includes(message)) messages.push(message)
    byVariable.set(problem.variable, messages)
  }
  const order = CONFIG.map((entry) => entry.name)
  const rank = (name: string) => (order.indexOf(name) === -1 ? order.length : order.indexOf(name))
  const variables = [...byVariable.keys()].sort((a, b) => rank(a) - rank(b))
  const lines = variables.map((name) => `  ${name}: ${byVariable.get(name)!.join("; ")}`)
  return new ConfigurationError({
    variables,
    message: `Invalid configuration, nothing was started (${variables.length} problem${variables.length === 1 ? "" : "s"}: ${variables.join(", ")}):\n${lines.join("\n")}`
  })
}

export const loadConfig: Effect.Effect<AppConfigShape, ConfigurationError> = appConfig.pipe(
  Effect.mapError(formatConfigError)
)

export const AppConfigLive = Layer.effect(AppConfig, loadConfig)

/** What start-up logs about the configuration: everything but the database URL. */
export const describeConfig = (config: AppConfigShape) => ({
  role: config.role,
  host: config.host,
  port: config.port,
  database: Option.isSome(config.databaseUrl) ? "DATABASE_URL" : `embedded (${config.embeddedDataDir})`,
  databasePoolMax: config.databasePoolMax,
  workers: config.workers,
  limitStore: config.limitStore,
  shutdownDrainMs: config.shutdownDrainMs,
  maxRequestBodyBytes: config.maxRequestBodyBytes,
  readyCheckTimeoutMs: config.readyCheckTimeoutMs,
  logLevel: config.logLevel.label,
  ...describeObservability(config.observability),
  operatorRoutes: config.operatorRoutes,
  signerKeys: config.signer.keySource.source,
  passwordResetDelivery: config.passwordReset.mode,
  receiptDelivery: config.receipts.mode,
  receiptProvider: Option.isSome(config.receipts.provider) ? "configured" : "none",
  receiptStorage: Option.isSome(config.receipts.roots) ? "configured" : "none",
  teamApplicationDelivery: config.teamApplications.mode,
  teamApplicationSender: Option.isSome(config.teamApplications.sender) ? "configured" : "none",
  passwordResetTokenKey: config.resetTokenKey,
  idleWakeStack: Option.getOrElse(Option.map(config.idleWake.tenant, (tenant) => tenant.stack as string), () => "none"),
  idleWakeIngress: config.idleWake.ingress.length === 0 ? "none" : config.idleWake.ingress.join(","),
  ...Option.match(config.cloud, {
    onNone: () => ({}),
    onSome: (cloud) => ({ cloudProxy: `${cloud.proxyHost}:${cloud.proxyPort}`, cloudSigningKey: cloud.signingKeyId, cloudLocalStacks: cloud.local.stacks.size })
  })
})
