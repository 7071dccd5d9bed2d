import type { HttpApi, HttpApiGroup } from "@effect/platform"
import { JsonBodyRefused } from "@delivery/core"
import { BodyTooLarge, BodyUnreadable, InternalError, PathInvalid, RequestInvalid, ShuttingDown, UriTooLong } from "./Refusals.ts"

/**
 * What the HTTP edge may answer on any route of any role (docs/http.md), added to an API once so that every route
 * documents them.
 */
export const withEdgeErrors = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>
) =>
  api
    .addError(RequestInvalid, { status: 400 })
    .addError(PathInvalid, { status: 400 })
    .addError(BodyUnreadable, { status: 400 })
    .addError(BodyTooLarge, { status: 413 })
    .addError(UriTooLong, { status: 414 })
    .addError(JsonBodyRefused, { status: 422 })
    .addError(InternalError, { status: 500 })
    .addError(ShuttingDown, { status: 503 })
