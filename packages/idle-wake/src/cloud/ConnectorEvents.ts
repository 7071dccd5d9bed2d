import { Backoff, CORRELATION_SPAN_ATTRIBUTE, makeCorrelationId, recordOutcome, timeProviderCall, workerLayer } from "@delivery/core"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Deferred, Duration, Effect, Either, Option, Queue, Redacted, Schema } from "effect"
import { CONNECTOR_EVENT_TYPE, ConnectorEventReceipt } from "../ConnectorEventProtocol.ts"
import type { StackId } from "../Domain.ts"
import { signObject } from "../Protocol.ts"
import { CloudSettingsTag } from "./CloudConfig.ts"
import { CloudCursorInvalid } from "./CloudDomain.ts"
import { connectorEventsQueueView } from "./CloudQueueViews.ts"
import { CloudStacksRepo, type StackRow } from "./CloudStacksRepo.ts"
import { ConnectorEventsRepo, type EventRow, type EventSummaryRow, type NewEvent } from "./ConnectorEventsRepo.ts"
import { isForwardable } from "./Routing.ts"
import { Wakes } from "./Wakes.ts"

// github-broker-events-v1, the cloud's durable connector event queue (spec 001): "the existing queue target survives
// a lost wake hint, failed wake, process restart and lease expiry. A 202 hint does not settle delivery. Only the
// current event lease acknowledgment does." An event is committed before the broker's 202. The worker claims due
// events with a lease; for an awake stack it delivers the event signed by the cloud control signer and settles it
// only on the tenant's receipt, fenced by the claimed attempt; for a sleeping stack whose receipt binds the event's
// connector instance it asks for the one coalesced wake and looks again shortly; anything else waits with backoff.
// Nothing in memory is needed for recovery: a killed cloud's events are claimed again once their lease ends.

/** Events one tick claims, and how many it delivers at once. */
const CLAIM = 16
const CONCURRENCY = 4
/** How soon an event for a stack that is waking (or being stopped) is looked at again. */
const WAITING_FOR_STACK = Duration.seconds(1)
/** How long a delivery waits for a wake's immediate refusal before it assumes the wake is under way. */
const REFUSAL_WINDOW = Duration.millis(100)
const decodeReceipt = Schema.decodeUnknownEither(ConnectorEventReceipt)

export type Accepted = { readonly outcome: "queued" | "duplicate"; readonly eventId: string }

export type ConnectorEventState = EventSummaryRow["state"]

/** An event in the queue as operators see it: state, attempts, codes and times; never its payload or signature. */
export interface ConnectorEventView {
  readonly id: string
  readonly stack: string
  readonly connectorInstance: string
  readonly endpoint: string
  readonly deliveryId: string
  readonly event: string
  readonly state: ConnectorEventState
  /** Claims so far (each takes a lease), and the failed deliveries among them (the backoff's exponent). */
  readonly attempt: number
  readonly failures: number
  readonly lastCode: string | null
  /** A pending event's next claim; settled events are never claimed again. */
  readonly availableAt: Date
  readonly leaseExpiresAt: Date | null
  readonly receivedAt: Date
  readonly settledAt: Date | null
}

export interface ConnectorEventPage {
  readonly items: ReadonlyArray<ConnectorEventView>
  readonly nextCursor: string | null
}

const viewOf = (row: EventSummaryRow): ConnectorEventView => ({
  id: row.id,
  stack: row.stack_id,
  connectorInstance: row.connector_instance,
  endpoint: row.endpoint_id,
  deliveryId: row.delivery_id,
  event: row.event,
  state: row.state,
  attempt: row.attempt,
  failures: row.failures,
  lastCode: row.last_code,
  availableAt: row.available_at,
  leaseExpiresAt: row.lease_expires_at,
  receivedAt: row.received_at,
  settledAt: row.settled_at
})

const PAGE_LIMIT = 100
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

// Cursor: base64url of "<received_at to the microsecond>|<id>", the last row's keyset position.
const encodeCursor = (row: EventSummaryRow) => Buffer.from(`${row.position}|${row.id}`, "utf8").toString("base64url")
const CURSOR = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)\|([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/
const decodeCursor = (cursor: string) => {
  const match = cursor.length <= 128 ? CURSOR.exec(Buffer.from(cursor, "base64url").toString("utf8")) : null
  return match === null || Number.isNaN(Date.parse(match[1]!))
    ? Effect.fail(new CloudCursorInvalid({ reason: "cursor-invalid" }))
    : Effect.succeed({ position: match[1]!, id: match[2]! })
}

type Outcome =
  | { readonly _tag: "Delivered"; readonly code: string }
  | { readonly _tag: "Dead"; readonly code: string }
  | { readonly _tag: "Retry"; readonly code: string; readonly after?: Duration.Duration }

export class ConnectorEvents extends Effect.Service<ConnectorEvents>()("@delivery/idle-wake/ConnectorEvents", {
  scoped: Effect.gen(function* () {
    const settings = yield* CloudSettingsTag
    const repo = yield* ConnectorEventsRepo
    const queueView = yield* connectorEventsQueueView
    const stacks = yield* CloudStacksRepo
    const wakes = yield* Wakes
    const client = (yield* HttpClient.HttpClient).pipe(HttpClient.withTracerPropagation(false))
    const nudge = yield* Queue.sliding<void>(1)
    const backoff = Backoff.make({ base: settings.events.retryBase, cap: settings.events.retryCap, jitter: 0.2 })

    /**
     * The broker's event, committed before the answer; a repeat of its GitHub delivery id is the same event. The
     * worker is nudged at once (the wake hint); if this process dies first, the committed event is found anyway.
     */
    const accept = Effect.fn("ConnectorEvents.accept")(function* (event: NewEvent) {
      const first = yield* repo.accept(event)
      // A concurrent copy committed between this statement's snapshot and its insert: a second look finds it.
      const row = first ?? (yield* repo.accept(event))
      if (row === undefined) return Option.none<Accepted>()
      yield* Queue.offer(nudge, undefined)
      return Option.some<Accepted>({ outcome: row.queued ? "queued" : "duplicate", eventId: row.id })
    })

    /** One delivery to an awake stack: the tenant's receipt, a refusal to settle as dead, or a retry. */
    const post = (event: EventRow, stack: StackRow, upstream: string) =>
      Effect.gen(function* () {
        const signed = signObject(
          {
            type: CONNECTOR_EVENT_TYPE,
            version: 1,
            stack: stack.id,
            audience: stack.audience,
            eventId: event.id,
            deliveryId: event.delivery_id,
            connectorInstance: event.connector_instance,
            endpoint: event.endpoint_id,
            event: event.event,
            payload: Buffer.from(event.payload).toString("base64url"),
            githubSignature: event.github_signature,
            attempt: event.attempt,
            keyId: settings.signingKeyId
          },
          Redacted.value(settings.signingKey)
        )
        const answer = yield* client.execute(
          HttpClientRequest.post(`${upstream}/idle-wake/v1/connector-events`).pipe(HttpClientRequest.bodyUnsafeJson(signed))
        ).pipe(
          Effect.flatMap((response) => Effect.map(response.text, (text) => ({ status: response.status, text, retryAfter: response.headers["retry-after"] }))),
          Effect.scoped,
          Effect.timeout(settings.drainTimeout),
          Effect.either,
          timeProviderCall("cloud-connector-events")
        )
        if (Either.isLeft(answer)) return { _tag: "Retry", code: "tenant-unreachable" } satisfies Outcome
        const { status, text, retryAfter } = answer.right
        const body = Either.try(() => JSON.parse(text) as { readonly reason?: unknown })
        const reason = Either.isRight(body) && typeof body.right?.reason === "string" ? body.right.reason : `status-${status}`
        if (status === 200) {
          const receipt = Either.flatMap(Either.mapLeft(body, () => undefined), (json) => Either.mapLeft(decodeReceipt(json), () => undefined))
          return Either.isRight(receipt) && receipt.right.eventId === event.id
            ? { _tag: "Delivered", code: receipt.right.outcome } satisfies Outcome
            : { _tag: "Retry", code: "receipt-invalid" } satisfies Outcome
        }
        // The tenant will never record it: a bad payload signature or an endpoint that is no longer authorized.
        if (status === 422) return { _tag: "Dead", code: reason } satisfies Outcome
        const seconds = Number(retryAfter)
        return {
          _tag: "Retry",
          code: reason,
          ...(status === 503 && Number.isInteger(seconds) && seconds > 0 ? { after: Duration.seconds(Math.min(seconds, 300)) } : {})
        } satisfies Outcome
      })

    /** What to do with one claimed event, from its stack's state now. */
    const decide = (event: EventRow, correlationId: string) =>
      Effect.gen(function* () {
        const found = yield* stacks.get(event.stack_id)
        if (Option.isNone(found) || found.value.state === "archived") return { _tag: "Dead", code: "stack-archived" } satisfies Outcome
        const stack = found.value
        if (isForwardable(stack)) return yield* post(event, stack, stack.upstream)
        if (stack.state === "suspended") return { _tag: "Retry", code: "stack-suspended" } satisfies Outcome
        if (stack.recovery_hold) return { _tag: "Retry", code: "recovery-hold" } satisfies Outcome
        const proof = stack.receipt?.profiles["github-broker-events-v1"]
        if (stack.receipt === null || proof === undefined || proof.connectorInstance !== event.connector_instance) {
          // Not a wake this event may cause: it waits, durable, until the stack is awake for another reason.
          return { _tag: "Retry", code: "wake-not-permitted" } satisfies Outcome
        }
        // The broker is one requester per stack: its wakes count against that stack's source budget, not everyone's.
        const ticket = yield* wakes.wake(
          stack.id as StackId,
          { challenge: stack.receipt.challenge, fingerprint: null, connectorInstance: event.connector_instance },
          `connector-events:${stack.id}`,
          correlationId
        )
        // A refusal (a budget, a slot) is decided at once: the event then waits as long as the refusal says.
        const early = yield* Effect.timeoutOption(Deferred.await(ticket), REFUSAL_WINDOW)
        if (Option.isSome(early) && early.value._tag === "Refused") {
          return { _tag: "Retry", code: early.value.refusal.reason, after: Duration.seconds(early.value.refusal.retryAfter) } satisfies Outcome
        }
        return { _tag: "Retry", code: "waking", after: WAITING_FOR_STACK } satisfies Outcome
      })

    const deliver = (event: EventRow) => {
      const correlationId = makeCorrelationId()
      return Effect.gen(function* () {
        const outcome = yield* decide(event, correlationId)
        const recorded = outcome._tag === "Retry"
          ? yield* Effect.flatMap(
            // Backoff counts failed deliveries, not claims: waiting for a wake does not push later retries to the cap.
            outcome.after === undefined ? Backoff.delayFor(backoff, event.failures + 1) : Effect.succeed(outcome.after),
            (delay) => repo.release(event.id, event.attempt, Duration.toMillis(delay), outcome.code, outcome.code !== "waking" && !outcome.code.endsWith("-budget") && outcome.code !== "preparations-full")
          )
          : yield* repo.settle(event.id, event.attempt, outcome._tag === "Delivered" ? "delivered" : "dead", outcome.code)
        yield* Effect.logInfo(recorded ? "connector event attempt recorded" : "connector event lease lost: nothing recorded").pipe(
          Effect.annotateLogs({ event: event.id, stack: event.stack_id, attempt: event.attempt, outcome: outcome._tag, code: outcome.code, correlationId })
        )
        if (recorded) {
          const counted = outcome._tag === "Delivered" ? "delivered" : outcome._tag === "Dead" ? "dead" : "retry"
          yield* recordOutcome("cloud-connector-events", counted)
          yield* Effect.annotateCurrentSpan("delivery.outcome", counted)
        }
      }).pipe(
        // The wake this delivery may ask for is logged under the same id: the span can be found from the log.
        Effect.withSpan("ConnectorEvents.deliver", {
          attributes: { "delivery.family": "cloud-connector-events", [CORRELATION_SPAN_ATTRIBUTE]: correlationId }
        })
      )
    }

    /** One bounded tick: claim, deliver, then wait for the poll interval or a nudge when there was nothing to do. */
    const tick = Effect.gen(function* () {
      const claimed = yield* repo.claim(CLAIM, Duration.toMillis(settings.events.lease)).pipe(Effect.withSpan("ConnectorEvents.claim"))
      yield* Effect.forEach(claimed, deliver, { concurrency: CONCURRENCY, discard: true })
      if (claimed.length < CLAIM) yield* Effect.timeoutOption(Queue.take(nudge), settings.events.pollInterval)
    }).pipe(
      Effect.catchAll((error) =>
        Effect.zipRight(Effect.logWarning("connector event tick failed", { reason: error._tag }), Effect.sleep(settings.events.pollInterval)))
    )

    const summary = repo.summary

    /** One page of a stack's events, optionally in one state, oldest first by keyset; sizes are clamped to 1..100. */
    const events = Effect.fn("ConnectorEvents.events")(function* (stack: StackId, options: {
      readonly state?: ConnectorEventState | undefined
      readonly cursor?: string | undefined
      readonly limit?: number | undefined
    }) {
      const size = Math.min(Math.max(Math.floor(options.limit ?? PAGE_LIMIT), 1), PAGE_LIMIT)
      const after = options.cursor === undefined ? null : yield* decodeCursor(options.cursor)
      const rows = yield* repo.page({ stack, state: options.state ?? null, after, limit: size + 1 })
      const items = rows.slice(0, size)
      return {
        items: items.map(viewOf),
        nextCursor: rows.length > size ? encodeCursor(items[items.length - 1]!) : null
      } satisfies ConnectorEventPage
    })

    /** One event of the stack, or none (an id that is not a UUID names none). */
    const event = Effect.fn("ConnectorEvents.event")(function* (stack: StackId, id: string) {
      if (!UUID.test(id)) return Option.none<ConnectorEventView>()
      return Option.map(yield* repo.one(stack, id), viewOf)
    })

    return { accept, tick, summary, events, event, queueView } as const
  }),
  dependencies: [ConnectorEventsRepo.Default, FetchHttpClient.layer]
}) {}

/** The delivery worker of the cloud role (registered, so `/ready` shows it). */
export const connectorEventWorker = workerLayer(
  "connector-event-delivery",
  Effect.flatMap(ConnectorEvents, (events) => Effect.forever(events.tick))
)
