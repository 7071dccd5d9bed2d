import { integerBetween, positiveDuration } from "@delivery/core"
import { ResetTokenKeyConfig } from "@delivery/identity"
import { Mailbox, MailProviderConfig } from "@delivery/mail"
import { Config, ConfigError, Duration, Effect, Either, Option, Schema } from "effect"

export const PASSWORD_RESET_DELIVERY = "PASSWORD_RESET_DELIVERY"
export const PASSWORD_RESET_STALE_CLAIM = "PASSWORD_RESET_STALE_CLAIM"

export const DeliveryMode = Schema.Literal("enabled", "disabled")
export type DeliveryMode = typeof DeliveryMode.Type

/** Spec 002: required for every role, ingress and local development included; no default. */
export const DeliveryModeConfig = Config.literal("enabled", "disabled")(PASSWORD_RESET_DELIVERY)

const EMAIL = /^[^\s@<>",;]+@[^\s@<>",;]+$/

/** `https://host[:port]` (http only for loopback): where the reset page lives; no path, query or fragment. */
const originConfig = Config.string().pipe(
  Config.mapOrFail((text) => {
    const refuse = (why: string) => Either.left(ConfigError.InvalidData([], `Expected an origin such as https://app.example.com: ${why}`))
    let url: URL
    try {
      url = new URL(text)
    } catch {
      return refuse("not a URL")
    }
    const loopback = url.hostname === "localhost" || url.hostname === "127.0.0.1" || url.hostname === "[::1]"
    if (url.protocol !== "https:" && !(url.protocol === "http:" && loopback)) return refuse("https (http only for loopback)")
    if (url.username !== "" || url.password !== "") return refuse("no credentials")
    if (url.search !== "" || url.hash !== "" || text.includes("?") || text.includes("#")) return refuse("no query or fragment")
    if (url.pathname !== "/") return refuse("no path")
    return Either.right(url.origin)
  }),
  Config.nested("PASSWORD_RESET_ORIGIN")
)

const senderConfig = Config.all({
  address: Config.string().pipe(
    Config.validate({ message: "Expected an e-mail address such as no-reply@example.com", validation: (text) => text.length <= 254 && EMAIL.test(text) }),
    Config.nested("PASSWORD_RESET_FROM")
  ),
  name: Config.option(
    Config.string().pipe(
      Config.validate({
        message: "Expected a display name of 1-200 characters without line breaks",
        validation: (text) => text.length > 0 && text.length <= 200 && !/[\r\n]/.test(text)
      }),
      Config.nested("PASSWORD_RESET_FROM_NAME")
    )
  )
}).pipe(Config.map(({ address, name }): Mailbox => Option.isSome(name) ? { address, name: name.value } : { address }))

/** How the worker delivers: read only when PASSWORD_RESET_DELIVERY is `enabled`, and then every value is required. */
const workerConfig = Config.all({
  mail: MailProviderConfig,
  sender: senderConfig,
  origin: originConfig,
  // The worker unseals tokens to mail them; the value itself stays with the identity layer.
  tokenKey: Config.map(ResetTokenKeyConfig, () => "set" as const),
  pollInterval: positiveDuration("PASSWORD_RESET_POLL_INTERVAL", "1 second"),
  staleClaim: positiveDuration(PASSWORD_RESET_STALE_CLAIM, "60 seconds"),
  retryBase: positiveDuration("PASSWORD_RESET_RETRY_BASE", "10 seconds"),
  retryCap: positiveDuration("PASSWORD_RESET_RETRY_CAP", "10 minutes")
}).pipe(
  Config.mapOrFail((settings) => {
    // A claim still waiting on the provider must never look stale to another worker.
    if (!Duration.lessThan(settings.mail.timeout, settings.staleClaim)) {
      return Either.left(ConfigError.InvalidData(
        [PASSWORD_RESET_STALE_CLAIM],
        `Expected more than MAIL_PROVIDER_TIMEOUT (${Duration.format(settings.mail.timeout)}): a call still waiting on the provider must not look stale`
      ))
    }
    if (Duration.lessThan(settings.retryCap, settings.retryBase)) {
      return Either.left(ConfigError.InvalidData(["PASSWORD_RESET_RETRY_CAP"], "Expected at least PASSWORD_RESET_RETRY_BASE"))
    }
    return Either.right(settings)
  })
)

export type WorkerSettings = Config.Config.Success<typeof workerConfig>

export type ResetDelivery =
  | { readonly mode: "disabled"; readonly defaulted: boolean }
  | { readonly mode: "enabled"; readonly defaulted: false; readonly settings: WorkerSettings }

/**
 * The delivery mode and, when enabled, the worker's settings, every one required. `embeddedDefault`: the
 * embedded development database is in use, and an unset mode is then the explicit `disabled` (logged loudly at
 * start-up); real deployments get no default. An Effect rather than a Config: which variables are read depends
 * on the mode.
 */
export const loadResetDelivery = (embeddedDefault: boolean): Effect.Effect<ResetDelivery, ConfigError.ConfigError> =>
  Effect.gen(function* () {
    const mode = yield* Config.option(DeliveryModeConfig)
    if (Option.isNone(mode)) {
      if (embeddedDefault) return { mode: "disabled", defaulted: true } as const
      return yield* Effect.fail(ConfigError.MissingData(
        [PASSWORD_RESET_DELIVERY],
        "Expected enabled or disabled: required for every role, ingress included"
      ))
    }
    if (mode.value === "disabled") return { mode: "disabled", defaulted: false } as const
    const settings = yield* workerConfig
    return { mode: "enabled", defaulted: false, settings } as const
  })

/** Reset requests and completions: limits per source and per address, and the answer's time floor. */
export const ResetRequestConfig = Config.all({
  addressLimit: integerBetween("PASSWORD_RESET_ADDRESS_LIMIT", 1, 1_000, 5),
  addressWindow: positiveDuration("PASSWORD_RESET_ADDRESS_WINDOW", "1 hour"),
  sourceLimit: integerBetween("PASSWORD_RESET_SOURCE_LIMIT", 1, 1_000_000, 30),
  sourceWindow: positiveDuration("PASSWORD_RESET_SOURCE_WINDOW", "15 minutes"),
  responseFloorMs: integerBetween("PASSWORD_RESET_RESPONSE_FLOOR_MS", 0, 5_000, 250)
})
export type ResetRequestSettings = Config.Config.Success<typeof ResetRequestConfig>

/** What the backend lists in its configuration table. */
export const RESET_MAIL_CONFIG = [
  {
    name: PASSWORD_RESET_DELIVERY,
    default: "(required; the embedded development database alone implies `disabled`, logged as a warning)",
    meaning: "`enabled`: this process runs the reset-mail worker (backend role only); `disabled`: no worker, the durable work is kept and delivered once a process runs enabled",
    secret: false
  },
  { name: "PASSWORD_RESET_FROM", default: "(required when enabled)", meaning: "sender address of reset mail", secret: false },
  { name: "PASSWORD_RESET_FROM_NAME", default: "(none)", meaning: "sender display name of reset mail (no line breaks, up to 200 characters)", secret: false },
  {
    name: "PASSWORD_RESET_ORIGIN",
    default: "(required when enabled)",
    meaning: "origin of the page that completes a reset (https, http only for loopback; no path, query or fragment); the mail links to `<origin>/reset-password#token=…`",
    secret: false
  },
  { name: "PASSWORD_RESET_POLL_INTERVAL", default: "1 second", meaning: "wait after each delivery attempt (one attempt per tick), also after a failure", secret: false },
  {
    name: PASSWORD_RESET_STALE_CLAIM,
    default: "60 seconds",
    meaning: "a claim older than this is quarantined (`stale-claim`) on each tick; must exceed MAIL_PROVIDER_TIMEOUT",
    secret: false
  },
  { name: "PASSWORD_RESET_RETRY_BASE", default: "10 seconds", meaning: "first retry delay after a temporary provider failure (5xx, transport), doubled per attempt with jitter", secret: false },
  { name: "PASSWORD_RESET_RETRY_CAP", default: "10 minutes", meaning: "longest retry delay; retries end when the verification expires", secret: false },
  { name: "PASSWORD_RESET_ADDRESS_LIMIT", default: "5", meaning: "reset requests per address of a tenant per window, from every source together (1-1000)", secret: false },
  { name: "PASSWORD_RESET_ADDRESS_WINDOW", default: "1 hour", meaning: "the fixed window of PASSWORD_RESET_ADDRESS_LIMIT", secret: false },
  { name: "PASSWORD_RESET_SOURCE_LIMIT", default: "30", meaning: "reset requests and completions one peer (TRUSTED_PROXY_HOPS) may make per window", secret: false },
  { name: "PASSWORD_RESET_SOURCE_WINDOW", default: "15 minutes", meaning: "the fixed window of PASSWORD_RESET_SOURCE_LIMIT", secret: false },
  {
    name: "PASSWORD_RESET_RESPONSE_FLOOR_MS",
    default: "250",
    meaning: "a reset request is answered no earlier than this after it arrived (0-5000), so existing and unknown addresses answer in the same time",
    secret: false
  },
  { name: "MAIL_PROVIDER_URL", default: "(required when a mail worker is enabled)", meaning: "the transactional mail API endpoint (docs/mail.md): https, or http for loopback; no credentials, query or fragment", secret: false },
  { name: "MAIL_PROVIDER_TOKEN", default: "(required when a mail worker is enabled)", meaning: "bearer token of the mail provider", secret: true },
  { name: "MAIL_PROVIDER_TIMEOUT", default: "10 seconds", meaning: "bound on each call to the mail provider; a timeout is an ambiguous outcome", secret: false }
] as const
