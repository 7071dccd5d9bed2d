import type { VerifiedIdentity } from "@delivery/identity"
import { type KeyRefused, makeVerificationKeys, type SignerStorageUnavailable, publicKeyFromRaw, Signer, type VerificationKey } from "@delivery/signer"
import { LimitStoreLive, makeCorrelationId, queueSnapshotOf, type QueueView, readKeyset } from "@delivery/core"
import { Clock, Duration, Effect, Either, Layer, Option } from "effect"
import { type KeyObject, verify } from "node:crypto"
import {
  type Acknowledgement,
  type CorrelationId,
  EnvelopeAccepted,
  EnvelopeConflict,
  EnvelopeDuplicate,
  EnvelopeForbidden,
  EnvelopeUnprocessable,
  InboxStorageUnavailable,
  type IngestRefusal,
  StreamAuditEntry,
  StreamCursorInvalid,
  StreamPage,
  StreamState,
  StreamSummary,
  SyncRateLimited
} from "./Domain.ts"
import * as Stages from "./EnvelopeStages.ts"
import { PayloadRetentionConfig } from "./InboxConfig.ts"
import { auditContextOf, type AuditRow, InboxRepo, type StorageFailure, type StreamKey, type SummaryRow } from "./InboxRepo.ts"
import { RefusalAudit } from "./RefusalAudit.ts"

/** Who changes a stream's floor and under which request: its audit row's actor and correlation id. */
export interface FloorActor {
  readonly actor: string
  readonly correlationId: string
}
import { SyncLimiter } from "./SyncLimiter.ts"

export interface ReceiveInput {
  /** What the Authentication middleware verified (spec 000 step 1). */
  readonly identity: VerifiedIdentity
  readonly correlationId: CorrelationId
  /** The body, already read under the route's byte limit. */
  readonly body: Uint8Array
}

type AuditContext = Omit<AuditRow, "outcome" | "reason" | "recordedAt" | "correlationId"> & {
  readonly correlationId: CorrelationId
}

// Public keys are decoded into KeyObjects once; the cache is keyed by the key bytes, so a key id registered
// again with other bytes never hits a stale entry (usability is decided by the key's state, read in the
// committing transaction).
const keyObjects = new Map<string, KeyObject>()
/** The key's decoded form, from a cache of at most 1,024 (emptied when full) so that key churn cannot grow it. */
export const keyObjectOf = (key: { readonly publicKey: Uint8Array }): KeyObject => {
  const id = Buffer.from(key.publicKey).toString("base64url")
  let object = keyObjects.get(id)
  if (object === undefined) {
    if (keyObjects.size >= 1024) keyObjects.clear()
    object = publicKeyFromRaw(key.publicKey)
    keyObjects.set(id, object)
  }
  return object
}

/** Streams per page and floor changes per audit trail, at most. */
export const STREAM_PAGE_LIMIT = 100

// Cursor: base64url of "<project>/<producer>", the last stream of a page. Both ids are bounded to
// [a-z0-9_-], so the separator is unambiguous and the keyset comparison never skips or repeats a stream.
const encodeStreamCursor = (row: { readonly project: string; readonly producer: string }) =>
  Buffer.from(`${row.project}/${row.producer}`, "utf8").toString("base64url")

const STREAM_CURSOR = /^([a-z0-9][a-z0-9_-]{0,63})\/([a-z0-9][a-z0-9_-]{0,63})$/

const decodeStreamCursor = (cursor: string) => {
  const match = readKeyset(cursor, STREAM_CURSOR)
  return match === null
    ? Effect.fail(new StreamCursorInvalid({ reason: "cursor-invalid" }))
    : Effect.succeed({ project: match[1]!, producer: match[2]! })
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b)

const toSummary = (tenant: string, row: SummaryRow) =>
  new StreamSummary({
    tenant,
    project: row.project,
    producer: row.producer,
    cursor: row.contiguous_cursor,
    replayFloor: row.replay_floor,
    highSequence: row.high_sequence,
    createdAt: row.created_at,
    lastReceivedAt: row.last_received_at
  })

export class EnvelopeInbox extends Effect.Service<EnvelopeInbox>()("@delivery/envelope-inbox/EnvelopeInbox", {
  effect: Effect.gen(function* () {
    const repo = yield* InboxRepo
    const limiter = yield* SyncLimiter
    const refusals = yield* RefusalAudit
    // Per process: a key id's public key bytes, never its state (see makeVerificationKeys).
    const keys = makeVerificationKeys(yield* Signer)
    const retentionMillis = Duration.toMillis(yield* PayloadRetentionConfig)
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const unavailable = (correlationId: CorrelationId) => (failure: StorageFailure): Effect.Effect<never, InboxStorageUnavailable> =>
      Effect.logWarning("inbox storage unavailable: nothing committed, no acknowledgement").pipe(
        Effect.annotateLogs({ operation: failure.operation, sqlstate: failure.sqlstate }),
        Effect.zipRight(Effect.fail(new InboxStorageUnavailable({ reason: "storage-unavailable", correlationId })))
      )

    /** An authenticated refusal is answered only once its redacted audit row is committed. */
    const refuse = <E extends IngestRefusal>(context: AuditContext, error: E) =>
      Effect.flatMap(now, (recordedAt) => repo.insertAudit({ ...context, recordedAt, outcome: "refused", reason: error.reason })).pipe(
        Effect.catchTag("StorageFailure", unavailable(context.correlationId)),
        Effect.zipRight(Effect.logDebug("envelope refused").pipe(Effect.annotateLogs({ reason: error.reason }))),
        Effect.zipRight(Effect.fail(error))
      )

    /**
     * Spec 000's inbound order. Step 1 (authentication, with the peer limit before it) already happened
     * in the Authentication middleware; the body limit before that, in the route's intake. Every step
     * below refuses with a stable reason, and every refusal after authentication is audited.
     */
    const receive = Effect.fn("EnvelopeInbox.receive")(function* ({ body, correlationId, identity }: ReceiveInput) {
      // The configured sync limiter: after authentication, before any route, key, signature or database work.
      yield* limiter.admit(identity).pipe(
        Effect.catchTags({
          // The limiter exists so that this request costs no database work: its refusal is only counted,
          // and RefusalAudit writes one row per identity and window once the window is over.
          SyncLimitExceeded: ({ retryAfter }) =>
            refusals.record(identity, correlationId, retryAfter).pipe(
              Effect.zipRight(Effect.fail(new SyncRateLimited({ reason: "sync-rate-limited", correlationId, retryAfter })))
            ),
          SyncLimitUnavailable: () =>
            Effect.fail(new InboxStorageUnavailable({ reason: "storage-unavailable", correlationId }))
        })
      )
      let context: AuditContext = { ...auditContextOf(identity, correlationId), correlationId }
      const forbidden = (reason: EnvelopeForbidden["reason"]) => refuse(context, new EnvelopeForbidden({ reason, correlationId }))
      const unprocessable = (reason: EnvelopeUnprocessable["reason"], detail: Partial<Stages.Invalid & { defect: string }> = {}) =>
        refuse(context, new EnvelopeUnprocessable({ reason, correlationId, ...detail }))
      const refuseStep4 = (problem: "schema-version-unsupported" | Stages.Invalid) =>
        problem === "schema-version-unsupported" ? unprocessable(problem) : unprocessable("metadata-invalid", problem)

      // Control-plane streams belong to producer devices; board and agent keys do not feed them.
      if (identity._tag !== "Device") return yield* forbidden("device-credential-required")

      // Step 2: the route names the verified tenant (no key is looked up for a foreign one), then the
      // bounded identities.
      const json = Stages.parseJson(body)
      if (Option.isNone(json)) return yield* unprocessable("json-malformed")
      if (Stages.routeNamesOtherTenant(json.value, identity.tenant)) return yield* forbidden("route-tenant-mismatch")
      const head = Stages.decodeHead(json.value)
      if (Either.isLeft(head)) return yield* unprocessable("envelope-invalid", head.left)
      const { route } = head.right
      context = { ...context, project: route.project, producer: route.producer }

      // Step 3: the signature's encoding, the signed bytes, the key inside the verified tenant, the Ed25519
      // signature. Step 4 (schema version, closed metadata) only ever sees a verified signature.
      const signature = Stages.signatureOf(head.right)
      if (Either.isLeft(signature)) return yield* unprocessable("signature-malformed", { defect: signature.left })
      const envelopeJson = json.value as Record<string, unknown>
      const signed = Stages.signedBytes(envelopeJson)
      if (Either.isRight(signed)) context = { ...context, eventIdentity: signed.right.eventIdentity }
      const { tenant } = identity
      const { keyId } = head.right
      const keyRefusal = (lookup: Effect.Effect<VerificationKey, KeyRefused | SignerStorageUnavailable>) =>
        Effect.catchTags(lookup, {
          KeyRefused: (refused) => forbidden(refused.reason),
          SignerStorageUnavailable: () => Effect.fail(new InboxStorageUnavailable({ reason: "storage-unavailable", correlationId }))
        })
      // The key's public key bytes, from this process's cache when it holds them: then its state was not read, and
      // the commit below reads it in its own transaction (see "Key cache" in docs/controlplane-inbound.md).
      let key: VerificationKey = yield* keyRefusal(keys.resolve(tenant, keyId))
      // A refusal decided with cached bytes reads the key's state first, so that a key refusal (step 3) still wins
      // over any later one, exactly as if the key had been looked up before the signature. Gives the key back when
      // its id now names other bytes (purged, then registered again): the signature is then checked again.
      const recheck = (used: VerificationKey): Effect.Effect<VerificationKey | undefined, EnvelopeForbidden | InboxStorageUnavailable> =>
        used.cached
          ? Effect.map(keyRefusal(keys.lookup(tenant, keyId)), (fresh) => (sameBytes(fresh.publicKey, used.publicKey) ? undefined : fresh))
          : Effect.succeed(undefined)
      // Two rounds at most in practice (cached bytes, then looked-up ones); a key id re-registered again and again
      // while this request runs is answered 503, with nothing committed.
      for (let round = 1; round <= 3; round++) {
        // Without an RFC 8785 form (a lone surrogate in the metadata) no signature can cover the envelope:
        // after the key lookup, the refusal is step 4's, which says what is wrong and where. The metadata schema
        // admits no lone surrogate, so step 4 always refuses such an envelope (getOrThrow never throws here).
        if (Either.isLeft(signed)) {
          const changed = yield* recheck(key)
          if (changed !== undefined) {
            key = changed
            continue
          }
          return yield* refuseStep4(Either.getOrThrow(Either.flip(Stages.requireVersionAndMetadata(envelopeJson, head.right))))
        }
        if (!verify(null, signed.right.bytes, keyObjectOf(key), signature.right)) {
          const changed = yield* recheck(key)
          if (changed !== undefined) {
            key = changed
            continue
          }
          return yield* forbidden("signature-invalid")
        }

        // Step 4: schema version 1, then the closed metadata payload.
        const checked = Stages.requireVersionAndMetadata(envelopeJson, head.right)
        if (Either.isLeft(checked)) {
          const changed = yield* recheck(key)
          if (changed !== undefined) {
            key = changed
            continue
          }
          return yield* refuseStep4(checked.left)
        }
        const envelope = checked.right

        // The key's state (step 3's other half), then steps 5 and 6: under the stream lock, check and commit, in
        // one statement that is one transaction (autocommit): its answer arrives only after COMMIT, and a failure
        // anywhere commits nothing.
        const at = yield* now
        const committed = yield* repo.ingest({
          tenant,
          project: route.project,
          producer: route.producer,
          sequence: envelope.sequence,
          eventId: envelope.eventId,
          idempotencyKey: envelope.idempotencyKey,
          eventIdentity: signed.right.eventIdentity,
          envelope: Stages.storedEnvelope(signed.right, envelope),
          account: identity.account,
          device: identity.device,
          correlationId,
          at,
          expiresAt: new Date(at.getTime() + retentionMillis),
          keyId,
          publicKey: key.publicKey
        }).pipe(Effect.catchTag("StorageFailure", unavailable(correlationId)))

        // Step 7: only now, after COMMIT, is there anything to acknowledge.
        const ack = { correlationId, eventIdentity: signed.right.eventIdentity, sequence: envelope.sequence, cursor: committed.cursor }
        // Built without re-validation (`true`): every field is ours and already checked, and the HTTP
        // edge encodes the answer through its schema anyway.
        switch (committed.outcome) {
          case "accepted":
            return new EnvelopeAccepted({ outcome: "accepted", reason: "accepted", ...ack, cursor: committed.cursor }, true) as Acknowledgement
          case "duplicate":
            return new EnvelopeDuplicate({ outcome: "duplicate", reason: "duplicate", ...ack, cursor: committed.cursor }, true) as Acknowledgement
          case "refused":
            return yield* new EnvelopeConflict({ reason: committed.reason, correlationId })
          case "key-refused":
            // Revoked, expired or gone since its bytes were cached: its refusal's audit row committed with the statement.
            yield* keys.evict(tenant, keyId)
            yield* Effect.logDebug("envelope refused").pipe(Effect.annotateLogs({ reason: committed.reason }))
            return yield* new EnvelopeForbidden({ reason: committed.reason, correlationId })
          case "key-replaced":
            // Nothing was written: look the key up (and cache its new bytes), then check the signature again.
            key = yield* keyRefusal(keys.lookup(tenant, keyId))
            continue
        }
      }
      return yield* Effect.fail(new InboxStorageUnavailable({ reason: "storage-unavailable", correlationId }))
    }, (effect, { correlationId }) => Effect.annotateLogs(effect, { correlationId }))

    const toState = (key: StreamKey, stream: { cursor: number; replayFloor: number; highSequence: number }) =>
      new StreamState({ ...key, cursor: stream.cursor, replayFloor: stream.replayFloor, highSequence: stream.highSequence })

    /**
     * Operator action: closes every sequence up to `floor` (they will only ever be acknowledged as
     * duplicates of retained identities) and moves the cursor over them and the retained run above.
     * The floor never goes down: a lower value changes nothing. Creates the stream when it is new.
     * The change and its `inbox_stream_audit` row (also for `unchanged`) commit in one transaction.
     */
    const raiseReplayFloorAs = Effect.fn("EnvelopeInbox.raiseReplayFloor")(
      function* (key: StreamKey, floor: number, by?: FloorActor) {
        if (!Number.isSafeInteger(floor) || floor < 0) return yield* Effect.dieMessage("a replay floor is an integer 0..2^53-1")
        const actor = by ?? { actor: "system:envelope-inbox", correlationId: makeCorrelationId() }
        const at = yield* now
        return yield* repo.transaction(
          "raiseReplayFloor",
          Effect.gen(function* () {
            const stream = yield* repo.lockStream(key, at)
            const audit = (outcome: "applied" | "unchanged", floorAfter: number) =>
              repo.insertFloorAudit({ ...key, ...actor, outcome, floorBefore: stream.replayFloor, floorAfter, requested: floor, at })
            if (floor <= stream.replayFloor) {
              yield* audit("unchanged", stream.replayFloor)
              return { state: toState(key, stream), outcome: "unchanged" as const }
            }
            const cursor = yield* repo.runEnd(stream.streamId, Math.max(stream.cursor, floor))
            yield* repo.raiseFloor({ streamId: stream.streamId, floor, cursor })
            yield* audit("applied", floor)
            return {
              state: toState(key, { cursor, replayFloor: floor, highSequence: stream.highSequence }),
              outcome: "applied" as const
            }
          })
        )
      }
    )

    const raiseReplayFloor = (key: StreamKey, floor: number, by?: FloorActor) =>
      Effect.map(raiseReplayFloorAs(key, floor, by), (raised) => raised.state)

    const stream = Effect.fn("EnvelopeInbox.stream")(function* (key: StreamKey) {
      return Option.map(yield* repo.findStream(key), (found) => toState(key, found))
    })

    /**
     * One page of a tenant's streams, optionally of one project, ordered by (project, producer) (the console's
     * list). Sizes are clamped to 1..100.
     */
    const streams = Effect.fn("EnvelopeInbox.streams")(
      function* (tenant: string, options: {
        readonly project?: string | undefined
        readonly cursor?: string | undefined
        readonly limit?: number | undefined
      } = {}) {
        const size = Math.min(Math.max(Math.floor(options.limit ?? STREAM_PAGE_LIMIT), 1), STREAM_PAGE_LIMIT)
        const after = options.cursor === undefined ? null : yield* decodeStreamCursor(options.cursor)
        const rows = yield* repo.listStreams({ tenant, project: options.project ?? null, after, limit: size + 1 })
        const page = rows.slice(0, size)
        const last = page[page.length - 1]
        return new StreamPage({
          items: page.map((row) => toSummary(tenant, row)),
          nextCursor: rows.length > size && last !== undefined ? encodeStreamCursor(last) : null
        })
      }
    )

    /** A stream's position with its creation and last write; none for a stream never seen. */
    const streamSummary = Effect.fn("EnvelopeInbox.streamSummary")(function* (key: StreamKey) {
      return Option.map(yield* repo.findSummary(key), (row) => toSummary(key.tenant, row))
    })

    /** The stream's floor requests (`inbox_stream_audit`), newest first, at most 100. */
    const streamAudit = Effect.fn("EnvelopeInbox.streamAudit")(function* (key: StreamKey) {
      const rows = yield* repo.floorAudit(key, STREAM_PAGE_LIMIT)
      return rows.map((row) =>
        new StreamAuditEntry({
          action: row.action,
          outcome: row.outcome,
          floorBefore: row.floor_before,
          floorAfter: row.floor_after,
          requested: row.requested,
          actor: row.actor,
          at: row.at,
          correlationId: row.correlation_id
        })
      )
    })

    /**
     * Inbound streams as a durable family (core's QueueView). Ingest has no delivery queue: an envelope is final once
     * acknowledged. What waits for a worker is retention, so the states are the payloads': retained (within their
     * retention) and expired (past it, still stored until a sweep deletes them); streams, identities and audit rows are
     * permanent and not counted. Due: an expired payload, aged from its expiry (a growing age means retention is not
     * running); completed: envelopes accepted, by their acceptance time (duplicates and refusals are not).
     */
    const queueView: QueueView = {
      family: "inbound-streams",
      title: "Inbound streams",
      snapshot: repo.queueView.pipe(
        Effect.map(queueSnapshotOf("inbound-streams", ["retained", "expired"])),
        Effect.catchTag("StorageFailure", unavailable(makeCorrelationId())),
        Effect.withSpan("EnvelopeInbox.queueView")
      )
    }

    return { receive, raiseReplayFloor, raiseReplayFloorAs, stream, streams, streamSummary, streamAudit, queueView } as const
  }),
  dependencies: [InboxRepo.Default, SyncLimiter.Default, RefusalAudit.Default]
}) {}

/**
 * The service over the process's limit store (memory, or Redis with REDIS_URL); it still needs `Signer` and
 * `SqlClient`. A shared store that cannot answer refuses with 503 (fail closed): the sync limit is the deployment's
 * promise per device, and a producer keeps what was not acknowledged and sends it again (docs/scaling.md).
 */
export const EnvelopeInboxLive = EnvelopeInbox.Default.pipe(Layer.provide(LimitStoreLive))
