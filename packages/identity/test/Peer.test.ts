import { describe, expect, it } from "@effect/vitest"
import { HttpServerRequest } from "@effect/platform"
import { RateLimiter } from "@effect/experimental"
import { ConfigProvider, Duration, Effect, Either, Layer } from "effect"
import { refusalsCounted } from "@delivery/testing"
import { PeerLimit, peerLimitLayer, PeerLimitConfig, retryAfterSeconds } from "../src/index.ts"
import { normalizeAddress, peerFrom, peerOf } from "../src/Peer.ts"
import { consumeOrRefuse } from "../src/PeerLimit.ts"

const request = (remoteAddress: string | undefined, xff?: string) =>
  HttpServerRequest.fromWeb(
    new Request("http://localhost/api/whoami", { headers: xff === undefined ? {} : { "x-forwarded-for": xff } })
  ).modify(remoteAddress === undefined ? {} : { remoteAddress })


describe("peer key", () => {
  it("the peer is the socket address unless TRUSTED_PROXY_HOPS is configured", () => {
    expect(peerOf(request("10.1.2.3", "203.0.113.5"), 0)).toBe("v4:10.1.2.3")
    expect(peerOf(request("::ffff:10.1.2.3"), 0)).toBe("v4:10.1.2.3")
    expect(peerOf(request(undefined), 0)).toBe("unknown")
  })

  it("with n trusted hops, the n-th X-Forwarded-For entry from the right; too few entries fall back to the socket", () => {
    const xff = "198.51.100.1, 203.0.113.5,10.0.0.9"
    expect(peerOf(request("10.1.2.3", xff), 1)).toBe("v4:10.0.0.9")
    expect(peerOf(request("10.1.2.3", xff), 2)).toBe("v4:203.0.113.5")
    expect(peerOf(request("10.1.2.3", xff), 3)).toBe("v4:198.51.100.1")
    expect(peerOf(request("10.1.2.3", xff), 4)).toBe("v4:10.1.2.3")
    expect(peerOf(request("10.1.2.3", "not-an-address"), 1)).toBe("v4:10.1.2.3")
    expect(peerOf(request("10.1.2.3"), 1)).toBe("v4:10.1.2.3")
    // A huge client-written prefix is never walked: only the right end is read.
    expect(peerOf(request("10.1.2.3", "1.1.1.1,".repeat(50_000) + "192.0.2.8"), 1)).toBe("v4:192.0.2.8")
  })

  it("IPv6 peers are keyed by their /64 so one subscriber cannot rotate addresses past the limit", () => {
    expect(normalizeAddress("2001:db8:aa:bb:1:2:3:4")).toBe("v6:2001:db8:aa:bb::/64")
    expect(normalizeAddress("2001:DB8:aa:bb::99")).toBe("v6:2001:db8:aa:bb::/64")
    expect(normalizeAddress("[2001:db8::1]:443")).toBe("v6:2001:db8:0:0::/64")
    expect(normalizeAddress("::1")).toBe("v6:0:0:0:0::/64")
    expect(normalizeAddress("192.0.2.1:8080")).toBe("v4:192.0.2.1")
    for (const bad of ["", "256.1.1.1", "1::2::3", "1:2:3:4:5:6:7:8:9", "example.com", "x".repeat(100)]) {
      expect(normalizeAddress(bad)).toBeUndefined()
    }
  })

  it("a peer key is one whole address: anything before or after it, or a group that is not one, is no address (so a client cannot mint keys by decorating one)", () => {
    const cases: ReadonlyArray<readonly [string, string | undefined]> = [
      // IPv4, with and without a port; every octet up to 255, multi-digit octets everywhere.
      ["192.0.2.44", "v4:192.0.2.44"],
      ["255.255.255.255", "v4:255.255.255.255"],
      ["10.20.30.40:8080", "v4:10.20.30.40"],
      ["1.2.3.4x", undefined],
      ["x1.2.3.4:80", undefined],
      ["1.2.3.4:80x", undefined],
      ["1.2.3.4:123456", undefined],
      // IPv6: bracketed with or without a port, `::` for at least one group, leading zeros dropped per group.
      ["[2001:db8::1]", "v6:2001:db8:0:0::/64"],
      ["x[2001:db8::1]:80", undefined],
      ["[2001:db8::1]:80x", undefined],
      ["2001:db8::", "v6:2001:db8:0:0::/64"],
      ["::1:2:3:4:5", "v6:0:0:0:1::/64"],
      ["1:2:3::5:6:7:8", "v6:1:2:3:0::/64"],
      ["1:2:3:4::5:6:7:8", undefined],
      ["2001:0db8:00aa:0000::1", "v6:2001:db8:aa:0::/64"],
      ["2001:db8::g1", undefined],
      ["2001:db8::12345", undefined],
      ["2001:db8::zz", undefined],
      // IPv4-mapped IPv6 is the IPv4 address, and only a whole one.
      ["::ffff:10.20.30.40", "v4:10.20.30.40"],
      ["1::ffff:1.2.3.4", undefined],
      ["::ffff:1.2.3.4x", undefined]
    ]
    for (const [raw, key] of cases) expect([raw, normalizeAddress(raw)]).toEqual([raw, key])
  })

  it("X-Forwarded-For is read only with trusted hops, and only as far as they reach: a header with fewer entries, or none at all, leaves the socket address", () => {
    expect(peerFrom("192.0.2.10", "10.0.0.1", 0)).toBe("v4:10.0.0.1")
    expect(peerFrom("192.0.2.10", "10.0.0.1", 1)).toBe("v4:192.0.2.10")
    // Two hops need two entries: the one entry there is the client's own word.
    expect(peerFrom("192.0.2.10", "10.0.0.1", 2)).toBe("v4:10.0.0.1")
    expect(peerFrom(null, "10.0.0.1", 1)).toBe("v4:10.0.0.1")
    expect(peerFrom(undefined, "10.0.0.1", 1)).toBe("v4:10.0.0.1")
    expect(peerFrom(null, undefined, 1)).toBe("unknown")
  })

  it.effect("the limit refuses past its count with Retry-After, and a store that cannot answer refuses as unavailable, never as rate-limited and never by letting the request through", () =>
    Effect.gen(function* () {
      const options = { key: "identity-peer:v4:10.0.0.1", limit: 1, window: "1 minute", operation: "Authentication.peerLimit", reason: "identity-peer" } as const
      const limiterFailing = (error: RateLimiter.RateLimiterError): RateLimiter.RateLimiter => ({ consume: () => Effect.fail(error) }) as unknown as RateLimiter.RateLimiter
      const exceeded = new RateLimiter.RateLimitExceeded({ retryAfter: Duration.millis(1_500), key: options.key, limit: 1, remaining: 0 })
      expect(yield* Effect.flip(consumeOrRefuse(limiterFailing(exceeded), options))).toMatchObject({ _tag: "IdentityRateLimited", retryAfter: 1_500 })
      const down = new RateLimiter.RateLimitStoreError({ message: "connection refused" })
      expect(yield* Effect.flip(consumeOrRefuse(limiterFailing(down), options))).toMatchObject({
        _tag: "IdentityStorageUnavailable",
        operation: "Authentication.peerLimit"
      })
      // A real limiter over the memory store: the first is admitted, the second refused.
      const limiter = yield* RateLimiter.make.pipe(Effect.provide(RateLimiter.layerStoreMemory))
      yield* consumeOrRefuse(limiter, options)
      expect(yield* Effect.flip(consumeOrRefuse(limiter, options))).toMatchObject({ _tag: "IdentityRateLimited" })
    }).pipe(Effect.scoped))

  it.effect("the peer limit asks its store (memory or Redis) for a fixed window keyed by the peer, and a store that cannot answer refuses the request as Authentication.peerLimit unavailable", () =>
    Effect.gen(function* () {
      const asked: Array<{ readonly algorithm: string; readonly key: string; readonly limit: number | undefined }> = []
      let failing = false
      let count = 1
      const answer = (algorithm: string) => (options: { readonly key: string; readonly limit: number | undefined }) => {
        asked.push({ algorithm, key: options.key, limit: options.limit })
        return failing ? Effect.fail(new RateLimiter.RateLimitStoreError({ message: "store down" })) : Effect.succeed([count, 60_000] as const)
      }
      const store = { fixedWindow: answer("fixed-window"), tokenBucket: answer("token-bucket") } as unknown as RateLimiter.RateLimiterStore["Type"]
      const peers = yield* Effect.provide(PeerLimit, peerLimitLayer.pipe(Layer.provide(Layer.succeed(RateLimiter.RateLimiterStore, store))))
      yield* peers.admit(request("10.0.0.1"))
      expect(asked).toEqual([{ algorithm: "fixed-window", key: "identity-peer:v4:10.0.0.1", limit: 1200 }])
      // Past the limit: refused, and counted under its own label in `delivery_limiter_refusals_total`.
      count = 1201
      const counted = yield* refusalsCounted("identity-peer")
      expect(yield* Effect.flip(peers.admit(request("10.0.0.1")))).toMatchObject({ _tag: "IdentityRateLimited" })
      expect(yield* refusalsCounted("identity-peer")).toBe(counted + 1)
      failing = true
      expect(yield* Effect.flip(peers.admit(request("10.0.0.1")))).toMatchObject({
        _tag: "IdentityStorageUnavailable",
        operation: "Authentication.peerLimit"
      })
    }))

  it("Retry-After is whole seconds, rounded up, at least 1", () => {
    expect([0, 1, 999, 1000, 1001, 59_500].map(retryAfterSeconds)).toEqual([1, 1, 1, 1, 2, 60])
  })

  it.effect("config: IDENTITY_PEER_LIMIT 1200 per IDENTITY_PEER_WINDOW 1 minute and TRUSTED_PROXY_HOPS 0 by default; nonsense refused", () =>
    Effect.gen(function* () {
      const load = (env: Record<string, string>) =>
        Effect.either(Effect.withConfigProvider(PeerLimitConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))
      const defaults = yield* load({})
      expect(Either.getOrThrow(defaults)).toEqual({ limit: 1200, window: Duration.minutes(1), trustedProxyHops: 0 })
      for (const bad of [{ IDENTITY_PEER_LIMIT: "0" }, { TRUSTED_PROXY_HOPS: "-1" }, { IDENTITY_PEER_WINDOW: "0 millis" }]) {
        expect(Either.isLeft(yield* load(bad))).toBe(true)
      }
    }))
})
