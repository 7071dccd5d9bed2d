import { type HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { AuthenticatedRequest, type VerifiedIdentity } from "@delivery/identity"
import { Effect, Schema } from "effect"
import { ApiActivity } from "./ApiActivity.ts"
import { TenantDraining } from "./Domain.ts"
import { DrainGate } from "./DrainGate.ts"

/**
 * Routes that stay open while the idle hold lasts and are not counted as work in flight: the idle-wake protocol
 * itself (the cloud must still be able to read and release), the operator's read-only idle status, health, readiness,
 * the API's documents and the metrics scrape (a monitor must not see a stack that drains for sleep as down). None of
 * them accepts work.
 */
export const isOutsideDrain = (path: string): boolean =>
  path.startsWith("/idle-wake/") ||
  path === "/operator/idle-wake/status" ||
  path === "/health" ||
  path === "/ready" ||
  path === "/openapi.json" ||
  path === "/docs" ||
  path === "/metrics"

const encodeDraining = Schema.encodeSync(TenantDraining)

// Stryker disable next-line ObjectLiteral: a note without the member reads as undefined all the same
const freshNote = (): { identity: VerifiedIdentity | undefined } => ({ identity: undefined })

/**
 * Wraps the whole HTTP app of a tenant backend (spec 001, tenant side): while the idle hold lasts every other
 * request is refused with 503 `tenant-draining` and `Retry-After` before routing (no authentication, no SQL), so a
 * drain refusal never counts as API activity; every admitted request is counted in flight until it is answered;
 * and a request authenticated by a current board or agent key that ends with a 2xx extends the local API activity
 * hold. The identity comes from the Authentication middleware through a fresh `AuthenticatedRequest` note.
 */
export const makeTenantGate = Effect.gen(function* () {
  const gate = yield* DrainGate
  const activity = yield* ApiActivity
  return <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, Exclude<R, AuthenticatedRequest>> =>
    Effect.gen(function* () {
      const request = yield* HttpServerRequest.HttpServerRequest
      const path = request.url.split("?", 1)[0]!
      if (isOutsideDrain(path)) return yield* Effect.provideService(app, AuthenticatedRequest, freshNote())
      const admission = yield* gate.admit
      if (admission._tag === "Draining") {
        const correlationId = yield* requestCorrelationId
        const refusal = new TenantDraining({ reason: "tenant-draining", correlationId, retryAfter: admission.retryAfterSeconds })
        return HttpServerResponse.unsafeJson(encodeDraining(refusal), {
          status: 503,
          headers: { "retry-after": String(admission.retryAfterSeconds) }
        })
      }
      const note = freshNote()
      const response = yield* Effect.provideService(app, AuthenticatedRequest, note).pipe(Effect.ensuring(gate.leave))
      yield* activity.observe(note.identity, response.status)
      return response
    })
}
)
