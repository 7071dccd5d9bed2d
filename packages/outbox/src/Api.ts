import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Authentication, OperatorAuthentication, PermissionDenied } from "@delivery/identity"
import { KeyUnavailable, SchemaVersionUnsupported } from "@delivery/signer"
import { Schema } from "effect"
import {
  CursorInvalid,
  DeadLetterPage,
  Enqueued,
  EnqueueReplayed,
  EnqueueRequest,
  DeliveryTarget,
  DeliveryTargetInvalid,
  DeliveryTargetMissing,
  DeliveryTargetNotFound,
  IdempotencyKeyConflict,
  MessageId,
  MessageNotDead,
  MessageNotFound,
  OutboxMessage,
  OutboxStorageUnavailable,
  ProjectId,
  Redrive,
  RegisterTarget,
  TenantId,
  TenantMismatch
} from "./Domain.ts"

const Scope = Schema.Struct({ tenant: TenantId, project: ProjectId })
const MessagePath = Schema.Struct({ tenant: TenantId, project: ProjectId, id: MessageId })

/** `limit` above 100 is clamped to 100 (spec 000: "a maximum page of 100"); below 1 is a 400. */
const PageParams = Schema.Struct({
  limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.positive())),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(128)))
})

/** The permission an API key needs to enqueue outbound envelopes for its own tenant. */
export const ENQUEUE_PERMISSION = "outbox:enqueue"

/**
 * Operator routes of the outbox: delivery targets, dead letters, redrive. Always scoped by an
 * explicit tenant and project in the path. Behind `OperatorAuthentication` (401, 403, 429, 503).
 */
export class OutboxOperatorApi extends HttpApiGroup.make("outboxOperator")
  .add(
    HttpApiEndpoint.put("registerTarget", "/operator/outbox/targets/:tenant/:project")
      .setPath(Scope)
      .setPayload(RegisterTarget)
      .addSuccess(DeliveryTarget)
      .addError(DeliveryTargetInvalid, { status: 422 })
      .annotate(OpenApi.Summary, "Register or replace the delivery target of a tenant/project")
      .annotate(OpenApi.Description, "https anywhere, http only to loopback; no credentials, query or fragment (422 `delivery-target-invalid` with the stable code). Audited.")
  )
  .add(
    HttpApiEndpoint.get("target", "/operator/outbox/targets/:tenant/:project")
      .setPath(Scope)
      .addSuccess(DeliveryTarget)
      .addError(DeliveryTargetNotFound, { status: 404 })
      .annotate(OpenApi.Summary, "The delivery target of a tenant/project")
  )
  .add(
    HttpApiEndpoint.get("message", "/operator/outbox/messages/:tenant/:project/:id")
      .setPath(MessagePath)
      .addSuccess(OutboxMessage)
      .addError(MessageNotFound, { status: 404 })
      .annotate(OpenApi.Summary, "One outbox message's state (identities and a stable error code, never the payload)")
  )
  .add(
    HttpApiEndpoint.get("deadLetters", "/operator/outbox/dead-letters/:tenant/:project")
      .setPath(Scope)
      .setUrlParams(PageParams)
      .addSuccess(DeadLetterPage)
      .addError(CursorInvalid, { status: 400 })
      .annotate(OpenApi.Summary, "Dead letters of one tenant/project, oldest first, at most 100 per page")
  )
  .add(
    HttpApiEndpoint.post("redrive", "/operator/outbox/dead-letters/:tenant/:project/:id/redrive")
      .setPath(MessagePath)
      .setPayload(Redrive)
      .addSuccess(OutboxMessage)
      .addError(MessageNotFound, { status: 404 })
      .addError(MessageNotDead, { status: 409 })
      .annotate(OpenApi.Summary, "Give a dead letter new attempts: same identity and envelope; audited")
  )
  .addError(OutboxStorageUnavailable, { status: 503 })
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Outbox (operator)")
{}

/**
 * Enqueue for a tenant's own API keys (permission `outbox:enqueue`): the envelope's route must name
 * the key's tenant. Behind `Authentication` (401, 429, 503).
 */
export class OutboxApi extends HttpApiGroup.make("outbox")
  .add(
    HttpApiEndpoint.post("enqueue", "/api/outbox/messages")
      .setPayload(EnqueueRequest)
      .addSuccess(Enqueued, { status: 201 })
      .addSuccess(EnqueueReplayed)
      .addError(IdempotencyKeyConflict, { status: 409 })
      .addError(DeliveryTargetMissing, { status: 422 })
      .addError(KeyUnavailable, { status: 422 })
      .addError(SchemaVersionUnsupported, { status: 422 })
      .addError(TenantMismatch, { status: 403 })
      .addError(PermissionDenied, { status: 403 })
      .addError(OutboxStorageUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Sign an envelope with the tenant's active key and enqueue it for delivery")
      .annotate(OpenApi.Description, "201 when enqueued; 200 with the original, unchanged envelope when the idempotency key was already used with the same content; 409 `idempotency-key-conflict` when it was used with other content.")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Outbox")
{}
