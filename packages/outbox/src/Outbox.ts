import { Canonical, ProviderHttp, type QueueView, queueSnapshotOf } from "@delivery/core"
import { Envelope, eventIdentity, type ProjectId, Signer, type TenantId } from "@delivery/signer"
import { Clock, Effect, Either, Option, Schema } from "effect"
import { randomUUID } from "node:crypto"
import {
  CursorInvalid,
  DeadLetterPage,
  type EnqueueRequest,
  Enqueued,
  EnqueueReplayed,
  DeliveryTarget,
  DeliveryTargetInvalid,
  DeliveryTargetMissing,
  IdempotencyKeyConflict,
  MessageId,
  MessageNotDead,
  MessageNotFound,
  MessageState,
  OutboxMessage,
  OutboxStorageUnavailable,
  PAGE_LIMIT
} from "./Domain.ts"
import { OutboxSettings } from "./OutboxConfig.ts"
import { type KeyedRow, type MessageRow, OutboxRepo } from "./OutboxRepo.ts"

const toMessage = (row: MessageRow) =>
  new OutboxMessage({
    id: MessageId.make(row.id),
    tenant: row.tenant as TenantId,
    project: row.project as ProjectId,
    idempotencyKey: row.idempotency_key as Envelope["idempotencyKey"],
    eventIdentity: row.event_identity,
    state: row.state,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    attemptCeiling: row.attempt_ceiling,
    dueAt: row.due_at,
    lastError: row.last_error,
    deadReason: row.dead_reason,
    createdAt: row.created_at,
    deliveredAt: row.delivered_at,
    deadAt: row.dead_at
  })

// The stored body was written by `enqueue` from a decoded envelope: not decoding back is a bug.
const decodeStoredEnvelope = (text: string) => Effect.orDie(Schema.decode(Schema.parseJson(Envelope))(text))

/**
 * "Same content" for the idempotency check: SHA-256 of the RFC 8785 form of what the caller
 * controls, i.e. the envelope without `keyId` (the Signer picks the key, and a rotation between two
 * retries must not turn a retry into a conflict) and the effective maxAttempts. The signature is
 * not part of it either: it follows from the rest.
 */
export const requestFingerprint = (envelope: EnqueueRequest["envelope"], maxAttempts: number): string =>
  Canonical.sha256Hex(
    Either.getOrThrowWith(Canonical.canonicalBytes({ envelope, maxAttempts }), (e) => new Error(`no RFC 8785 form: ${e.code}`))
  )

// Cursor: base64url of "<dead_at ISO>|<id>". Times are written from the Clock in milliseconds, so
// the ISO form round-trips exactly and the keyset comparison never skips or repeats a row.
/** A keyset position: the ordering time of the last row of a page and its id. */
const encodeCursor = (at: Date, id: string) => Buffer.from(`${at.toISOString()}|${id}`, "utf8").toString("base64url")

const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)\|([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/

const decodeCursor = (cursor: string) => {
  const match = cursor.length <= 128 ? CURSOR.exec(Buffer.from(cursor, "base64url").toString("utf8")) : null
  const deadAt = match === null ? Number.NaN : Date.parse(match[1]!)
  return Number.isNaN(deadAt)
    ? Effect.fail(new CursorInvalid({ reason: "cursor-invalid" }))
    : Effect.succeed({ at: new Date(deadAt), id: match![2]! })
}

export class Outbox extends Effect.Service<Outbox>()("@delivery/outbox/Outbox", {
  dependencies: [OutboxRepo.Default],
  effect: Effect.gen(function*() {
    const repo = yield* OutboxRepo
    const signer = yield* Signer
    const { defaultMaxAttempts } = yield* OutboxSettings
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const replay = (row: KeyedRow, fingerprint: string) =>
      row.request_sha256 === fingerprint
        ? Effect.map(decodeStoredEnvelope(row.envelope), (envelope) =>
          new EnqueueReplayed({ replayed: true, message: toMessage(row), envelope }))
        : Effect.fail(new IdempotencyKeyConflict({
          reason: "idempotency-key-conflict",
          tenant: row.tenant,
          project: row.project,
          idempotencyKey: row.idempotency_key
        }))

    /**
     * Signs with the tenant's active key and stores the envelope under (tenant, project,
     * idempotencyKey), all in one transaction. The same key again returns the original envelope
     * unchanged; the same key with other content is refused (`idempotency-key-conflict`).
     */
    const enqueue = Effect.fn("Outbox.enqueue")(function*(request: EnqueueRequest) {
      const maxAttempts = request.maxAttempts ?? defaultMaxAttempts
      const fingerprint = requestFingerprint(request.envelope, maxAttempts)
      const { project, tenant } = request.envelope.route
      const key = { tenant, project, idempotencyKey: request.envelope.idempotencyKey }
      return yield* repo.transaction("enqueue", Effect.gen(function*() {
        const existing = yield* repo.findByKey(key)
        if (Option.isSome(existing)) return yield* replay(existing.value, fingerprint)
        if (Option.isNone(yield* repo.findTarget({ tenant, project }))) {
          return yield* new DeliveryTargetMissing({ reason: "delivery-target-missing", tenant, project })
        }
        const envelope = yield* signer.sign(request.envelope).pipe(
          Effect.catchTag("SignerStorageUnavailable", () => new OutboxStorageUnavailable({ operation: "sign" }))
        )
        const inserted = yield* repo.insert({
          id: randomUUID(),
          ...key,
          requestSha256: fingerprint,
          eventIdentity: eventIdentity(envelope),
          envelope: Either.getOrThrow(Canonical.canonicalString(envelope)),
          maxAttempts,
          now: yield* now
        })
        if (Option.isSome(inserted)) return new Enqueued({ replayed: false, message: toMessage(inserted.value), envelope })
        // A concurrent enqueue of the same key committed first: answer as a replay of it.
        return yield* Option.match(yield* repo.findByKey(key), {
          // Stryker disable next-line ArrowFunction,StringLiteral: unreachable, outbox rows are never deleted, so the row that won the conflict is there
          onNone: () => Effect.dieMessage("outbox insert conflicted but no row exists"),
          onSome: (winner) => replay(winner, fingerprint)
        })
      }))
    })

    /** Registers or replaces the tenant/project's target, with its audit row, in one transaction. */
    const registerTarget = Effect.fn("Outbox.registerTarget")(
      function*(tenant: TenantId, project: ProjectId, endpoint: string, actor: string) {
        const valid = yield* Either.mapLeft(
          ProviderHttp.ProviderEndpoint.parse(endpoint),
          (e) => new DeliveryTargetInvalid({ reason: "delivery-target-invalid", code: e.code })
        )
        return yield* repo.transaction("registerTarget", Effect.gen(function*() {
          const at = yield* now
          const row = yield* repo.upsertTarget({ tenant, project, endpoint: valid, now: at })
          yield* repo.audit({
            tenant, project, action: row.inserted ? "target-registered" : "target-replaced",
            messageId: null, actor, attempt: null, detail: null, at
          })
          return new DeliveryTarget({ tenant, project, endpoint: row.endpoint, createdAt: row.created_at, updatedAt: row.updated_at })
        }))
      }
    )

    const target = Effect.fn("Outbox.target")(function*(tenant: TenantId, project: ProjectId) {
      const row = yield* repo.findTarget({ tenant, project })
      return Option.map(row, (r) =>
        new DeliveryTarget({ tenant, project, endpoint: r.endpoint, createdAt: r.created_at, updatedAt: r.updated_at }))
    })

    const message = Effect.fn("Outbox.message")(function*(tenant: TenantId, project: ProjectId, id: MessageId) {
      const row = yield* repo.findInScope({ tenant, project, id, lock: false })
      if (Option.isNone(row)) return yield* new MessageNotFound({ reason: "message-not-found", id })
      return toMessage(row.value)
    })

    /**
     * One page of dead letters of exactly one tenant/project, oldest first. A requested size above
     * 100 is clamped to 100 (spec 000: "a maximum page of 100").
     */
    const deadLetters = Effect.fn("Outbox.deadLetters")(
      function*(tenant: TenantId, project: ProjectId, options: { readonly limit?: number | undefined; readonly cursor?: string | undefined }) {
        const size = Math.min(Math.max(Math.floor(options.limit ?? PAGE_LIMIT), 1), PAGE_LIMIT)
        const after = options.cursor === undefined ? null : yield* decodeCursor(options.cursor)
        const rows = yield* repo.listDead({ tenant, project, limit: size + 1, after: after && { deadAt: after.at, id: after.id } })
        const page = rows.slice(0, size)
        const last = page[page.length - 1]
        return new DeadLetterPage({
          items: page.map(toMessage),
          nextCursor: rows.length > size && last !== undefined ? encodeCursor(last.dead_at!, last.id) : null
        })
      }
    )

    /**
     * One page of the messages of exactly one tenant/project, optionally in one state, oldest first (the console's
     * list). Sizes are clamped to 1..100 like the dead letters'.
     */
    const messages = Effect.fn("Outbox.messages")(
      function*(tenant: TenantId, project: ProjectId, options: {
        readonly state?: MessageState | undefined
        readonly limit?: number | undefined
        readonly cursor?: string | undefined
      }) {
        const size = Math.min(Math.max(Math.floor(options.limit ?? PAGE_LIMIT), 1), PAGE_LIMIT)
        const after = options.cursor === undefined ? null : yield* decodeCursor(options.cursor)
        const rows = yield* repo.listScope({ tenant, project, state: options.state ?? null, limit: size + 1, after })
        const page = rows.slice(0, size)
        const last = page[page.length - 1]
        return new DeadLetterPage({
          items: page.map(toMessage),
          nextCursor: rows.length > size && last !== undefined ? encodeCursor(last.created_at, last.id) : null
        })
      }
    )

    /** The operator actions recorded for one message (its redrives), oldest first, at most 100. */
    const messageAudit = Effect.fn("Outbox.messageAudit")(function*(tenant: TenantId, project: ProjectId, id: MessageId) {
      return yield* repo.auditTrail({ tenant, project, id, limit: 100 })
    })

    /**
     * Gives a dead letter new attempts: same row, id, envelope and idempotency key; the attempt
     * counter continues (never reset) and the ceiling moves up by `maxAttempts` (default: the
     * message's own). The audit row commits in the same transaction.
     */
    const redrive = Effect.fn("Outbox.redrive")(
      function*(tenant: TenantId, project: ProjectId, id: MessageId, actor: string, maxAttempts?: number) {
        return yield* repo.transaction("redrive", Effect.gen(function*() {
          const row = yield* repo.findInScope({ tenant, project, id, lock: true })
          if (Option.isNone(row)) return yield* new MessageNotFound({ reason: "message-not-found", id })
          if (row.value.state !== "dead") {
            return yield* new MessageNotDead({ reason: "message-not-dead", id, state: row.value.state })
          }
          const at = yield* now
          const updated = yield* repo.redrive({ id, extra: maxAttempts ?? row.value.max_attempts, now: at })
          yield* repo.audit({
            tenant, project, action: "redrive", messageId: id, actor,
            attempt: row.value.attempt, detail: row.value.last_error ?? row.value.dead_reason, at
          })
          return toMessage(updated)
        }))
      }
    )

    /** Spec 001's pending work: a message neither delivered nor dead-lettered (pending, also while its retry waits, or delivering). */
    const hasPendingWork: Effect.Effect<boolean, OutboxStorageUnavailable> = repo.hasPending.pipe(
      Effect.withSpan("Outbox.hasPendingWork")
    )

    /**
     * The outbox as a durable queue (core's QueueView): messages by state (pending, delivering, delivered, dead);
     * due: a pending message whose attempt time has come, or a delivering one whose lease expired (the worker's claim
     * takes exactly these); completed: messages delivered, by their delivery time.
     */
    const queueView: QueueView = {
      family: "outbox",
      title: "Outbox",
      snapshot: Effect.map(repo.queueView, queueSnapshotOf("outbox", MessageState.literals)).pipe(
        Effect.withSpan("Outbox.queueView")
      )
    }

    return { enqueue, registerTarget, target, message, messages, messageAudit, deadLetters, redrive, hasPendingWork, queueView } as const
  })
}) {}
