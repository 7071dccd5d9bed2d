import { Backoff } from "@delivery/core"
import {
  decodeUnsignedEnvelope,
  type Envelope,
  type EnvelopeInvalid,
  type Metadata,
  type Route,
  signEnvelope,
  SUPPORTED_SCHEMA_VERSION,
  type UnsignedEnvelope
} from "@delivery/signer"
import { Duration, Effect, FiberRef, Option, Redacted, Schema } from "effect"
import { type KeyObject, randomBytes } from "node:crypto"
import { type ClientOptions, lastRetryAfter, makeClient } from "./Client.ts"

/** The signing key of the producer's tenant: its id (registered with the operator route) and private key. */
export interface ProducerKey {
  readonly keyId: string
  readonly privateKey: KeyObject
}

export interface RetryPolicy {
  /** Sends at most this many times in all (default 8). */
  readonly maxAttempts?: number | undefined
  /** First backoff delay (default 200 ms); doubles per attempt with up to half taken off at random. */
  readonly base?: Duration.DurationInput | undefined
  /** No wait is longer, whatever `Retry-After` says (default 30 s). */
  readonly cap?: Duration.DurationInput | undefined
}

export interface ProducerOptions extends ClientOptions {
  /** The producer device's credential (`device_…`), issued by the operator. */
  readonly token: Redacted.Redacted<string>
  readonly key: ProducerKey
  readonly retry?: RetryPolicy | undefined
}

/** One event to send. Absent ids are made up: `eventId` random, `idempotencyKey` = `eventId`, `createdAt` now. */
export interface EventToSend {
  readonly route: { readonly tenant: string; readonly project: string; readonly producer: string }
  readonly sequence: number
  readonly metadata: {
    readonly kind: string
    readonly subject: string
    readonly attributes?: Readonly<Record<string, string>> | undefined
  }
  readonly eventId?: string | undefined
  readonly idempotencyKey?: string | undefined
  readonly createdAt?: string | undefined
}

/** What the inbox acknowledged: accepted now, or a duplicate of an event it had already accepted. */
export interface Sent {
  readonly outcome: "accepted" | "duplicate"
  readonly eventIdentity: string
  readonly sequence: number
  readonly cursor: number
  readonly correlationId: string
  /** How many times the envelope was sent before it was acknowledged. */
  readonly attempts: number
  readonly envelope: Envelope
}

/**
 * The backend stayed unavailable (429, 503 or no connection) for every attempt. The envelope may still have
 * been committed by one of them: sending the same envelope again is always safe (a duplicate is success).
 */
export class ProducerGaveUp extends Schema.TaggedError<ProducerGaveUp>()("ProducerGaveUp", {
  attempts: Schema.Number,
  /** The `_tag` of the last answer or transport failure. */
  last: Schema.String
}) {}

/** Refusals that mean "not now": the same envelope is sent again after a wait. */
const RETRIED = new Set([
  "SyncRateLimited",
  "IdentityRateLimited",
  "InboxStorageUnavailable",
  "IdentityStorageUnavailable",
  "ShuttingDown",
  "RequestError"
])

const tagOf = (error: unknown): string =>
  typeof error === "object" && error !== null && "_tag" in error ? String(error._tag) : "unknown"

/** The body's own `retryAfter` (milliseconds) of the rate-limit refusals, when there is one. */
const bodyRetryAfter = (error: unknown): Option.Option<number> =>
  typeof error === "object" && error !== null && "retryAfter" in error && typeof error.retryAfter === "number"
    ? Option.some(error.retryAfter)
    : Option.none()

const newEventId = () => randomBytes(16).toString("base64url")

/** Builds the unsigned envelope and checks it against the same closed schema the inbox applies. */
export const envelopeOf = (event: EventToSend, keyId: string): Effect.Effect<UnsignedEnvelope, EnvelopeInvalid> => {
  const eventId = event.eventId ?? newEventId()
  return decodeUnsignedEnvelope({
    type: "controlplane/v1",
    route: event.route as Route,
    eventId,
    idempotencyKey: event.idempotencyKey ?? eventId,
    sequence: event.sequence,
    keyId,
    createdAt: event.createdAt ?? new Date().toISOString(),
    schemaVersion: SUPPORTED_SCHEMA_VERSION,
    metadata: { attributes: {}, ...event.metadata } as Metadata
  })
}

/**
 * A producer of signed `controlplane/v1` envelopes (docs/quickstart.md, "Integrating a producer"): builds the
 * envelope, canonicalizes (RFC 8785) and signs it (Ed25519) with the tenant's key, sends it with the device
 * credential, and
 *
 * - treats `201 accepted` and `200 duplicate` alike as success (a resend after a lost answer is a duplicate);
 * - waits and sends the same envelope again after 429 and 503 and when the connection fails: at least as long
 *   as `Retry-After` (or the body's `retryAfter`) says, at least the capped, jittered exponential backoff,
 *   never longer than the cap; `ProducerGaveUp` after `maxAttempts`;
 * - surfaces every other refusal as the server's typed error with its stable `reason` (`EnvelopeForbidden`,
 *   `EnvelopeConflict`, `EnvelopeUnprocessable`, `Unauthenticated`, …), without retrying it.
 */
export const makeProducer = (options: ProducerOptions) =>
  Effect.gen(function* () {
    const client = yield* makeClient(options)
    const maxAttempts = options.retry?.maxAttempts ?? 8
    const backoff = Backoff.make({ base: options.retry?.base ?? "200 millis", cap: options.retry?.cap ?? "30 seconds", jitter: 0.5 })
    const capMillis = Duration.toMillis(backoff.cap)

    const waitBefore = (attempt: number, error: unknown) =>
      Effect.gen(function* () {
        const header = yield* FiberRef.get(lastRetryAfter)
        const told = Option.orElse(
          Option.flatMap(yield* Backoff.retryAfterWithin(Option.getOrNull(header), { min: 0, max: backoff.cap }), (d) => Option.some(Duration.toMillis(d))),
          () => bodyRetryAfter(error)
        )
        const own = Duration.toMillis(yield* Backoff.delayFor(backoff, attempt))
        return Duration.millis(Math.min(capMillis, Math.max(own, Option.getOrElse(told, () => 0))))
      })

    /** Signs without sending: the envelope exactly as `send` would send it. */
    const sign = (event: EventToSend) =>
      Effect.map(envelopeOf(event, options.key.keyId), (unsigned) => signEnvelope(unsigned, options.key.privateKey))

    const sendSigned = (envelope: Envelope) =>
      Effect.gen(function* () {
        for (let attempt = 1; ; attempt++) {
          yield* FiberRef.set(lastRetryAfter, Option.none())
          const answer = yield* Effect.either(client.controlplane.ingest({ payload: envelope }))
          if (answer._tag === "Right") {
            const ack = answer.right
            return {
              outcome: ack.outcome,
              eventIdentity: ack.eventIdentity,
              sequence: ack.sequence,
              cursor: ack.cursor,
              correlationId: ack.correlationId,
              attempts: attempt,
              envelope
            } satisfies Sent
          }
          const tag = tagOf(answer.left)
          if (!RETRIED.has(tag)) return yield* Effect.fail(answer.left)
          if (attempt >= maxAttempts) return yield* new ProducerGaveUp({ attempts: attempt, last: tag })
          yield* Effect.sleep(yield* waitBefore(attempt, answer.left))
        }
      })

    const send = (event: EventToSend) => Effect.flatMap(sign(event), sendSigned)

    return { sign, send, sendSigned } as const
  })

export type Producer = Effect.Effect.Success<ReturnType<typeof makeProducer>>
