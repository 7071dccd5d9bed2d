import type { HttpServerRequest } from "@effect/platform"
import { Option } from "effect"

/**
 * Who is knocking, for the peer-keyed identity limit (spec 000: "Authentication
 * adapters must apply the separate peer-keyed identity limit before expensive
 * credential verification").
 *
 * The peer is the socket address. Only when the deployment declares
 * `trustedProxyHops > 0` proxies in front of us do we read `X-Forwarded-For`,
 * and then only the entry that many hops from the right: entries further left
 * were written by the client and prove nothing. A header with too few entries
 * falls back to the socket address (the proxy), which never lets a client pick
 * its own bucket.
 *
 * IPv6 peers are keyed by their /64 (one subscriber usually owns a whole /64,
 * so per-address keys would be free to rotate); IPv4-mapped IPv6 becomes IPv4.
 */

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/
const IPV4_WITH_PORT = /^(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/
const BRACKETED_IPV6 = /^\[([0-9a-fA-F:.]+)\](?::\d{1,5})?$/
const HEX_GROUP = /^[0-9a-f]{1,4}$/

const ipv4 = (text: string): string | undefined => {
  const match = IPV4.exec(text)
  return match !== null && match.slice(1).every((octet) => Number(octet) <= 255) ? `v4:${text}` : undefined
}

/** Expands `::` and returns the first four groups (the /64), or undefined when not IPv6. */
const ipv6Prefix = (text: string): string | undefined => {
  const lower = text.toLowerCase()
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/.exec(lower)
  if (mapped !== null) return ipv4(mapped[1]!)
  const halves = lower.split("::")
  if (halves.length > 2) return undefined
  const head = halves[0] === "" ? [] : halves[0]!.split(":")
  const tail = halves.length === 1 || halves[1] === "" ? [] : halves[1]!.split(":")
  const missing = 8 - head.length - tail.length
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined
  const groups = [...head, ...Array<string>(missing).fill("0"), ...tail]
  if (!groups.every((group) => HEX_GROUP.test(group))) return undefined
  return `v6:${groups.slice(0, 4).map((group) => group.replace(/^0+(?=.)/, "")).join(":")}::/64`
}

/** A normalized key part for an address as proxies and sockets print it, or undefined when it is not one. */
export const normalizeAddress = (raw: string | undefined): string | undefined => {
  if (raw === undefined) return undefined
  const text = raw.trim()
  // Stryker disable next-line ConditionalExpression,LogicalOperator,EqualityOperator: an empty text matches no pattern below and no address they accept is longer than 48 characters; the bound only limits the work on a client-written value
  if (text.length === 0 || text.length > 64) return undefined
  const v4Port = IPV4_WITH_PORT.exec(text)
  if (v4Port !== null) return ipv4(v4Port[1]!)
  const bracketed = BRACKETED_IPV6.exec(text)
  if (bracketed !== null) return ipv6Prefix(bracketed[1]!)
  // Stryker disable next-line StringLiteral: a text without ":" is one group, never the eight an IPv6 address needs; the check only skips the attempt
  return ipv4(text) ?? (text.includes(":") ? ipv6Prefix(text) : undefined)
}

/**
 * The `hops`-th entry from the right of a comma-separated header, read from the
 * right only, so a client cannot make us walk (or allocate) a huge header.
 */
const fromRight = (header: string, hops: number): string | undefined => {
  let end = header.length
  for (let hop = 1; hop <= hops; hop++) {
    const comma = header.lastIndexOf(",", end - 1)
    if (hop === hops) return header.slice(comma + 1, end)
    // Stryker disable next-line EqualityOperator: a comma at the very start leaves an empty entry to its left, which is no address either way
    if (comma < 0) return undefined
    end = comma
  }
  return undefined
}

/** The peer from a request's X-Forwarded-For header and socket address, under `trustedProxyHops` (see above). */
export const peerFrom = (forwarded: string | null | undefined, remoteAddress: string | undefined, trustedProxyHops: number): string => {
  // Stryker disable next-line ConditionalExpression,EqualityOperator: with no trusted hops fromRight reads no entry, and the socket address is used all the same; the check only skips the header
  if (trustedProxyHops > 0) {
    const candidate = forwarded === undefined || forwarded === null ? undefined : normalizeAddress(fromRight(forwarded, trustedProxyHops))
    if (candidate !== undefined) return candidate
  }
  return normalizeAddress(remoteAddress) ?? "unknown"
}

export const peerOf = (request: HttpServerRequest.HttpServerRequest, trustedProxyHops: number): string =>
  peerFrom(request.headers["x-forwarded-for"], Option.getOrUndefined(request.remoteAddress), trustedProxyHops)
