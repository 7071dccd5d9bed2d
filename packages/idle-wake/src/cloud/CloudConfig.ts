import { durationAtMost, integerBetween } from "@delivery/core"
import { Config, ConfigError, Context, Duration, Either, Option, Redacted } from "effect"
import type { KeyObject } from "node:crypto"
import { isIP } from "node:net"
import type { SignerKeyId } from "../Domain.ts"
import { parseReportKey } from "../IdleWakeConfig.ts"
import { MAX_HOLD_SECONDS } from "../Protocol.ts"
import { LOCAL_COMPUTE_CONFIG, LocalComputeConfig, type LocalComputeSettings } from "./LocalComputeConfig.ts"

// The cloud role's settings (ROLE=cloud). Spec 001's admission numbers are the defaults: "64 waiting requests, 8 per
// stack, 4 per source, 32 pending provider preparations; source request budget 24/minute, source wake budget
// 3/10 minutes, stack wake budget 8/hour, and aggregate wake budget 32/minute. Readiness waiting is at most 90 seconds."

export interface AdmissionSettings {
  readonly waitingMax: number
  readonly waitingPerStack: number
  readonly waitingPerSource: number
  readonly preparationsMax: number
  /** Requests per source and minute that reach a stack that is not awake (forwarded traffic is not counted). */
  readonly sourceRequestsPerMinute: number
  readonly sourceWakesPer10Minutes: number
  readonly stackWakesPerHour: number
  readonly wakesPerMinute: number
  /** How long a held request waits for its stack, at most (the spec's 90 s readiness bound). */
  readonly readinessWait: Duration.Duration
}

export interface CloudSettings {
  /** The cloud control signer: signs drain assertions. Its public half is each tenant's IDLE_WAKE_CLOUD_KEYS. */
  readonly signingKeyId: SignerKeyId
  readonly signingKey: Redacted.Redacted<KeyObject>
  readonly proxyHost: string
  readonly proxyPort: number
  /** TRUSTED_PROXY_HOPS: how many proxies in front may name a request's source in X-Forwarded-For (0: the socket). */
  readonly trustedProxyHops: number
  readonly admission: AdmissionSettings
  /** `holdSeconds` of a final read: how long the tenant refuses new work while compute is stopped. */
  readonly sleepHold: Duration.Duration
  /** The sleep operation lock's lease: a cycle not finished by then is fenced off. */
  readonly sleepLease: Duration.Duration
  /** Validity of each drain assertion. */
  readonly assertionLifetime: Duration.Duration
  /** Bound on each drain read's HTTP exchange. */
  readonly drainTimeout: Duration.Duration
  readonly local: LocalComputeSettings
  readonly events: ConnectorEventSettings
  /** How often every awake stack is offered a sleep cycle (none: only when an operator asks). */
  readonly sleepEvery: Option.Option<Duration.Duration>
}

/** github-broker-events-v1: the broker's credential and the connector event queue's worker. */
export interface ConnectorEventSettings {
  /** The bearer token of the broker that posts GitHub events (none: event intake refused). */
  readonly token: Option.Option<Redacted.Redacted<string>>
  readonly lease: Duration.Duration
  readonly pollInterval: Duration.Duration
  readonly retryBase: Duration.Duration
  readonly retryCap: Duration.Duration
}

const refusal = (message: string) => ConfigError.InvalidData([], message)

const signingKeyConfig = Config.redacted().pipe(
  Config.mapOrFail((secret) =>
    Either.match(parseReportKey(Redacted.value(secret)), {
      onLeft: (message) => Either.left(refusal(message)),
      onRight: ({ keyId, privateKey }) => Either.right({ keyId, privateKey: Redacted.make(privateKey) })
    })),
  Config.nested("IDLE_WAKE_CLOUD_SIGNING_KEY")
)

const AdmissionConfig = Config.all({
  waitingMax: integerBetween("IDLE_WAKE_WAITING_MAX", 1, 100_000, 64),
  waitingPerStack: integerBetween("IDLE_WAKE_WAITING_PER_STACK", 1, 100_000, 8),
  waitingPerSource: integerBetween("IDLE_WAKE_WAITING_PER_SOURCE", 1, 100_000, 4),
  preparationsMax: integerBetween("IDLE_WAKE_PREPARATIONS_MAX", 1, 100_000, 32),
  sourceRequestsPerMinute: integerBetween("IDLE_WAKE_SOURCE_REQUESTS_PER_MINUTE", 1, 1_000_000, 24),
  sourceWakesPer10Minutes: integerBetween("IDLE_WAKE_SOURCE_WAKES_PER_10_MINUTES", 1, 1_000_000, 3),
  stackWakesPerHour: integerBetween("IDLE_WAKE_STACK_WAKES_PER_HOUR", 1, 1_000_000, 8),
  wakesPerMinute: integerBetween("IDLE_WAKE_WAKES_PER_MINUTE", 1, 1_000_000, 32),
  readinessWait: durationAtMost("IDLE_WAKE_READINESS_WAIT", "90 seconds", Duration.seconds(90))
})

const connectorTokenConfig = Config.option(
  Config.redacted().pipe(
    Config.validate({
      message: "Expected 32-256 printable ASCII characters (value not shown)",
      validation: (token) => /^[\x21-\x7e]{32,256}$/.test(Redacted.value(token))
    }),
    Config.nested("IDLE_WAKE_CONNECTOR_TOKEN")
  )
)

const EventsConfig = Config.all({
  token: connectorTokenConfig,
  lease: durationAtMost("IDLE_WAKE_EVENT_LEASE", "30 seconds", Duration.hours(1)),
  pollInterval: durationAtMost("IDLE_WAKE_EVENT_POLL_INTERVAL", "1 second", Duration.minutes(10)),
  retryBase: durationAtMost("IDLE_WAKE_EVENT_RETRY_BASE", "1 second", Duration.hours(1)),
  retryCap: durationAtMost("IDLE_WAKE_EVENT_RETRY_CAP", "5 minutes", Duration.days(1))
}).pipe(
  Config.mapOrFail((events) =>
    Duration.lessThan(events.retryCap, events.retryBase)
      ? Either.left(ConfigError.InvalidData(["IDLE_WAKE_EVENT_RETRY_CAP"], "Expected at least IDLE_WAKE_EVENT_RETRY_BASE"))
      : Either.right(events)
  )
)

export const CloudConfig: Config.Config<CloudSettings> = Config.all({
  signing: signingKeyConfig,
  proxyHost: Config.string().pipe(
    Config.validate({ message: "Expected an IPv4 or IPv6 address literal", validation: (text) => isIP(text) !== 0 }),
    Config.nested("IDLE_WAKE_PROXY_HOST"),
    Config.withDefault("127.0.0.1")
  ),
  proxyPort: Config.port("IDLE_WAKE_PROXY_PORT"),
  // The existing trusted-proxy hop contract, read again (identity's peer limit reads the same variable).
  trustedProxyHops: integerBetween("TRUSTED_PROXY_HOPS", 0, 16, 0),
  admission: AdmissionConfig,
  sleepHold: durationAtMost("IDLE_WAKE_SLEEP_HOLD", "60 seconds", Duration.seconds(MAX_HOLD_SECONDS)),
  sleepLease: durationAtMost("IDLE_WAKE_SLEEP_LEASE", "2 minutes", Duration.hours(1)),
  assertionLifetime: durationAtMost("IDLE_WAKE_ASSERTION_LIFETIME", "2 minutes", Duration.hours(1)),
  drainTimeout: durationAtMost("IDLE_WAKE_DRAIN_TIMEOUT", "10 seconds", Duration.minutes(5)),
  local: LocalComputeConfig,
  events: EventsConfig,
  sleepEvery: Config.string().pipe(
    Config.mapOrFail((text) => {
      if (text === "off") return Either.right(Option.none<Duration.Duration>())
      const decoded = Duration.decodeUnknown(text)
      return Option.isSome(decoded) && Duration.isFinite(decoded.value) &&
          Duration.greaterThanOrEqualTo(decoded.value, Duration.seconds(1)) && Duration.lessThanOrEqualTo(decoded.value, Duration.days(1))
        ? Either.right(Option.some(decoded.value))
        : Either.left(ConfigError.InvalidData([], "Expected `off` or a duration between 1 second and 1 day, such as \"10 minutes\""))
    }),
    Config.nested("IDLE_WAKE_SLEEP_EVERY"),
    Config.withDefault(Option.some(Duration.minutes(10)))
  )
}).pipe(
  Config.map(({ signing, ...rest }) => ({ signingKeyId: signing.keyId, signingKey: signing.privateKey, ...rest }))
)

/** The cloud role's variables, for the backend's configuration table. */
export const CLOUD_CONFIG = [
  { name: "IDLE_WAKE_CLOUD_SIGNING_KEY", default: "(required with ROLE=cloud)", meaning: "`keyId:seed`: the cloud control signer's Ed25519 key (spec 001) that signs drain assertions, the seed unpadded base64url of 32 bytes; tenants list its public half in IDLE_WAKE_CLOUD_KEYS", secret: true },
  { name: "IDLE_WAKE_PROXY_HOST", default: "127.0.0.1", meaning: "ROLE=cloud: the interface the wake proxy listens on (an IP literal)", secret: false },
  { name: "IDLE_WAKE_PROXY_PORT", default: "(required with ROLE=cloud)", meaning: "ROLE=cloud: the wake proxy's port, where stacks' hosts are served (docs/idle-wake-cloud.md)", secret: false },
  { name: "IDLE_WAKE_WAITING_MAX", default: "64", meaning: "ROLE=cloud: requests held for a stack that is not awake, in all", secret: false },
  { name: "IDLE_WAKE_WAITING_PER_STACK", default: "8", meaning: "ROLE=cloud: held requests per stack", secret: false },
  { name: "IDLE_WAKE_WAITING_PER_SOURCE", default: "4", meaning: "ROLE=cloud: held requests per source", secret: false },
  { name: "IDLE_WAKE_PREPARATIONS_MAX", default: "32", meaning: "ROLE=cloud: provider preparations (wakes) pending at once; a timed-out one counts until it settles", secret: false },
  { name: "IDLE_WAKE_SOURCE_REQUESTS_PER_MINUTE", default: "24", meaning: "ROLE=cloud: requests per source and minute to stacks that are not awake", secret: false },
  { name: "IDLE_WAKE_SOURCE_WAKES_PER_10_MINUTES", default: "3", meaning: "ROLE=cloud: wakes a source may cause per 10 minutes", secret: false },
  { name: "IDLE_WAKE_STACK_WAKES_PER_HOUR", default: "8", meaning: "ROLE=cloud: wakes per stack and hour", secret: false },
  { name: "IDLE_WAKE_WAKES_PER_MINUTE", default: "32", meaning: "ROLE=cloud: wakes per minute, all stacks together", secret: false },
  { name: "IDLE_WAKE_READINESS_WAIT", default: "90 seconds", meaning: "ROLE=cloud: how long a held request waits for its stack to be ready, at most 90 seconds", secret: false },
  { name: "IDLE_WAKE_SLEEP_HOLD", default: "60 seconds", meaning: "ROLE=cloud: the idle hold a final drain read asks for (holdSeconds); must not exceed the tenants' IDLE_WAKE_HOLD_MAX", secret: false },
  { name: "IDLE_WAKE_SLEEP_LEASE", default: "2 minutes", meaning: "ROLE=cloud: lease of the sleep operation lock; a cycle not finished by then is fenced off", secret: false },
  { name: "IDLE_WAKE_ASSERTION_LIFETIME", default: "2 minutes", meaning: "ROLE=cloud: validity of each drain assertion; must not exceed the tenants' IDLE_WAKE_ASSERTION_MAX_LIFETIME", secret: false },
  { name: "IDLE_WAKE_DRAIN_TIMEOUT", default: "10 seconds", meaning: "ROLE=cloud: bound on each drain read's HTTP exchange", secret: false },
  { name: "IDLE_WAKE_SLEEP_EVERY", default: "10 minutes", meaning: "ROLE=cloud: how often every awake stack is offered a sleep cycle (the tenant's own blockers decide; a stack in use stays awake); `off`: only when an operator asks", secret: false },
  { name: "IDLE_WAKE_CONNECTOR_TOKEN", default: "(unset: connector events refused)", meaning: "ROLE=cloud: bearer token (32-256 printable ASCII characters) of the GitHub broker that posts connector events to POST /cloud/v1/connector-events", secret: true },
  { name: "IDLE_WAKE_EVENT_LEASE", default: "30 seconds", meaning: "ROLE=cloud: lease of a claimed connector event; an event whose delivery was not acknowledged by then is claimed again", secret: false },
  { name: "IDLE_WAKE_EVENT_POLL_INTERVAL", default: "1 second", meaning: "ROLE=cloud: how often the connector event worker looks for due events (an accepted event wakes it at once)", secret: false },
  { name: "IDLE_WAKE_EVENT_RETRY_BASE", default: "1 second", meaning: "ROLE=cloud: first delay before a connector event whose delivery failed is tried again (doubling, capped, with jitter)", secret: false },
  { name: "IDLE_WAKE_EVENT_RETRY_CAP", default: "5 minutes", meaning: "ROLE=cloud: longest delay between connector event delivery attempts; at least IDLE_WAKE_EVENT_RETRY_BASE", secret: false },
  ...LOCAL_COMPUTE_CONFIG
] as const

export class CloudSettingsTag extends Context.Tag("@delivery/idle-wake/CloudSettings")<CloudSettingsTag, CloudSettings>() {}
