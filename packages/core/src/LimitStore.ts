import { RateLimiter } from "@effect/experimental"
import { Config, ConfigError, Context, Data, Duration, Effect, Either, Layer, Metric, Option, Redacted, Runtime, Schedule } from "effect"
import { Redis, type RedisOptions } from "ioredis"
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

// The two scripts of @effect/experimental's Redis store (`RateLimiter/Redis`), so both stores keep the port's
// contract; the fixed window's expiries are rounded up to whole milliseconds (PX takes integers only: the library's
// script fails every command of a limit above its window's milliseconds, such as 1,000,000 a minute). That store builds its own client and leaves connection errors to ioredis's console.error, which
// breaks LOG_FORMAT=json and hides outages from the logs; this one owns the client, logs state changes once, fails
// commands at once while disconnected and bounds each command.
const FIXED_WINDOW = `
local key = KEYS[1]
local tokens = tonumber(ARGV[1])
local refillms = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local current = tonumber(redis.call("GET", key))

if not current then
  local nextpttl = math.ceil(refillms * tokens)
  redis.call("SET", key, tokens, "PX", nextpttl)
  return { tokens, nextpttl }
end

local currentpttl = tonumber(redis.call("PTTL", key) or "0")
local next = current + tokens
if limit and next > limit then
  return { next, currentpttl }
end

local nextpttl = math.ceil(currentpttl + (refillms * tokens))
redis.call("SET", key, next, "PX", nextpttl)
return { next, nextpttl }
`

const TOKEN_BUCKET = `
local key = KEYS[1]
local last_refill_key = key .. ":refill"
local tokens = tonumber(ARGV[1])
local refill_ms = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local overflow = ARGV[5] == "1"
local current = tonumber(redis.call("GET", key))
local last_refill = tonumber(redis.call("GET", last_refill_key))

if not current then
  current = limit
  last_refill = now
  redis.call("SET", key, current)
  redis.call("SET", last_refill_key, last_refill)
end

local elapsed = now - last_refill
local refill_amount = math.floor(elapsed / refill_ms)
if refill_amount > 0 then
  current = math.min(current + refill_amount, limit)
  last_refill = last_refill + (refill_amount * refill_ms)
  redis.call("SET", last_refill_key, last_refill)
end

local next = current - tokens
if next < 0 and not overflow then
  redis.call("SET", key, current)
  return next
end

redis.call("SET", key, next)
return next
`

interface LimiterRedis extends Redis {
  fixedWindow(key: string, tokens: number, refillMillis: number, limit?: number): Promise<[number, number]>
  tokenBucket(key: string, tokens: number, refillMillis: number, limit: number, now: number, overflow: 0 | 1): Promise<number>
}

const STARTUP_WAIT = Duration.seconds(5)

const storeError = (operation: string, cause: unknown) =>
  Metric.increment(limitStoreErrors).pipe(
    Effect.zipRight(Effect.fail(new RateLimiter.RateLimitStoreError({ message: `limit store: ${operation} failed`, cause })))
  )

/** The Redis store: one client per process, commands pipelined per tick, none queued while disconnected. */
const makeRedisStore = (url: Redacted.Redacted<string>, settings: LimitStoreSettings) =>
  Effect.gen(function* () {
    const options = redisOptionsOf(Redacted.value(url))!
    const target = `redis://${options.host?.includes(":") ? `[${options.host}]` : options.host}:${options.port}/${options.db}`
    const runtime = yield* Effect.runtime<never>()
    // Set when this process closes the client: its own quit is not an outage.
    let closing = false
    const log = (effect: Effect.Effect<void>) => Runtime.runFork(runtime)(effect.pipe(Effect.annotateLogs({ limitStore: target })))
    const redis = yield* Effect.acquireRelease(
      Effect.sync(() =>
        new Redis({
          ...options,
          // A limit must answer now: a command is never held for a reconnect, and one that Redis does not answer
          // within the bound fails; the limit's outage rule answers instead.
          enableOfflineQueue: false,
          maxRetriesPerRequest: 0,
          commandTimeout: Math.max(1, Math.round(Duration.toMillis(settings.commandTimeout))),
          connectTimeout: 2_000,
          retryStrategy: (times) => Math.min(100 * times, 1_000),
          enableAutoPipelining: true,
          lazyConnect: false
        }) as LimiterRedis
      ),
      (redis) =>
        Effect.sync(() => (closing = true)).pipe(
          Effect.zipRight(Effect.promise(() => redis.quit().catch(() => undefined))),
          Effect.timeout(Duration.seconds(1)),
          Effect.ignore,
          Effect.ensuring(Effect.sync(() => redis.disconnect()))
        )
    )
    let up = false
    redis.on("ready", () => {
      if (!up) log(Effect.logInfo("limit store reachable"))
      up = true
      log(Metric.set(limitStoreUp, 1))
    })
    // Without a listener ioredis prints every connection error to stderr itself; state changes are logged once here.
    redis.on("error", () => undefined)
    redis.on("close", () => {
      if (up && !closing) log(Effect.logWarning("limit store unreachable: each limit answers by its outage rule (docs/scaling.md)"))
      up = false
      log(Metric.set(limitStoreUp, 0))
    })
    redis.defineCommand("fixedWindow", { lua: FIXED_WINDOW, numberOfKeys: 1, readOnly: false })
    redis.defineCommand("tokenBucket", { lua: TOKEN_BUCKET, numberOfKeys: 1, readOnly: false })

    // Start-up: a REDIS_URL that does not answer stops the process, as an unreachable database does.
    yield* Effect.tryPromise(() => redis.ping()).pipe(
      Effect.retry(Schedule.spaced(Duration.millis(100))),
      Effect.timeout(STARTUP_WAIT),
      Effect.mapError(() =>
        new LimitStoreUnavailable({ message: `${REDIS_URL}: the limit store ${target} did not answer within ${Duration.format(STARTUP_WAIT)}` })
      )
    )

    const store = RateLimiter.RateLimiterStore.of({
      fixedWindow: (request) =>
        Effect.tryPromise({
          try: () =>
            redis.fixedWindow(`${settings.prefix}${request.key}`, request.tokens, Duration.toMillis(request.refillRate), request.limit),
          catch: (cause) => cause
        }).pipe(Effect.catchAll((cause) => storeError("fixedWindow", cause))),
      tokenBucket: (request) =>
        Effect.clockWith((clock) =>
          Effect.tryPromise({
            try: () =>
              redis.tokenBucket(
                `${settings.prefix}${request.key}`,
                request.tokens,
                Duration.toMillis(request.refillRate),
                request.limit,
                clock.unsafeCurrentTimeMillis(),
                request.allowOverflow ? 1 : 0
              ),
            catch: (cause) => cause
          })
        ).pipe(Effect.catchAll((cause) => storeError("tokenBucket", cause)))
    })
    return { store, info: LimitStoreInfo.of({ kind: "redis", target }) }
  })

/**
 * The one `RateLimiterStore` every limit of the process counts in: Redis with REDIS_URL (one limit across every
 * process sharing it), otherwise this process's memory. Fails start-up when REDIS_URL does not answer.
 */
export const limitStoreLayer = (settings: LimitStoreSettings): Layer.Layer<
  RateLimiter.RateLimiterStore | LimitStoreInfo,
  LimitStoreUnavailable
> =>
  Option.match(settings.url, {
    onNone: () =>
      Layer.merge(
        RateLimiter.layerStoreMemory,
        Layer.effect(LimitStoreInfo, Effect.as(Metric.set(limitStoreUp, 1), LimitStoreInfo.of({ kind: "memory", target: "memory" })))
      ),
    onSome: (url) =>
      Layer.unwrapScoped(
        Effect.map(makeRedisStore(url, settings), ({ info, store }) =>
          Layer.merge(Layer.succeed(RateLimiter.RateLimiterStore, store), Layer.succeed(LimitStoreInfo, info)))
      )
  })

const isStoreError = (error: RateLimiter.RateLimiterError) => error.reason === "StoreError"

/**
 * The process's one limit store from REDIS_URL and its companions. One value: every package layer that provides it
 * gets the same instance within a build (layers are memoized by reference), so a process holds one Redis client.
 */
export const LimitStoreLive: Layer.Layer<
  RateLimiter.RateLimiterStore | LimitStoreInfo,
  LimitStoreUnavailable | ConfigError.ConfigError
> = Layer.unwrapEffect(Effect.map(LimitStoreConfig, limitStoreLayer))

/**
 * A store that counts in `primary` and, for each command `primary` cannot run, in `local` (this process's own
 * window). For a limit whose purpose is to bound this process's work, a shared store's outage then loosens the limit
 * to one window per process instead of lifting it or refusing everyone.
 */
export const withLocalFallback = (
  primary: RateLimiter.RateLimiterStore["Type"],
  local: RateLimiter.RateLimiterStore["Type"]
): RateLimiter.RateLimiterStore["Type"] =>
  RateLimiter.RateLimiterStore.of({
    fixedWindow: (request) => Effect.catchIf(primary.fixedWindow(request), isStoreError, () => local.fixedWindow(request)),
    tokenBucket: (request) => Effect.catchIf(primary.tokenBucket(request), isStoreError, () => local.tokenBucket(request))
  })

/**
 * A `RateLimiter` of its own over `withLocalFallback(the store in context, a fresh memory store)`. Not a layer on
 * purpose: `RateLimiter.layer` is one value, memoized across a build, so a fallback store provided under it would
 * leak into (or miss) every other limit built from it.
 */
export const limiterWithLocalFallback: Effect.Effect<RateLimiter.RateLimiter, never, RateLimiter.RateLimiterStore> = Effect.gen(
  function* () {
    const primary = yield* RateLimiter.RateLimiterStore
    const local = yield* Effect.provide(RateLimiter.RateLimiterStore, RateLimiter.layerStoreMemory)
    return yield* Effect.provideService(RateLimiter.make, RateLimiter.RateLimiterStore, withLocalFallback(primary, local))
  }
)
