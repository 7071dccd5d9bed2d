import { peerFrom } from "@delivery/identity"

// The wake proxy's reading of a raw request (spec 001, tenant-api-http-v2): which host it names, which source it comes
// from, and whether it may wake a sleeping stack. Plain functions over the request as Bun received it, so that the
// path checked is the path forwarded, byte for byte. Bun's server already resolves `.`, `..`, `%2e` and `\` segments
// before the handler runs (`/api/./instance` arrives as `/api/instance`), so those checks below only guard other servers.

const HOST = /^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?$/

/** The Host header's name, lower-case and without port; undefined for anything that is not a plain DNS name. */
export const hostOf = (request: Request): string | undefined => {
  const header = request.headers.get("host")
  if (header === null) return undefined
  const colon = header.lastIndexOf(":")
  // Stryker disable next-line EqualityOperator: a colon at 0 leaves an empty name, keeping it leaves a ':': the pattern refuses both
  const name = (colon >= 0 && !header.includes("]") ? header.slice(0, colon) : header).toLowerCase()
  return HOST.test(name) ? name : undefined
}

/**
 * The request's source for admission: the existing trusted-proxy hop contract (`TRUSTED_PROXY_HOPS`, identity's
 * `peerFrom`), so only an explicitly configured hop count lets X-Forwarded-For name it, and IPv6 sources count by
 * their /64. A shared proxy or NAT therefore shares its source limits.
 */
export const sourceOf = (request: Request, peer: string | undefined, trustedProxyHops: number): string =>
  peerFrom(request.headers.get("x-forwarded-for"), peer, trustedProxyHops)

/** Where the path starts in an absolute request URL (after `scheme://authority`). */
const pathStart = (url: string) => {
  const scheme = url.indexOf("://")
  // Stryker disable next-line EqualityOperator: request.url is absolute, so '://' follows a scheme and is never at 0
  return scheme < 0 ? -1 : url.indexOf("/", scheme + 3)
}

/** The path and query as sent, for forwarding to the upstream unchanged. */
export const targetOf = (url: string): string => {
  const start = pathStart(url)
  // Stryker disable next-line EqualityOperator: a '/' searched for after '://' is never at 0
  return start < 0 ? "/" : url.slice(start)
}

const WAKE_METHODS = new Set(["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"])

/**
 * Routes under /api that are reserved for their own protocols and never gain the wake path: the separately reserved
 * Muse protocol and MCP.
 */
export const RESERVED_PREFIXES = ["/api/muse", "/api/mcp"] as const

// Unreserved, sub-delims, ':' and '@' (RFC 3986 pchar) and '/': no '%', ';', '\', controls or anything else.
const CANONICAL_PATH = /^(?:\/[A-Za-z0-9\-._~!$&'()*+,=:@]+)+$/

/**
 * Whether a request may wake a sleeping stack: an `/api/...` route (`/api/instance` included) with GET, HEAD,
 * OPTIONS, POST, PUT, PATCH or DELETE, not a reserved protocol route, not an upgrade, and with a canonical path (no
 * percent-encoding, no empty, `.` or `..` segment, no trailing slash, no `;` or `\`). Anything else keeps to the
 * awake stack only.
 */
export const isWakeable = (request: Request): boolean => {
  if (!WAKE_METHODS.has(request.method)) return false
  if (request.headers.has("upgrade")) return false
  const connection = request.headers.get("connection")
  // Stryker disable next-line ConditionalExpression: a test of null reads "null", which holds no upgrade token; the null test only narrows the type
  if (connection !== null && /(?:^|,)\s*upgrade\s*(?:,|$)/i.test(connection)) return false
  const target = targetOf(request.url)
  const query = target.indexOf("?")
  // Stryker disable next-line EqualityOperator: the target starts with '/', so '?' is never at 0
  const path = query < 0 ? target : target.slice(0, query)
  if (!path.startsWith("/api/") || !CANONICAL_PATH.test(path)) return false
  if (path.split("/").some((segment) => segment === "." || segment === "..")) return false
  return !RESERVED_PREFIXES.some((prefix) => path === prefix || path.startsWith(`${prefix}/`))
}

/** The presented bearer token, if the request has exactly one `Authorization: Bearer` credential. */
export const bearerOf = (request: Request): string | undefined => {
  const header = request.headers.get("authorization")
  // Stryker disable next-line ConditionalExpression: exec of null reads "null", which is no Bearer credential; the null test only narrows the type
  if (header === null) return undefined
  const match = /^Bearer ([\x21-\x7e]{1,512})$/.exec(header)
  return match?.[1]
}

// RFC 9110 hop-by-hop fields, which describe one connection and are never forwarded.
const HOP_BY_HOP = ["connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"]

/** A copy of `headers` without hop-by-hop fields (and those the Connection header names). */
export const endToEnd = (headers: Headers): Headers => {
  const copy = new Headers(headers)
  const named = headers.get("connection")
  if (named !== null) for (const name of named.split(",")) copy.delete(name.trim())
  for (const name of HOP_BY_HOP) copy.delete(name)
  return copy
}
