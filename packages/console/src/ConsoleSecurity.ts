import { type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { timingSafeEqual } from "node:crypto"

export const SESSION_COOKIE = "console_session"
export const CONSOLE_PATH = "/console"

/**
 * Served with every console answer. Scripts and styles only from the console's own files (no inline script or
 * style, no eval), no frames, forms post only here, nothing is cached.
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'"
].join("; ")

export const securityHeaders: Readonly<Record<string, string>> = {
  "content-security-policy": CONTENT_SECURITY_POLICY,
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  // Not no-referrer: under it browsers send `Origin: null` with the console's own form posts, and the same-site
  // check could no longer tell them from a foreign page's.
  "referrer-policy": "same-origin",
  "cross-origin-opener-policy": "same-origin",
  "cache-control": "no-store"
}

/**
 * Whether the browser reached us over TLS: the request's own scheme, or, behind `TRUSTED_PROXY_HOPS` proxies, the
 * scheme the nearest trusted proxy reports (a client can write `X-Forwarded-Proto` too, so it counts only then).
 */
export const isTls = (request: HttpServerRequest.HttpServerRequest, trustedProxyHops: number): boolean => {
  if (request.url.startsWith("https:")) return true
  if (trustedProxyHops === 0) return false
  const forwarded = request.headers["x-forwarded-proto"]
  if (forwarded === undefined) return false
  const hops = forwarded.split(",").map((value) => value.trim().toLowerCase())
  return hops[hops.length - 1] === "https"
}

/** The session cookie: HttpOnly, SameSite=Strict, scoped to the console, Secure over TLS, gone when the session ends. */
export const withSessionCookie = (
  response: HttpServerResponse.HttpServerResponse,
  token: string,
  options: { readonly expiresAt: Date; readonly secure: boolean }
) =>
  HttpServerResponse.unsafeSetCookie(response, SESSION_COOKIE, token, {
    path: CONSOLE_PATH,
    httpOnly: true,
    sameSite: "strict",
    secure: options.secure,
    expires: options.expiresAt
  })

export const withoutSessionCookie = (response: HttpServerResponse.HttpServerResponse, secure: boolean) =>
  HttpServerResponse.unsafeSetCookie(response, SESSION_COOKIE, "", {
    path: CONSOLE_PATH,
    httpOnly: true,
    sameSite: "strict",
    secure,
    maxAge: 0
  })

/** Constant-time comparison of a form's CSRF token with the session's. */
export const csrfMatches = (presented: string | undefined, expected: string): boolean => {
  if (presented === undefined) return false
  const a = Buffer.from(presented)
  const b = Buffer.from(expected)
  return a.length === b.length && timingSafeEqual(a, b)
}

/**
 * A state-changing request must come from a console page: browsers send `Origin` (and `Sec-Fetch-Site`) with
 * every POST, and a page of another site cannot forge them. Requests without either (scripts, old clients)
 * still need the session cookie and the CSRF token.
 */
export const isCrossSite = (request: HttpServerRequest.HttpServerRequest): boolean => {
  const site = request.headers["sec-fetch-site"]
  if (site !== undefined && site !== "same-origin" && site !== "none") return true
  const origin = request.headers["origin"]
  if (origin === undefined) return false
  const host = request.headers["host"]
  if (host === undefined) return true
  try {
    return new URL(origin).host !== host
  } catch {
    return true
  }
}
