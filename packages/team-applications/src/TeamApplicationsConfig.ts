import { integerBetween, positiveDuration } from "@delivery/core"
import { type Mailbox, MailProviderConfig, type MailProviderSettings } from "@delivery/mail"
import { Config, ConfigError, Duration, Effect, Either, Option } from "effect"

export const TEAM_APPLICATION_DELIVERY = "TEAM_APPLICATION_DELIVERY"

const EMAIL = /^[^\s@<>",;]+@[^\s@<>",;]+$/

const senderConfig = Config.all({
  address: Config.string().pipe(
    Config.validate({ message: "Expected an e-mail address such as teams@example.com", validation: (text) => text.length <= 254 && EMAIL.test(text) }),
    Config.nested("TEAM_APPLICATION_FROM")
  ),
  name: Config.option(
    Config.string().pipe(
      Config.validate({
        message: "Expected a display name of 1-200 characters without line breaks",
        validation: (text) => text.length > 0 && text.length <= 200 && !/[\r\n]/.test(text)
      }),
      Config.nested("TEAM_APPLICATION_FROM_NAME")
    )
  )
}).pipe(Config.map(({ address, name }): Mailbox => Option.isSome(name) ? { address, name: name.value } : { address }))

export const DeliveryTimingConfig = Config.all({
  /** Spec 002's TEAM_APPLICATION_DELIVERY_STALE_MS: a lease not refreshed for this long is lost. */
  staleMs: integerBetween("TEAM_APPLICATION_DELIVERY_STALE_MS", 1_000, 3_600_000, 60_000),
  pollInterval: positiveDuration("TEAM_APPLICATION_DELIVERY_POLL_INTERVAL", "1 second"),
  maxAttempts: integerBetween("TEAM_APPLICATION_DELIVERY_MAX_ATTEMPTS", 1, 1_000, 20),
  retryBase: positiveDuration("TEAM_APPLICATION_RETRY_BASE", "5 seconds"),
  retryCap: positiveDuration("TEAM_APPLICATION_RETRY_CAP", "10 minutes")
}).pipe(
  Config.mapOrFail((timing) =>
    Duration.lessThan(timing.retryCap, timing.retryBase)
      ? Either.left(ConfigError.InvalidData(["TEAM_APPLICATION_RETRY_CAP"], "Expected at least TEAM_APPLICATION_RETRY_BASE"))
      : Either.right(timing)
  )
)
export type DeliveryTiming = Config.Config.Success<typeof DeliveryTimingConfig>

/** Spec 002: queue items that ended more than 30 days ago are removed, once an hour. */
export const QUEUE_RETENTION = Duration.days(30)
export const CLEANUP_INTERVAL = Duration.hours(1)

export interface TeamApplicationsSettings {
  readonly mode: "enabled" | "disabled"
  /** TEAM_APPLICATION_DELIVERY was unset (taken as `disabled`, logged as a warning). */
  readonly defaulted: boolean
  /** None: submissions are refused (503 `team-applications-unconfigured`): no envelope can be rendered. */
  readonly sender: Option.Option<Mailbox>
  /** Some only when enabled: the worker's provider. */
  readonly provider: Option.Option<MailProviderSettings>
  readonly timing: DeliveryTiming
}

/**
 * TEAM_APPLICATION_DELIVERY and what it needs. `enabled` requires TEAM_APPLICATION_FROM and the mail provider
 * configuration; `disabled` (or unset) reads the sender only when it is set. Submissions need the sender in every
 * role, because their envelopes are rendered and committed with them.
 */
export const loadTeamApplicationsSettings: Effect.Effect<TeamApplicationsSettings, ConfigError.ConfigError> = Effect.gen(function* () {
  const mode = yield* Config.option(Config.literal("enabled", "disabled")(TEAM_APPLICATION_DELIVERY))
  const enabled = Option.isSome(mode) && mode.value === "enabled"
  const fromSet = Option.isSome(yield* Config.option(Config.string("TEAM_APPLICATION_FROM")))
  const senderPart = enabled || fromSet ? Effect.map(senderConfig, Option.some) : Effect.succeed(Option.none<Mailbox>())
  const providerPart = enabled ? Effect.map(MailProviderConfig, Option.some) : Effect.succeed(Option.none<MailProviderSettings>())
  const [timing, sender, provider] = yield* Effect.all([DeliveryTimingConfig, senderPart, providerPart], { mode: "either" })
  if (Either.isLeft(timing) || Either.isLeft(sender) || Either.isLeft(provider)) {
    const errors: Array<ConfigError.ConfigError> = []
    if (Either.isLeft(timing)) errors.push(timing.left)
    if (Either.isLeft(sender)) errors.push(sender.left)
    if (Either.isLeft(provider)) errors.push(provider.left)
    return yield* Effect.fail(errors.reduce((left, right) => ConfigError.And(left, right)))
  }
  return {
    mode: enabled ? "enabled" : "disabled",
    defaulted: Option.isNone(mode),
    sender: sender.right,
    provider: provider.right,
    timing: timing.right
  } as const
})

/** What the backend lists in its configuration table. */
export const TEAM_APPLICATIONS_CONFIG = [
  {
    name: TEAM_APPLICATION_DELIVERY,
    default: "disabled (unset: logged as a warning)",
    meaning: "`enabled`: this process runs the team-application notification worker (backend role only); `disabled`: no worker, the queue items are kept (docs/team-applications.md)",
    secret: false
  },
  { name: "TEAM_APPLICATION_FROM", default: "(required when enabled; unset: submissions refused with 503)", meaning: "sender address of team-application notifications; the envelopes are rendered with it at submission", secret: false },
  { name: "TEAM_APPLICATION_FROM_NAME", default: "(none)", meaning: "sender display name of team-application notifications", secret: false },
  { name: "TEAM_APPLICATION_DELIVERY_STALE_MS", default: "60000", meaning: "lease of a notification attempt in milliseconds (1000-3600000), refreshed every third of it; a worker that stops refreshing loses the item to another attempt", secret: false },
  { name: "TEAM_APPLICATION_DELIVERY_POLL_INTERVAL", default: "1 second", meaning: "wait after each attempt (one per tick), and between looks at an empty queue", secret: false },
  { name: "TEAM_APPLICATION_DELIVERY_MAX_ATTEMPTS", default: "20", meaning: "attempts (1-1000, each counted when it starts) before a notification ends `exhausted`", secret: false },
  { name: "TEAM_APPLICATION_RETRY_BASE", default: "5 seconds", meaning: "first retry delay of a failed attempt, doubled per attempt with jitter (a provider's Retry-After is used instead, up to the cap)", secret: false },
  { name: "TEAM_APPLICATION_RETRY_CAP", default: "10 minutes", meaning: "longest retry delay", secret: false }
] as const
