import { RateLimiter } from "@effect/experimental"
import { Duration, Effect, Metric, Redacted, Runtime, Schedule } from "effect"
import { Redis } from "ioredis"
import {
  LimitStoreInfo,
  type LimitStoreSettings,
  LimitStoreUnavailable,
  limitStoreErrors,
  limitStoreUp,
  REDIS_URL,
  redisOptionsOf
} from "./LimitStoreConfig.ts"

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
export const makeRedisStore = (url: Redacted.Redacted<string>, settings: LimitStoreSettings) =>
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
