import { CloudConfig, type CloudSettings } from "@delivery/idle-wake"
import { Config, ConfigError, Effect, Either, Option } from "effect"

// What ROLE and DATABASE_URL decide about the rest of the configuration.

// Only whether DATABASE_URL is set: the embedded development database gives PASSWORD_RESET_DELIVERY its default.
export const embedded = Config.map(Config.option(Config.string("DATABASE_URL")), Option.isNone)

const isCloud = Config.map(Config.option(Config.string("ROLE")), (role) => Option.getOrNull(role) === "cloud")

// A cloud process delivers none of the tenant families: their modes default to `disabled` there, as with the embedded
// database.
export const familyDefault = Effect.map(Effect.all([embedded, Effect.orElseSucceed(isCloud, () => false)]), ([a, b]) => a || b)

/** ROLE=cloud: its settings, and DATABASE_URL required (its routing table listens for changes, which needs PostgreSQL). */
export const loadCloudSettings: Effect.Effect<Option.Option<CloudSettings>, ConfigError.ConfigError> = Effect.gen(function* () {
  if (!(yield* Effect.orElseSucceed(isCloud, () => false))) return Option.none()
  const [settings, isEmbedded] = yield* Effect.all([Effect.either(CloudConfig), embedded])
  const errors: Array<ConfigError.ConfigError> = []
  if (Either.isLeft(settings)) errors.push(settings.left)
  if (isEmbedded) errors.push(ConfigError.MissingData(["DATABASE_URL"], "Expected a PostgreSQL URL: ROLE=cloud does not run on the embedded database"))
  if (errors.length > 0) return yield* Effect.fail(errors.reduce((left, right) => ConfigError.And(left, right)))
  return Option.some(Either.getOrThrow(settings))
})
