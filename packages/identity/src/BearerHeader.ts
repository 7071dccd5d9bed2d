import type { HttpServerRequest } from "@effect/platform"
import { Effect } from "effect"
import { Unauthenticated } from "./Domain.ts"
import { withHeader } from "./PeerLimit.ts"

const BEARER = /^bearer /i

/**
 * The header checks every bearer middleware of this package makes before any credential work:
 * no header is `missing`, another scheme is `malformed`. Needed because the platform's bearer
 * decoder slices the first seven characters whatever the scheme was.
 */
export const requireBearerHeader = (request: HttpServerRequest.HttpServerRequest) => {
  const header = request.headers.authorization
  if (header === undefined || header.trim() === "") {
    return withHeader("www-authenticate", "Bearer").pipe(
      Effect.zipRight(Effect.fail(new Unauthenticated({ reason: "missing" })))
    )
  }
  if (!BEARER.test(header)) {
    return withHeader("www-authenticate", "Bearer error=\"invalid_request\"").pipe(
      Effect.zipRight(Effect.fail(new Unauthenticated({ reason: "malformed" })))
    )
  }
  return Effect.void
}

/** RFC 6750: a presented but wrong, expired or revoked token is `invalid_token`. */
export const invalidTokenHeader = withHeader("www-authenticate", "Bearer error=\"invalid_token\"")
