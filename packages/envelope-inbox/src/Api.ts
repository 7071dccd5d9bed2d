import { HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSchema, OpenApi } from "@effect/platform"
import { Authentication } from "@delivery/identity"
import { Envelope } from "@delivery/signer"
import { Context, Schema } from "effect"
import {
  type CorrelationId,
  EnvelopeAccepted,
  EnvelopeConflict,
  EnvelopeDuplicate,
  EnvelopeForbidden,
  EnvelopeTooLarge,
  EnvelopeUnprocessable,
  EnvelopeUnreadable,
  InboxStorageUnavailable,
  SyncRateLimited
} from "./Domain.ts"

/** What the intake hands the handler: the request's correlation id and its body, read under the limit. */
export class IntakeRequest extends Context.Tag("@delivery/envelope-inbox/IntakeRequest")<
  IntakeRequest,
  { readonly correlationId: CorrelationId; readonly body: Uint8Array }
>() {}

/**
 * The route's outer adapter (spec 000: "must enforce its body limit before constructing a request"). It
 * runs before Authentication: it takes the request's correlation id (core's `requestCorrelationId`, assigned
 * at the HTTP edge and on every response as `x-correlation-id`), refuses a declared or actual body over
 * INBOX_MAX_ENVELOPE_BYTES with 413, and reads the body with a bounded reader.
 */
export class EnvelopeIntake extends HttpApiMiddleware.Tag<EnvelopeIntake>()("@delivery/envelope-inbox/EnvelopeIntake", {
  failure: Schema.Union(
    EnvelopeTooLarge.annotations(HttpApiSchema.annotations({ status: 413 })),
    EnvelopeUnreadable.annotations(HttpApiSchema.annotations({ status: 400 }))
  ),
  provides: IntakeRequest
}) {}

const description = `Submit one signed controlplane/v1 envelope (docs/controlplane-envelope.md) with a device credential.
Checks run in spec 000's order: body limit (413), authentication (401, peer limit 429), sync limiter (429 with
Retry-After), route tenant and bounded identities (403/422), key and Ed25519 signature (403/422), schema version 1
and closed metadata (422), stream lock with identity, replay-floor and sequence checks (409), one transaction (503
when nothing was committed). 201: accepted now; 200: a duplicate of an event accepted before. See
docs/controlplane-inbound.md for every reason.`

/**
 * The body is declared as the envelope schema for the OpenAPI document and typed clients only: the handler
 * is raw, because HttpApi would otherwise read and decode the body, without a bound, before any check.
 * The intake reads it instead, and the checks decode it in spec 000's order.
 */
export class EnvelopeInboxApi extends HttpApiGroup.make("controlplane")
  .add(
    HttpApiEndpoint.post("ingest", "/controlplane/v1/envelopes")
      // Documents the body and lets HttpApiClient send it; the handler is raw (`handleRaw`), so the server
      // never decodes it this way: the intake reads it under the limit and the checks decode it in order.
      .setPayload(Envelope)
      .addSuccess(EnvelopeAccepted, { status: 201 })
      .addSuccess(EnvelopeDuplicate, { status: 200 })
      .addError(EnvelopeForbidden, { status: 403 })
      .addError(EnvelopeConflict, { status: 409 })
      .addError(EnvelopeUnprocessable, { status: 422 })
      .addError(SyncRateLimited, { status: 429 })
      .addError(InboxStorageUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Submit a signed control-plane envelope")
      .annotate(OpenApi.Description, description)
  )
  .middleware(Authentication)
  // Added last, so it runs first: the body limit comes before authentication.
  .middleware(EnvelopeIntake)
  .annotate(OpenApi.Title, "Control plane")
{}
