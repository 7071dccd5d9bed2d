import { integerBetween, positiveDuration } from "@delivery/core"
import { type Mailbox, MailProviderConfig, type MailProviderSettings } from "@delivery/mail"
import { Config, ConfigError, Duration, Effect, Either, Option } from "effect"

export const RECEIPT_DELIVERY = "RECEIPT_DELIVERY"

const EMAIL = /^[^\s@<>",;]+@[^\s@<>",;]+$/

const senderConfig = Config.all({
  address: Config.string().pipe(
    Config.validate({ message: "Expected an e-mail address such as receipts@example.com", validation: (text) => text.length <= 254 && EMAIL.test(text) }),
    Config.nested("RECEIPT_FROM")
  ),
  name: Config.option(
    Config.string().pipe(
      Config.validate({
        message: "Expected a display name of 1-200 characters without line breaks",
        validation: (text) => text.length > 0 && text.length <= 200 && !/[\r\n]/.test(text)
      }),
      Config.nested("RECEIPT_FROM_NAME")
    )
  )
}).pipe(Config.map(({ address, name }): Mailbox => Option.isSome(name) ? { address, name: name.value } : { address }))

/** Receipt provider configuration: the shared mail provider and the receipts' sender, all required together. */
const providerConfig = Config.all({ mail: MailProviderConfig, sender: senderConfig })
export interface ReceiptProvider {
  readonly mail: MailProviderSettings
  readonly sender: Mailbox
}

const absolutePath = (name: string) =>
  Config.string().pipe(
    Config.validate({ message: "Expected an absolute path", validation: (text) => text.startsWith("/") && !text.includes("\0") }),
    Config.nested(name)
  )

export interface StorageRoots {
  readonly staging: string
  readonly storage: string
}

export const WorkerTimingConfig = Config.all({
  pollInterval: positiveDuration("RECEIPT_POLL_INTERVAL", "1 second"),
  staleClaim: positiveDuration("RECEIPT_STALE_CLAIM", "60 seconds"),
  retryBase: positiveDuration("RECEIPT_RETRY_BASE", "5 seconds"),
  retryCap: positiveDuration("RECEIPT_RETRY_CAP", "10 minutes"),
  inlineTimeout: positiveDuration("RECEIPT_INLINE_TIMEOUT", "5 seconds"),
  // 0 (never a valid value: the minimum is 1) stands for unset, which means the HTTP edge's limit.
  fileMaxBytes: Config.map(integerBetween("RECEIPT_FILE_MAX_BYTES", 1, 1024 ** 3, 0), (bytes) => (bytes === 0 ? Option.none() : Option.some(bytes)))
}).pipe(
  Config.mapOrFail((timing) =>
    Duration.lessThan(timing.retryCap, timing.retryBase)
      ? Either.left(ConfigError.InvalidData(["RECEIPT_RETRY_CAP"], "Expected at least RECEIPT_RETRY_BASE"))
      : Either.right(timing)
  )
)
export type WorkerTiming = Omit<Config.Config.Success<typeof WorkerTimingConfig>, "fileMaxBytes"> & {
  /** RECEIPT_FILE_MAX_BYTES, or the HTTP edge's body limit when unset. */
  readonly fileMaxBytes: number
}

export interface ReceiptsSettings {
  readonly mode: "enabled" | "disabled"
  /** The embedded development database supplied `disabled` for an unset RECEIPT_DELIVERY. */
  readonly defaulted: boolean
  /** None: no receipt provider configuration, so no receipt provider call is ever made by this process. */
  readonly provider: Option.Option<ReceiptProvider>
  /** None: uploads and attachments are refused (503 `receipt-storage-unconfigured`). */
  readonly roots: Option.Option<StorageRoots>
  readonly timing: WorkerTiming
}

const missing = (name: string, why: string) => Effect.fail(ConfigError.MissingData([name], why))

/**
 * RECEIPT_DELIVERY and what it needs. `enabled` requires the provider configuration and both storage roots;
 * `disabled` reads the provider configuration only when RECEIPT_FROM is set (then the requests' bounded
 * post-commit attempt uses it), and the roots only when set. An Effect: which variables are read depends on the mode.
 */
export const loadReceiptsSettings = (
  embeddedDefault: boolean,
  /** MAX_REQUEST_BODY_BYTES: an upload passes the HTTP edge first, so no file limit can exceed it. */
  bodyLimit: number
): Effect.Effect<ReceiptsSettings, ConfigError.ConfigError> =>
  Effect.gen(function* () {
    const mode = yield* Config.option(Config.literal("enabled", "disabled")(RECEIPT_DELIVERY))
    if (Option.isNone(mode) && !embeddedDefault) {
      return yield* missing(RECEIPT_DELIVERY, "Expected enabled or disabled: required for every role, ingress included")
    }
    const enabled = Option.isSome(mode) && mode.value === "enabled"
    const fromSet = Option.isSome(yield* Config.option(Config.string("RECEIPT_FROM")))
    const providerPart = enabled || fromSet ? Effect.map(providerConfig, Option.some) : Effect.succeed(Option.none<ReceiptProvider>())
    const rootsPart = Effect.gen(function* () {
      const staging = yield* Config.option(absolutePath("RECEIPT_STAGING_ROOT"))
      const storage = yield* Config.option(absolutePath("RECEIPT_STORAGE_ROOT"))
      if ((enabled || Option.isSome(storage)) && Option.isNone(staging)) {
        return yield* missing("RECEIPT_STAGING_ROOT", "Expected an absolute path: required with RECEIPT_STORAGE_ROOT and when RECEIPT_DELIVERY is enabled")
      }
      if ((enabled || Option.isSome(staging)) && Option.isNone(storage)) {
        return yield* missing("RECEIPT_STORAGE_ROOT", "Expected an absolute path: required with RECEIPT_STAGING_ROOT and when RECEIPT_DELIVERY is enabled")
      }
      return Option.zipWith(staging, storage, (s, p): StorageRoots => ({ staging: s, storage: p }))
    })
    // Every problem together, as the backend's one start-up message wants them.
    const [timingPart, providerResult, rootsResult] = yield* Effect.all([WorkerTimingConfig, providerPart, rootsPart], { mode: "either" })
    const errors: Array<ConfigError.ConfigError> = []
    if (Either.isLeft(timingPart)) errors.push(timingPart.left)
    if (Either.isLeft(providerResult)) errors.push(providerResult.left)
    if (Either.isLeft(rootsResult)) errors.push(rootsResult.left)
    if (Either.isLeft(timingPart) || Either.isLeft(providerResult) || Either.isLeft(rootsResult)) {
      return yield* Effect.fail(errors.reduce((left, right) => ConfigError.And(left, right)))
    }
    const explicitLimit = timingPart.right.fileMaxBytes
    if (Option.isSome(explicitLimit) && explicitLimit.value > bodyLimit) {
      return yield* Effect.fail(ConfigError.InvalidData(
        ["RECEIPT_FILE_MAX_BYTES"],
        `Expected at most MAX_REQUEST_BODY_BYTES (${bodyLimit}): uploads pass the HTTP edge's body limit first`
      ))
    }
    const timing: WorkerTiming = { ...timingPart.right, fileMaxBytes: Option.getOrElse(explicitLimit, () => bodyLimit) }
    const provider = providerResult.right
    const roots = rootsResult.right
    return {
      mode: enabled ? "enabled" : "disabled",
      defaulted: Option.isNone(mode),
      provider,
      roots,
      timing
    } as const
  })

/** What the backend lists in its configuration table. */
export const RECEIPTS_CONFIG = [
  {
    name: RECEIPT_DELIVERY,
    default: "(required; the embedded development database alone implies `disabled`, logged as a warning)",
    meaning: "`enabled`: this process runs the receipt effects worker (backend role only); `disabled`: no worker, the effects are kept (docs/receipts.md)",
    secret: false
  },
  { name: "RECEIPT_FROM", default: "(required when enabled; unset when disabled: no receipt provider call at all)", meaning: "sender address of receipt notifications; with MAIL_PROVIDER_URL and MAIL_PROVIDER_TOKEN it is the receipt provider configuration", secret: false },
  { name: "RECEIPT_FROM_NAME", default: "(none)", meaning: "sender display name of receipt notifications", secret: false },
  { name: "RECEIPT_STAGING_ROOT", default: "(required when enabled; unset: uploads refused)", meaning: "absolute path of the private directory uploads are staged in (mode 0700); the same for requests and workers", secret: false },
  { name: "RECEIPT_STORAGE_ROOT", default: "(required when enabled; unset: uploads refused)", meaning: "absolute path of the private directory receipt files are kept in, named by their SHA-256 (mode 0700)", secret: false },
  { name: "RECEIPT_FILE_MAX_BYTES", default: "MAX_REQUEST_BODY_BYTES", meaning: "largest upload (1 byte to 1 GiB); at most MAX_REQUEST_BODY_BYTES", secret: false },
  { name: "RECEIPT_POLL_INTERVAL", default: "1 second", meaning: "wait after each effect attempt (one per tick), also after a failure", secret: false },
  { name: "RECEIPT_STALE_CLAIM", default: "60 seconds", meaning: "a claim older than this goes back to the retry path on each tick", secret: false },
  { name: "RECEIPT_RETRY_BASE", default: "5 seconds", meaning: "first retry delay of a failed effect, doubled per attempt with jitter", secret: false },
  { name: "RECEIPT_RETRY_CAP", default: "10 minutes", meaning: "longest retry delay; failed effects stay retryable", secret: false },
  { name: "RECEIPT_INLINE_TIMEOUT", default: "5 seconds", meaning: "bound on the receipt request's own post-commit attempt at its effects (with receipt provider configuration)", secret: false }
] as const
