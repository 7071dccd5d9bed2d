import { Config, ConfigError, Context, Data, Duration, Either, Metric, Redacted } from "effect"
import type { RedisOptions } from "ioredis"
import { positiveDuration } from "./ConfigValues.ts"

export const REDIS_URL = "REDIS_URL"
export const REDIS_KEY_PREFIX = "REDIS_KEY_PREFIX"
export const REDIS_COMMAND_TIMEOUT = "REDIS_COMMAND_TIMEOUT"

/** What the backend lists in its configuration table (docs/operations.md, docs/scaling.md). */
export const LIMIT_STORE_CONFIG = [
  {
    name: REDIS_URL,
    default: "(unset: every limit and budget counts in this process's memory)",
    meaning: "redis:// or rediss:// URL (`redis://[user:password@]host[:port][/db]`): every rate limit and budget is counted in this Redis, so all processes that share it enforce one limit; checked at start-up (a Redis that does not answer within 5 s stops it); while it is unreachable each limit does what docs/scaling.md says",
    secret: true
  },
  {
    name: REDIS_KEY_PREFIX,
    default: "delivery:limits:",
    meaning: "prefix of every limiter key in REDIS_URL; deployments that must not share limits use different prefixes (or databases)",
    secret: false
  },
  {
    name: REDIS_COMMAND_TIMEOUT,
    default: "250 millis",
    meaning: "how long one limiter command may wait for Redis before the limit treats the store as unreachable",
    secret: false
  }
] as const

/** A Redis URL as ioredis options; `undefined` for anything that is not one (the value is never echoed). */
export const redisOptionsOf = (text: string): RedisOptions | undefined => {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return undefined
  }
  if ((url.protocol !== "redis:" && url.protocol !== "rediss:") || url.hostname === "") return undefined
  if (url.search !== "" || url.hash !== "") return undefined
  const db = url.pathname === "" || url.pathname === "/" ? 0 : Number(url.pathname.slice(1))
  if (!Number.isInteger(db) || db < 0 || db > 15 || !/^\/?\d*$/.test(url.pathname)) return undefined
  const port = url.port === "" ? 6379 : Number(url.port)
  // IPv6 literals come bracketed from URL; the socket wants them bare.
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1")
  return {
    host,
    port,
    db,
    ...(url.username === "" ? {} : { username: decodeURIComponent(url.username) }),
    ...(url.password === "" ? {} : { password: decodeURIComponent(url.password) }),
    ...(url.protocol === "rediss:" ? { tls: { servername: host } } : {})
  }
}

const REDIS_URL_MESSAGE = "Expected redis://[user:password@]host[:port][/db] or rediss://... (value not shown)"

export const LimitStoreConfig = Config.all({
  url: Config.redacted().pipe(
    Config.mapOrFail((url) =>
      redisOptionsOf(Redacted.value(url)) === undefined
        ? Either.left(ConfigError.InvalidData([], REDIS_URL_MESSAGE))
        : Either.right(url)
    ),
    Config.nested(REDIS_URL),
    Config.option
  ),
  prefix: Config.string().pipe(
    Config.validate({ message: "Expected 1-64 characters without spaces", validation: (text) => /^\S{1,64}$/.test(text) }),
    Config.nested(REDIS_KEY_PREFIX),
    Config.withDefault("delivery:limits:")
  ),
  commandTimeout: positiveDuration(REDIS_COMMAND_TIMEOUT, Duration.millis(250))
})

export type LimitStoreSettings = Config.Config.Success<typeof LimitStoreConfig>

/** Which store the limits of this process count in, for the start-up log and the readiness answer. */
export class LimitStoreInfo extends Context.Tag("@delivery/core/LimitStoreInfo")<LimitStoreInfo, {
  readonly kind: "memory" | "redis"
  /** `redis://host:port/db` without credentials, or `memory`. */
  readonly target: string
}>() {}

/** REDIS_URL is set and the server did not answer at start-up. */
export class LimitStoreUnavailable extends Data.TaggedError("LimitStoreUnavailable")<{ readonly message: string }> {}

/** 1 while the shared limit store answers (always 1 for the memory store). */
export const limitStoreUp = Metric.gauge("delivery_limit_store_up", {
  description: "1 while this process reaches its limit store (REDIS_URL), 0 while it does not; always 1 for the memory store"
})

/** Commands the shared store could not run (unreachable, timed out): each is a limit answered by its outage rule. */
export const limitStoreErrors = Metric.counter("delivery_limit_store_errors", {
  description: "limiter commands the shared store could not run; each was answered by its limit's outage rule (docs/scaling.md)",
  incremental: true
})
