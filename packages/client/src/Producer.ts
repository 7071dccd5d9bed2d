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
import { type AnswerHead, type ClientOptions, lastAnswer, makeClient } from "./Client.ts"

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
 * The backend stayed unavailable (429, 502, 503, 504 or no connection) for every attempt. The envelope may
 * still have been committed by one of them: sending the same envelope again is always safe (a duplicate is
 * success).
 */
export class ProducerGaveUp extends Schema.TaggedError<ProducerGaveUp>()("ProducerGaveUp", {
  attempts: Schema.Number,
  /** The `_tag` of the last answer's error or of the transport failure. */
  last: Schema.String,
  /** The last answer's status; absent when the last attempt got no answer. */
  status: Schema.optional(Schema.Number)
}) {}

/**
 * Answers that mean "not now", whatever their body: the backend's own 429 (sync limiter, peer limit) and 503
 * (storage unavailable, shutting down), and the 502, 503 or 504 page of a gateway in front of it while the
 * backend restarts. A 500 is a defect, surfaced with its correlation id rather than sent again.
 */
const RETRIED_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504])

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
 * - waits and sends the same envelope again after 429, 502, 503 and 504 (whatever the body) and when the
 *   connection fails: at least as long
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

    /** `bodySays`: the rate-limit refusals' own `retryAfter` (milliseconds), read when the header is absent or unusable. */
    const waitBefore = (attempt: number, answer: Option.Option<AnswerHead>, bodySays: Option.Option<number>) =>
      Effect.gen(function* () {
        const header = Option.getOrNull(Option.flatMap(answer, (head) => head.retryAfter))
        const told = Option.orElse(
          Option.map(yield* Backoff.retryAfterWithin(header, { min: 0, max: backoff.cap }), Duration.toMillis),
          () => bodySays
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
          yield* FiberRef.set(lastAnswer, Option.none())
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
          const failure = answer.left
          const head = yield* FiberRef.get(lastAnswer)
          // Without any answer only a transport failure is "not now": a request that could not even be built
          // (a payload the schema cannot encode) was never sent, and sending it again cannot help.
          const notNow = Option.match(head, {
            onNone: () => failure._tag === "RequestError",
            onSome: ({ status }) => RETRIED_STATUSES.has(status)
          })
          if (!notNow) return yield* Effect.fail(failure)
          if (attempt >= maxAttempts) {
            const gaveUp = { attempts: attempt, last: failure._tag }
            return yield* new ProducerGaveUp(Option.isSome(head) ? { ...gaveUp, status: head.value.status } : gaveUp)
          }
          yield* Effect.sleep(yield* waitBefore(attempt, head, "retryAfter" in failure ? Option.some(failure.retryAfter) : Option.none()))
        }
      })

    const send = (event: EventToSend) => Effect.flatMap(sign(event), sendSigned)

    return { sign, send, sendSigned } as const
  })

export type Producer = Effect.Effect.Success<ReturnType<typeof makeProducer>>
