import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Either, Fiber, Option } from "effect"
import { appConfig, CONFIG, defaultEmbeddedDataDir, formatConfigError } from "../src/Config.ts"
import { backendMain, freePort, probePort, spawnBun } from "@delivery/testing"
import { CLOUD_CONFIG } from "@delivery/idle-wake"

const load = (env: Record<string, string>) =>
  Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))).pipe(
    Effect.mapError(formatConfigError),
    Effect.either
  )

describe("configuration", () => {
  it.effect("an empty environment is a complete configuration: every variable has its documented default (no DATABASE_URL selects the embedded development database)", () =>
    Effect.gen(function* () {
      const config = Either.getOrThrow(yield* load({}))
      expect(config.role).toBe("backend")
      expect(config.host).toBe("127.0.0.1")
      expect(config.port).toBe(3000)
      expect(Option.isNone(config.databaseUrl)).toBe(true)
      expect(config.databasePoolMax).toBe(10)
      expect(config.shutdownDrainMs).toBe(10_000)
      expect(config.maxRequestBodyBytes).toBe(1024 * 1024)
      expect(config.embeddedDataDir).toBe(defaultEmbeddedDataDir)
      expect(config.logLevel.label).toBe("INFO")
      expect(CONFIG.map((entry) => entry.name)).toContain("DATABASE_URL")
    }))

  it.effect("WORKERS: 1-64, above 1 only with DATABASE_URL (the embedded database serves one process) and never with ROLE=cloud; the limit store named from REDIS_URL", () =>
    Effect.gen(function* () {
      const common = { PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" }
      const withDatabase = { ...common, DATABASE_URL: "postgres://db.internal/app" }
      const two = yield* Effect.flatten(load({ ...withDatabase, WORKERS: "2", REDIS_URL: "redis://cache.internal:6380/1" }))
      expect([two.workers, two.limitStore]).toEqual([2, "redis"])
      expect((yield* Effect.flatten(load(withDatabase))).limitStore).toBe("memory")
      const embedded = yield* Effect.flip(Effect.flatten(load({ ...common, WORKERS: "2" })))
      expect(embedded.message).toContain("WORKERS: Expected 1 without DATABASE_URL")
      const cloud = yield* Effect.flip(Effect.flatten(load({
        ROLE: "cloud",
        DATABASE_URL: "postgres://db.internal/cloud",
        IDLE_WAKE_CLOUD_SIGNING_KEY: `cloud-1:${"A".repeat(43)}`,
        IDLE_WAKE_PROXY_PORT: "4000",
        WORKERS: "2"
      })))
      expect(cloud.message).toContain("WORKERS: Expected 1 with ROLE=cloud")
    }))

  it.effect("Secrets belong in the process environment: an invalid DATABASE_URL is named without its value", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Effect.flatten(load({ DATABASE_URL: "mysql://app:hunter2@db.internal/app", DATABASE_POOL_MAX: "0", PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" }))
      )
      expect(error.variables).toEqual(["DATABASE_URL", "DATABASE_POOL_MAX"])
      expect(error.message).not.toContain("hunter2")
      expect(error.message).not.toContain("db.internal")
    }))

  // One invalid value per variable. A variable added to CONFIG without one here fails the first test below.
  const invalid: Record<string, string> = {
    ROLE: "nope",
    HOST: "not a host!",
    PORT: "abc",
    DATABASE_URL: "mysql://app:hunter2@db.internal/app",
    DATABASE_POOL_MAX: "0",
    WORKERS: "65",
    REDIS_URL: "http://app:hunter2@cache.internal",
    REDIS_KEY_PREFIX: "has space",
    REDIS_COMMAND_TIMEOUT: "0 millis",
    SHUTDOWN_DRAIN_MS: "-1",
    MAX_REQUEST_BODY_BYTES: "0",
    READY_CHECK_TIMEOUT_MS: "0",
    EMBEDDED_DATA_DIR: "",
    LOG_LEVEL: "loud",
    LOG_FORMAT: "xml",
    METRICS_TOKEN: "short",
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://user:pw@collector:4318",
    OTEL_SERVICE_NAME: "",
    IDENTITY_PEER_LIMIT: "0",
    IDENTITY_PEER_WINDOW: "soon",
    IDENTITY_SESSION_TTL: "0 seconds",
    IDENTITY_SIGNIN_LIMIT: "0",
    IDENTITY_SIGNIN_WINDOW: "later",
    TRUSTED_PROXY_HOPS: "-1",
    OPERATOR_TOKEN: "short",
    CONSOLE_SESSION_TTL: "13 hours",
    SIGNER_REPLAY_WINDOW: "0 seconds",
    SIGNER_KEYS: "not a key list",
    SIGNER_KEYS_FILE: "",
    SIGNER_PURGE_INTERVAL: "never",
    SYNC_INGEST_LIMIT: "0",
    SYNC_INGEST_WINDOW: "0 seconds",
    INBOX_MAX_ENVELOPE_BYTES: "100",
    INBOX_INGEST_CONCURRENCY: "0",
    INBOX_PAYLOAD_RETENTION: "forever",
    INBOX_RETENTION_INTERVAL: "0 seconds",
    OUTBOX_BATCH_SIZE: "101",
    OUTBOX_CLAIMERS: "0",
    OUTBOX_CONCURRENCY: "x",
    OUTBOX_REQUEST_TIMEOUT: "0 seconds",
    OUTBOX_CYCLE_TIMEOUT: "x",
    OUTBOX_LEASE: "x",
    OUTBOX_POLL_INTERVAL: "0 seconds",
    OUTBOX_BACKOFF_BASE: "x",
    OUTBOX_BACKOFF_CAP: "x",
    OUTBOX_BACKOFF_JITTER: "2",
    OUTBOX_RETRY_AFTER_MAX: "x",
    OUTBOX_DEFAULT_MAX_ATTEMPTS: "0",
    PASSWORD_RESET_TOKEN_KEY: "c2hvcnQ=",
    PASSWORD_RESET_TTL: "0 seconds",
    PASSWORD_RESET_DELIVERY: "sometimes",
    PASSWORD_RESET_FROM: "not an address",
    PASSWORD_RESET_FROM_NAME: "two\nlines",
    PASSWORD_RESET_ORIGIN: "https://app.example.com/reset?x=1",
    PASSWORD_RESET_POLL_INTERVAL: "0 seconds",
    PASSWORD_RESET_STALE_CLAIM: "x",
    PASSWORD_RESET_RETRY_BASE: "x",
    PASSWORD_RESET_RETRY_CAP: "0 seconds",
    PASSWORD_RESET_ADDRESS_LIMIT: "0",
    PASSWORD_RESET_ADDRESS_WINDOW: "x",
    PASSWORD_RESET_SOURCE_LIMIT: "0",
    PASSWORD_RESET_SOURCE_WINDOW: "x",
    PASSWORD_RESET_RESPONSE_FLOOR_MS: "5001",
    MAIL_PROVIDER_URL: "https://user:pw@mail.example.com/send",
    MAIL_PROVIDER_TOKEN: "",
    MAIL_PROVIDER_TIMEOUT: "x",
    RECEIPT_DELIVERY: "always",
    RECEIPT_FROM: "receipts at example",
    RECEIPT_FROM_NAME: "",
    RECEIPT_STAGING_ROOT: "relative/staging",
    RECEIPT_STORAGE_ROOT: "relative/storage",
    RECEIPT_FILE_MAX_BYTES: "0",
    RECEIPT_POLL_INTERVAL: "0 seconds",
    RECEIPT_STALE_CLAIM: "x",
    RECEIPT_RETRY_BASE: "x",
    RECEIPT_RETRY_CAP: "0 seconds",
    RECEIPT_INLINE_TIMEOUT: "x",
    TEAM_APPLICATION_DELIVERY: "on",
    TEAM_APPLICATION_FROM: "teams at example",
    TEAM_APPLICATION_FROM_NAME: "Team\nInjected: yes",
    TEAM_APPLICATION_DELIVERY_STALE_MS: "999",
    TEAM_APPLICATION_DELIVERY_POLL_INTERVAL: "0 seconds",
    TEAM_APPLICATION_DELIVERY_MAX_ATTEMPTS: "0",
    TEAM_APPLICATION_RETRY_BASE: "x",
    TEAM_APPLICATION_RETRY_CAP: "0 seconds",
    IDLE_WAKE_STACK: "Not A Stack",
    IDLE_WAKE_AUDIENCE: "has spaces",
    IDLE_WAKE_CLOUD_KEYS: "cloud-1:not-a-key",
    IDLE_WAKE_REPORT_KEY: "report-1:short",
    IDLE_WAKE_INGRESS: "tenant-api-http,carrier-pigeon",
    IDLE_WAKE_ASSERTION_MAX_LIFETIME: "2 hours",
    IDLE_WAKE_CLOCK_SKEW: "0 seconds",
    IDLE_WAKE_HOLD_MAX: "2 hours",
    IDLE_WAKE_CLOUD_SIGNING_KEY: "cloud-1:short",
    IDLE_WAKE_PROXY_HOST: "proxy.internal",
    IDLE_WAKE_PROXY_PORT: "70000",
    IDLE_WAKE_WAITING_MAX: "0",
    IDLE_WAKE_WAITING_PER_STACK: "0",
    IDLE_WAKE_WAITING_PER_SOURCE: "x",
    IDLE_WAKE_PREPARATIONS_MAX: "0",
    IDLE_WAKE_SOURCE_REQUESTS_PER_MINUTE: "0",
    IDLE_WAKE_SOURCE_WAKES_PER_10_MINUTES: "-1",
    IDLE_WAKE_STACK_WAKES_PER_HOUR: "1e3",
    IDLE_WAKE_WAKES_PER_MINUTE: "0",
    IDLE_WAKE_READINESS_WAIT: "91 seconds",
    IDLE_WAKE_SLEEP_HOLD: "2 hours",
    IDLE_WAKE_SLEEP_LEASE: "0 seconds",
    IDLE_WAKE_ASSERTION_LIFETIME: "2 hours",
    IDLE_WAKE_DRAIN_TIMEOUT: "x",
    IDLE_WAKE_LOCAL_STACKS: "{not json",
    IDLE_WAKE_LOCAL_RUN_DIR: " ",
    IDLE_WAKE_LOCAL_ENTRY: "",
    IDLE_WAKE_LOCAL_START_TIMEOUT: "0 seconds",
    IDLE_WAKE_LOCAL_STOP_TIMEOUT: "x",
    IDLE_WAKE_GITHUB_WEBHOOK_SECRET: "short",
    IDLE_WAKE_CONNECTOR_TOKEN: "short",
    IDLE_WAKE_EVENT_LEASE: "0 seconds",
    IDLE_WAKE_EVENT_POLL_INTERVAL: "x",
    IDLE_WAKE_EVENT_RETRY_BASE: "2 hours",
    IDLE_WAKE_EVENT_RETRY_CAP: "0 seconds",
    IDLE_WAKE_SLEEP_EVERY: "sometimes"
  }

  // Read only with ROLE=cloud: each is checked with the rest of a valid cloud configuration.
  const readWithCloud = new Set<string>(CLOUD_CONFIG.map((entry) => entry.name))
  const cloudBase = (except: string): Record<string, string> => {
    const all: Record<string, string> = {
      ROLE: "cloud",
      DATABASE_URL: "postgres://db.internal/cloud",
      IDLE_WAKE_CLOUD_SIGNING_KEY: `cloud-1:${"A".repeat(43)}`,
      IDLE_WAKE_PROXY_PORT: "4000"
    }
    delete all[except]
    return all
  }

  /** A complete, valid enabled receipts configuration (roots are only checked on disk when the backend builds). */
  const receiptsEnabled: Record<string, string> = {
    RECEIPT_DELIVERY: "enabled",
    MAIL_PROVIDER_URL: "https://mail.example.com/v1/send",
    MAIL_PROVIDER_TOKEN: "mail-5ecret-token",
    RECEIPT_FROM: "receipts@example.com",
    RECEIPT_STAGING_ROOT: "/srv/receipts/staging",
    RECEIPT_STORAGE_ROOT: "/srv/receipts/storage"
  }
  // Read only with IDLE_WAKE_STACK: each is checked with the other two valid, so its own validation speaks.
  const readWithStack = new Set(["IDLE_WAKE_AUDIENCE", "IDLE_WAKE_CLOUD_KEYS", "IDLE_WAKE_REPORT_KEY", "IDLE_WAKE_GITHUB_WEBHOOK_SECRET"])
  const idleWakeStack = (except: string): Record<string, string> => {
    const all: Record<string, string> = {
      IDLE_WAKE_STACK: "stack-1",
      IDLE_WAKE_AUDIENCE: "tenant:stack-1",
      IDLE_WAKE_CLOUD_KEYS: `cloud-1:${"A".repeat(43)}`,
      IDLE_WAKE_REPORT_KEY: `report-1:${"A".repeat(43)}`
    }
    delete all[except]
    return all
  }
  const readWithReceipts = new Set(["RECEIPT_FROM", "RECEIPT_FROM_NAME", "RECEIPT_STAGING_ROOT", "RECEIPT_STORAGE_ROOT"])

  /** A complete, valid enabled reset-mail configuration: the worker's variables are read only when enabled. */
  const enabled: Record<string, string> = {
    PASSWORD_RESET_DELIVERY: "enabled",
    MAIL_PROVIDER_URL: "https://mail.example.com/v1/send",
    MAIL_PROVIDER_TOKEN: "mail-5ecret-token",
    PASSWORD_RESET_FROM: "no-reply@example.com",
    PASSWORD_RESET_ORIGIN: "https://app.example.com",
    PASSWORD_RESET_TOKEN_KEY: Buffer.alloc(32, 7).toString("base64")
  }
  const readWhenEnabled = new Set([
    "PASSWORD_RESET_FROM",
    "PASSWORD_RESET_FROM_NAME",
    "PASSWORD_RESET_ORIGIN",
    "PASSWORD_RESET_POLL_INTERVAL",
    "PASSWORD_RESET_STALE_CLAIM",
    "PASSWORD_RESET_RETRY_BASE",
    "PASSWORD_RESET_RETRY_CAP",
    "MAIL_PROVIDER_URL",
    "MAIL_PROVIDER_TOKEN",
    "MAIL_PROVIDER_TIMEOUT"
  ])

  it.effect("every variable of CONFIG, set to an invalid value, is named in the one start-up message (never `(1 problem: )`)", () =>
    Effect.gen(function* () {
      expect(Object.keys(invalid).sort()).toEqual(CONFIG.map((entry) => entry.name).sort())
      for (const entry of CONFIG) {
        const base = readWhenEnabled.has(entry.name)
          ? enabled
          : readWithReceipts.has(entry.name)
          ? receiptsEnabled
          : readWithStack.has(entry.name)
          ? idleWakeStack(entry.name)
          : readWithCloud.has(entry.name)
          ? cloudBase(entry.name)
          : entry.name === "TEAM_APPLICATION_FROM_NAME"
          ? { TEAM_APPLICATION_FROM: "teams@example.com" }
          : entry.name === "DATABASE_URL"
          ? { PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" }
          : {}
        const error = yield* Effect.flip(Effect.flatten(load({ ...base, [entry.name]: invalid[entry.name]! })))
        expect([entry.name, error.variables]).toEqual([entry.name, [entry.name]])
        expect(error.message).toContain(`(1 problem: ${entry.name}):`)
        expect(error.message).toContain(`\n  ${entry.name}: `)
      }
    }))

  it.effect("ROLE=cloud needs DATABASE_URL, IDLE_WAKE_CLOUD_SIGNING_KEY and IDLE_WAKE_PROXY_PORT, named in one message without the key; the tenant families default to disabled there", () =>
    Effect.gen(function* () {
      const secret = `cloud-1:${"s3cr3t".repeat(8)}`
      const error = yield* Effect.flip(Effect.flatten(load({ ROLE: "cloud", IDLE_WAKE_CLOUD_SIGNING_KEY: secret })))
      expect(error.variables).toEqual(["DATABASE_URL", "IDLE_WAKE_CLOUD_SIGNING_KEY", "IDLE_WAKE_PROXY_PORT"])
      expect(error.message).not.toContain("s3cr3t")
      const config = Either.getOrThrow(yield* load(cloudBase("none")))
      expect(config.role).toBe("cloud")
      expect(config.passwordReset).toEqual({ mode: "disabled", defaulted: true })
      expect(config.receipts.mode).toBe("disabled")
      const cloud = Option.getOrThrow(config.cloud)
      expect(cloud.admission).toMatchObject({
        waitingMax: 64,
        waitingPerStack: 8,
        waitingPerSource: 4,
        preparationsMax: 32,
        sourceRequestsPerMinute: 24,
        sourceWakesPer10Minutes: 3,
        stackWakesPerHour: 8,
        wakesPerMinute: 32
      })
      expect(cloud.admission.readinessWait).toEqual(Duration.seconds(90))
      expect(Option.isNone(Either.getOrThrow(yield* load({})).cloud)).toBe(true)
    }))

  it.effect("PASSWORD_RESET_DELIVERY is required for every role: missing with DATABASE_URL stops start-up naming it, ingress included", () =>
    Effect.gen(function* () {
      for (const role of ["backend", "ingress"]) {
        const error = yield* Effect.flip(Effect.flatten(load({ ROLE: role, DATABASE_URL: "postgres://db.internal/app", RECEIPT_DELIVERY: "disabled" })))
        expect([role, error.variables]).toEqual([role, ["PASSWORD_RESET_DELIVERY"]])
        expect(error.message).toContain("PASSWORD_RESET_DELIVERY: Expected enabled or disabled")
      }
      const set = Either.getOrThrow(yield* load({ DATABASE_URL: "postgres://db.internal/app", PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" }))
      expect(set.passwordReset).toEqual({ mode: "disabled", defaulted: false })
    }))

  it.effect("the embedded development database gives an unset PASSWORD_RESET_DELIVERY the explicit value disabled, marked as defaulted", () =>
    Effect.gen(function* () {
      const config = Either.getOrThrow(yield* load({}))
      expect(config.passwordReset).toEqual({ mode: "disabled", defaulted: true })
    }))

  it.effect("an enabled reset worker with incomplete provider configuration stops start-up naming every missing variable (the token never printed)", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(Effect.flatten(load({ PASSWORD_RESET_DELIVERY: "enabled" })))
      expect(error.variables).toEqual(["PASSWORD_RESET_TOKEN_KEY", "PASSWORD_RESET_FROM", "PASSWORD_RESET_ORIGIN", "MAIL_PROVIDER_URL", "MAIL_PROVIDER_TOKEN"])
      const complete = Either.getOrThrow(yield* load(enabled))
      expect(complete.passwordReset.mode).toBe("enabled")
      for (const name of Object.keys(enabled).filter((name) => name !== "PASSWORD_RESET_DELIVERY")) {
        const { [name]: _, ...rest } = enabled
        const missing = yield* Effect.flip(Effect.flatten(load(rest)))
        expect([name, missing.variables]).toEqual([name, [name]])
        expect(missing.message).not.toContain("mail-5ecret-token")
      }
    }))

  it.effect("reset-mail endpoints and origins: credentials, query strings and fragments are refused; the stale-claim age must exceed the provider timeout", () =>
    Effect.gen(function* () {
      for (const url of ["https://user:pw@mail.example.com/send", "https://mail.example.com/send?key=1", "https://mail.example.com/send#x"]) {
        const error = yield* Effect.flip(Effect.flatten(load({ ...enabled, MAIL_PROVIDER_URL: url })))
        expect([url, error.variables]).toEqual([url, ["MAIL_PROVIDER_URL"]])
        expect(error.message).not.toContain("pw@")
      }
      for (const origin of ["https://app.example.com/reset", "https://app.example.com?x", "https://app.example.com#x", "http://app.example.com", "https://u:p@app.example.com", "app.example.com"]) {
        const error = yield* Effect.flip(Effect.flatten(load({ ...enabled, PASSWORD_RESET_ORIGIN: origin })))
        expect([origin, error.variables]).toEqual([origin, ["PASSWORD_RESET_ORIGIN"]])
      }
      const loopback = Either.getOrThrow(yield* load({ ...enabled, PASSWORD_RESET_ORIGIN: "http://127.0.0.1:8080" }))
      expect(loopback.passwordReset.mode === "enabled" && loopback.passwordReset.settings.origin).toBe("http://127.0.0.1:8080")
      const stale = yield* Effect.flip(Effect.flatten(load({ ...enabled, MAIL_PROVIDER_TIMEOUT: "30 seconds", PASSWORD_RESET_STALE_CLAIM: "30 seconds" })))
      expect(stale.variables).toEqual(["PASSWORD_RESET_STALE_CLAIM"])
    }))

  it.effect("RECEIPT_DELIVERY is required for every role; enabled needs the receipt provider configuration and both storage roots; disabled reads the provider only when RECEIPT_FROM is set; RECEIPT_FILE_MAX_BYTES stays within MAX_REQUEST_BODY_BYTES", () =>
    Effect.gen(function* () {
      const db = { DATABASE_URL: "postgres://db.internal/app", PASSWORD_RESET_DELIVERY: "disabled" }
      for (const role of ["backend", "ingress"]) {
        const error = yield* Effect.flip(Effect.flatten(load({ ...db, ROLE: role })))
        expect([role, error.variables]).toEqual([role, ["RECEIPT_DELIVERY"]])
      }
      expect((Either.getOrThrow(yield* load({})).receipts)).toMatchObject({ mode: "disabled", defaulted: true })
      const bare = yield* Effect.flip(Effect.flatten(load({ ...db, RECEIPT_DELIVERY: "enabled" })))
      expect(bare.variables).toEqual(["MAIL_PROVIDER_URL", "MAIL_PROVIDER_TOKEN", "RECEIPT_FROM", "RECEIPT_STAGING_ROOT"])
      const full = Either.getOrThrow(yield* load({ ...db, ...receiptsEnabled }))
      expect(full.receipts.mode).toBe("enabled")
      expect(Option.isSome(full.receipts.provider) && Option.isSome(full.receipts.roots)).toBe(true)
      // Disabled without RECEIPT_FROM: no provider at all, whatever else is set.
      const quiet = Either.getOrThrow(yield* load({ ...db, RECEIPT_DELIVERY: "disabled", MAIL_PROVIDER_URL: "https://mail.example.com/send" }))
      expect(Option.isNone(quiet.receipts.provider)).toBe(true)
      // Disabled with RECEIPT_FROM: the provider configuration must be complete.
      const partial = yield* Effect.flip(Effect.flatten(load({ ...db, RECEIPT_DELIVERY: "disabled", RECEIPT_FROM: "receipts@example.com" })))
      expect(partial.variables).toEqual(["MAIL_PROVIDER_URL", "MAIL_PROVIDER_TOKEN"])
      const oneRoot = yield* Effect.flip(Effect.flatten(load({ ...db, RECEIPT_DELIVERY: "disabled", RECEIPT_STAGING_ROOT: "/srv/staging" })))
      expect(oneRoot.variables).toEqual(["RECEIPT_STORAGE_ROOT"])
      const big = yield* Effect.flip(Effect.flatten(load({ ...db, RECEIPT_DELIVERY: "disabled", RECEIPT_FILE_MAX_BYTES: "2097152" })))
      expect(big.variables).toEqual(["RECEIPT_FILE_MAX_BYTES"])
      expect(Either.isRight(yield* load({ ...db, RECEIPT_DELIVERY: "disabled", RECEIPT_FILE_MAX_BYTES: "2097152", MAX_REQUEST_BODY_BYTES: "2097152" }))).toBe(true)
      // Unset, the file limit is the edge's.
      const edge = Either.getOrThrow(yield* load({ ...db, RECEIPT_DELIVERY: "disabled", MAX_REQUEST_BODY_BYTES: "4096" }))
      expect(edge.receipts.timing.fileMaxBytes).toBe(4096)
    }))

  it.effect("TEAM_APPLICATION_DELIVERY is optional (unset is disabled, and says so); enabled needs TEAM_APPLICATION_FROM and the mail provider; disabled reads the sender only when set; the stale time is in milliseconds, 1000 to 3600000", () =>
    Effect.gen(function* () {
      const db = { DATABASE_URL: "postgres://db.internal/app", PASSWORD_RESET_DELIVERY: "disabled", RECEIPT_DELIVERY: "disabled" }
      const unset = Either.getOrThrow(yield* load(db)).teamApplications
      expect([unset.mode, unset.defaulted, unset.sender, unset.provider]).toEqual(["disabled", true, Option.none(), Option.none()])
      expect(unset.timing.staleMs).toBe(60_000)
      const bare = yield* Effect.flip(Effect.flatten(load({ ...db, TEAM_APPLICATION_DELIVERY: "enabled" })))
      expect(bare.variables).toEqual(["MAIL_PROVIDER_URL", "MAIL_PROVIDER_TOKEN", "TEAM_APPLICATION_FROM"])
      const full = Either.getOrThrow(yield* load({
        ...db,
        TEAM_APPLICATION_DELIVERY: "enabled",
        TEAM_APPLICATION_FROM: "teams@example.com",
        MAIL_PROVIDER_URL: "https://mail.example.com/v1/send",
        MAIL_PROVIDER_TOKEN: "mail-5ecret-token",
        TEAM_APPLICATION_DELIVERY_STALE_MS: "1000"
      })).teamApplications
      expect([full.mode, full.defaulted, Option.isSome(full.provider), full.sender, full.timing.staleMs])
        .toEqual(["enabled", false, true, Option.some({ address: "teams@example.com" }), 1000])
      // Disabled with a sender: submissions render envelopes; no provider is read.
      const sender = Either.getOrThrow(yield* load({ ...db, TEAM_APPLICATION_DELIVERY: "disabled", TEAM_APPLICATION_FROM: "teams@example.com", MAIL_PROVIDER_URL: "not a url" })).teamApplications
      expect([sender.mode, sender.defaulted, sender.sender, sender.provider]).toEqual(["disabled", false, Option.some({ address: "teams@example.com" }), Option.none()])
      for (const value of ["3600001", "60 seconds", "1e4"]) {
        const error = yield* Effect.flip(Effect.flatten(load({ ...db, TEAM_APPLICATION_DELIVERY_STALE_MS: value })))
        expect([value, error.variables]).toEqual([value, ["TEAM_APPLICATION_DELIVERY_STALE_MS"]])
      }
      const cap = yield* Effect.flip(Effect.flatten(load({ ...db, TEAM_APPLICATION_RETRY_BASE: "10 minutes", TEAM_APPLICATION_RETRY_CAP: "1 minute" })))
      expect(cap.variables).toEqual(["TEAM_APPLICATION_RETRY_CAP"])
    }))

  it.effect("HOST accepts host names and IPv4/IPv6 literals and refuses anything else, naming HOST", () =>
    Effect.gen(function* () {
      for (const host of ["127.0.0.1", "0.0.0.0", "::", "::1", "2001:db8::8a2e:370:7334", "localhost", "api.internal", "edge-1.eu.example.com", "EXAMPLE.com."]) {
        expect([host, Either.map(yield* load({ HOST: host }), (config) => config.host)]).toEqual([host, Either.right(host)])
      }
      const refused = ["", " ", "not a host", "http://example.com", "example.com:3000", "[::1]", "::1::2", "256.1.1.1", "1.2.3", "-edge.example.com", "edge-.example.com", "a..b", "under_score.example", `${"a".repeat(64)}.example`, `${"a.".repeat(127)}a`, "café.example", "host\nname"]
      for (const host of refused) {
        const error = yield* Effect.flip(Effect.flatten(load({ HOST: host })))
        expect([host, error.variables]).toEqual([host, ["HOST"]])
      }
    }))

  it.effect("DATABASE_POOL_MAX is bounded above as well as below (1..1000)", () =>
    Effect.gen(function* () {
      expect(Either.map(yield* load({ DATABASE_POOL_MAX: "1000" }), (config) => config.databasePoolMax)).toEqual(Either.right(1000))
      for (const value of ["0", "1001", "1000000000", "1e3", "2.5"]) {
        const error = yield* Effect.flip(Effect.flatten(load({ DATABASE_POOL_MAX: value })))
        expect([value, error.variables]).toEqual([value, ["DATABASE_POOL_MAX"]])
      }
    }))

  it.effect("a retired key must keep verifying while payloads it signed are retained: SIGNER_REPLAY_WINDOW shorter than INBOX_PAYLOAD_RETENTION stops start-up with one message naming both", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(Effect.flatten(load({ SIGNER_REPLAY_WINDOW: "30 days", INBOX_PAYLOAD_RETENTION: "90 days" })))
      expect(error.variables).toEqual(["SIGNER_REPLAY_WINDOW"])
      const lines = error.message.split("\n").filter((line) => line.includes("SIGNER_REPLAY_WINDOW:"))
      expect(lines).toHaveLength(1)
      expect(lines[0]).toContain("INBOX_PAYLOAD_RETENTION")
      // Equal, longer, or both shortened together are fine.
      for (const env of [
        { SIGNER_REPLAY_WINDOW: "90 days", INBOX_PAYLOAD_RETENTION: "90 days" },
        { SIGNER_REPLAY_WINDOW: "365 days" },
        { SIGNER_REPLAY_WINDOW: "7 days", INBOX_PAYLOAD_RETENTION: "7 days" }
      ]) {
        expect(Either.isRight(yield* load(env))).toBe(true)
      }
      expect(Either.isLeft(yield* load({ INBOX_PAYLOAD_RETENTION: "91 days" }))).toBe(true)
    }))

  it.live("a missing or invalid setting stops start-up with ONE message naming EVERY bad variable (PORT=abc and ROLE=nope) and a non-zero exit", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const backend = yield* spawnBun(backendMain, { PORT: "abc", ROLE: "nope" })
        const code = yield* backend.exitCode()
        const output = yield* backend.output
        expect(code).not.toBe(0)
        const errors = output.split("\n").filter((line) => line.includes("ConfigurationError"))
        expect(errors).toHaveLength(1)
        expect(errors[0]).toContain("PORT")
        expect(errors[0]).toContain("ROLE")
        expect(output).toContain('PORT: Expected a network port value but received "abc"')
        expect(output).toContain('ROLE: Expected one of (backend, ingress, cloud) but received "nope"')
        expect(output).not.toContain("starting delivery backend")
      })
    ))

  it.live("a bad configuration stops start-up before anything listens: the chosen port is never opened and no secret is printed", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const port = yield* freePort
        const backend = yield* spawnBun(backendMain, {
          PORT: String(port),
          ROLE: "nope",
          SHUTDOWN_DRAIN_MS: "-1",
          DATABASE_URL: "mysql://app:hunter2@db.internal/app"
        })
        // Probe the port for the whole life of the process, not only after it exited.
        const prober = yield* Effect.gen(function* () {
          const seen = new Set<string>()
          while (!(yield* backend.hasExited)) {
            seen.add(yield* probePort(port))
            yield* Effect.sleep("10 millis")
          }
          return seen
        }).pipe(Effect.fork)
        const code = yield* backend.exitCode()
        const seen = yield* Fiber.join(prober)
        const output = yield* backend.output
        expect(code).not.toBe(0)
        expect(seen.has("open")).toBe(false)
        expect(yield* probePort(port)).toBe("refused")
        expect(output).toMatch(/ROLE, DATABASE_URL, SHUTDOWN_DRAIN_MS/)
        expect(output).not.toContain("hunter2")
        expect(output).not.toContain("listening on")
      })
    ))
})
