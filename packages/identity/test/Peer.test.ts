import { describe, expect, it } from "@effect/vitest"
import { HttpServerRequest } from "@effect/platform"
import { ConfigProvider, Duration, Effect, Either } from "effect"
import { PeerLimitConfig, retryAfterSeconds } from "../src/index.ts"
import { normalizeAddress, peerOf } from "../src/Peer.ts"

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
