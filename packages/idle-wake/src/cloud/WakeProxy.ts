import { CORRELATION_HEADER, makeCorrelationId } from "@delivery/core"
import { presentedKeyMaterial } from "@delivery/identity"
import { Clock, Deferred, Duration, Effect, Option, Runtime, Schema, type Scope } from "effect"
import { pollUntil } from "./Poll.ts"
import type { StackId } from "../Domain.ts"
import { presentedFingerprint } from "../Fingerprint.ts"
import type { Bytes32, IncomingProof } from "../Protocol.ts"
import { Admission } from "./Admission.ts"
import { CloudSettingsTag } from "./CloudConfig.ts"
import { REFUSAL_STATUS, type WakeRefusalReason, WakeRefused } from "./CloudDomain.ts"
import { CloudStacksRepo, type StackRow } from "./CloudStacksRepo.ts"
import { bearerOf, endToEnd, hostOf, isWakeable, sourceOf, targetOf } from "./ProxyRequest.ts"
import { isForwardable, Routing } from "./Routing.ts"
import { type WakeMatch, Wakes } from "./Wakes.ts"

// The wake proxy (spec 001, tenant-api-http-v2). An awake stack's request is forwarded at once: host → route from
// this process's routing table, then one upstream fetch with both bodies streamed and keep-alive upstream (no Effect
// runtime, no query: the added latency is a map lookup and the fetch). Every other request takes the admission path,
// decided on a fresh database read: a route that may wake, a stack that may be woken, the source's request budget,
// the presented key matched against the stored receipt (so unknown keys never consume provider-start quota), a
// bounded waiting slot, the one coalesced wake, then the original request forwarded exactly once. Nothing is ever
// replayed: an upstream failure after the request was sent is answered 502 `upstream-ambiguous`.
//
// Raw `fetch` rather than HttpClient on purpose: the proxy hands Bun's request body stream and the upstream's
// response stream through untouched, which is both the streaming guarantee and the latency budget.

const encodeRefusal = Schema.encodeSync(WakeRefused)

/** Retry-After of refusals that are not a budget window: the cause is a state an operator or time ends. */
const STATE_RETRY_AFTER: Partial<Record<WakeRefusalReason, number>> = {
  "route-not-wakeable": 60,
  "stack-suspended": 300,
  "recovery-hold": 60,
  "wake-timeout": 5,
  "wake-failed": 10,
  "upstream-unavailable": 1,
  "storage-unavailable": 1
}

const STOPPING_POLL = Duration.millis(200)

/** A refusal on the admission path; `retryAfter` when a budget window says how long. */
interface Refusal {
  readonly reason: WakeRefusalReason
  readonly retryAfter?: number
}

const fail = (reason: WakeRefusalReason): Effect.Effect<never, Refusal> => Effect.fail({ reason })
const storageFailed = (): Refusal => ({ reason: "storage-unavailable" })

type Forwarded = { readonly _tag: "Answered"; readonly response: Response } | { readonly _tag: "Refused" }

const isRefused = (error: unknown) => (error as { code?: unknown } | null)?.code === "ECONNREFUSED"

/** The receipt's key for a presented token, unexpired now; none for anything that is not one of its keys. */
export const matchKey = (receipt: IncomingProof, token: string | undefined, now: number): Option.Option<string> => {
  const keys = receipt.profiles["tenant-api-http-v2"]?.keys
  if (keys === undefined || token === undefined) return Option.none()
  return Option.flatMap(presentedKeyMaterial(token), (material) => {
    const fingerprint = presentedFingerprint(receipt.challenge as Bytes32, material)
    const key = keys.find((candidate) => candidate.fingerprint === fingerprint)
    if (key === undefined || key.kind !== material.kind) return Option.none()
    if (key.expiresAt !== null && Date.parse(key.expiresAt) <= now) return Option.none()
    return Option.some(fingerprint)
  })
}

export class WakeProxy extends Effect.Service<WakeProxy>()("@delivery/idle-wake/WakeProxy", {
  effect: Effect.gen(function* () {
    const settings = yield* CloudSettingsTag
    const routing = yield* Routing
    const repo = yield* CloudStacksRepo
    const admission = yield* Admission
    const wakes = yield* Wakes
    const runtime = yield* Effect.runtime<never>()
    const runPromise = Runtime.runPromise(runtime)
    const runSync = Runtime.runSync(runtime)

    const refusal = (reason: WakeRefusalReason, correlationId: string, retryAfter?: number): Response => {
      const wait = retryAfter ?? STATE_RETRY_AFTER[reason]
      const headers: Record<string, string> = { "content-type": "application/json", [CORRELATION_HEADER]: correlationId }
      if (wait !== undefined) headers["retry-after"] = String(wait)
      const body = encodeRefusal(new WakeRefused({ reason, correlationId: correlationId as never, ...(wait === undefined ? {} : { retryAfter: wait }) }))
      return new Response(JSON.stringify(body), { status: REFUSAL_STATUS[reason], headers })
    }

    /** One upstream exchange. `Refused`: the connection was refused, so nothing of the request was sent. */
    const forward = async (request: Request, upstream: string, source: string): Promise<Forwarded> => {
      const headers = endToEnd(request.headers)
      headers.set("x-forwarded-for", source)
      headers.set("x-forwarded-host", request.headers.get("host") ?? "")
      try {
        const answer = await fetch(`${upstream}${targetOf(request.url)}`, {
          method: request.method,
          headers,
          body: request.body,
          redirect: "manual",
          decompress: false,
          duplex: "half"
        } as RequestInit)
        return { _tag: "Answered", response: new Response(answer.body, { status: answer.status, statusText: answer.statusText, headers: endToEnd(answer.headers) }) }
      } catch (error) {
        if (isRefused(error)) return { _tag: "Refused" }
        throw error
      }
    }

    /** Forward once; a refused connection or a failure after sending are refusals, never retried. */
    const forwardOnce = (request: Request, upstream: string, source: string) =>
      Effect.flatMap(
        Effect.promise(() => forward(request, upstream, source).then((forwarded) => forwarded, () => "ambiguous" as const)),
        (forwarded): Effect.Effect<Response, Refusal> =>
          forwarded === "ambiguous"
            ? Effect.fail({ reason: "upstream-ambiguous" })
            : forwarded._tag === "Answered"
            ? Effect.succeed(forwarded.response)
            : Effect.fail({ reason: "upstream-unavailable" })
      )

    /** Reads the stack until `done` says what to do, every STOPPING_POLL, until the deadline. */
    const watch = <A>(stack: string, deadline: number, done: (row: StackRow) => A | undefined) =>
      pollUntil(Effect.map(repo.get(stack), (row) => (Option.isNone(row) ? ({ gone: true } as const) : done(row.value))), STOPPING_POLL).pipe(
        Effect.timeoutOption(Duration.millis(Math.max(0, deadline - Date.now())))
      )

    /**
     * Held until the stack can take the request, within the admission slot and the readiness deadline: a stopping
     * stack is waited out, an asleep one woken (or the wake in flight joined), then the request is forwarded once.
     */
    const holdAndForward = (
      request: Request,
      stack: StackId,
      source: string,
      correlationId: string,
      deadline: number
    ): Effect.Effect<Response, Refusal, Scope.Scope> =>
      Effect.gen(function* () {
        yield* admission.hold(stack, source)
        while (true) {
          const current = yield* Effect.mapError(repo.get(stack), storageFailed)
          if (Option.isNone(current)) return yield* fail("host-unknown")
          const row = current.value
          if (isForwardable(row)) return yield* forwardOnce(request, row.upstream, source)
          if (row.state === "suspended") return yield* fail("stack-suspended")
          if (row.state === "archived") return yield* fail("stack-archived")
          if (row.recovery_hold) return yield* fail("recovery-hold")
          const stopping = row.state === "stopping" && row.op_lease_expires_at !== null && row.op_lease_expires_at.getTime() > Date.now()
          if (stopping) {
            const changed = yield* Effect.mapError(watch(stack, deadline, (next) => (next.state === "stopping" ? undefined : true)), storageFailed)
            if (Option.isNone(changed)) return yield* fail("wake-timeout")
            continue
          }
          if (row.receipt === null) return yield* fail("wake-failed")
          const now = yield* Clock.currentTimeMillis
          const key = matchKey(row.receipt, bearerOf(request), now)
          if (Option.isNone(key)) return yield* fail("wake-key-unknown")
          const match: WakeMatch = { challenge: row.receipt.challenge, fingerprint: key.value, connectorInstance: null }
          const ticket = yield* wakes.wake(stack, match, source, correlationId)
          const result = yield* Deferred.await(ticket).pipe(Effect.timeoutOption(Duration.millis(Math.max(0, deadline - Date.now()))))
          if (Option.isNone(result)) return yield* fail("wake-timeout")
          const outcome = result.value
          switch (outcome._tag) {
            case "Awake":
              return yield* forwardOnce(request, outcome.upstream, source)
            case "Refused":
              return yield* Effect.fail(outcome.refusal)
            case "NoMatch":
              return yield* fail("wake-key-unknown")
            case "Failed":
              return yield* fail(outcome.code === "wake-timeout" || outcome.code === "readiness-timeout" ? "wake-timeout" : "wake-failed")
          }
        }
      })

    /** Everything that is not a cached awake stack: decided on fresh reads, bounded, every refusal counted. */
    const admit = (request: Request, host: string, source: string) => {
      const correlationId = makeCorrelationId()
      return Effect.gen(function* () {
        const route = yield* Effect.mapError(routing.fresh(host), storageFailed)
        if (Option.isNone(route)) return yield* fail("host-unknown")
        const current = route.value
        if (isForwardable(current)) return yield* forwardOnce(request, current.upstream, source)
        if (current.state === "archived") return yield* fail("stack-archived")
        if (current.state === "suspended") return yield* fail("stack-suspended")
        if (!isWakeable(request)) return yield* fail("route-not-wakeable")
        yield* admission.requestBudget(source)
        const deadline = Date.now() + Duration.toMillis(admission.readinessWait)
        return yield* Effect.scoped(holdAndForward(request, current.stack as StackId, source, correlationId, deadline))
      }).pipe(
        Effect.catchAll((refused) =>
          Effect.as(admission.refused(refused.reason), refusal(refused.reason, correlationId, refused.retryAfter)))
      )
    }

    /** A refusal of the fast path, counted like the admission path's. */
    const counted = (reason: WakeRefusalReason) => {
      runSync(admission.refused(reason))
      return refusal(reason, makeCorrelationId())
    }

    /**
     * Bun's `fetch` handler of the proxy listener. The awake fast path stays outside the Effect runtime; a refused
     * connection there (the table was behind a stop) falls back to the admission path when the body is untouched.
     */
    const handle = (request: Request, peer: string | undefined): Promise<Response> | Response => {
      const source = sourceOf(request, peer, settings.trustedProxyHops)
      const host = hostOf(request)
      if (host === undefined) return runPromise(admit(request, "", source))
      const route = routing.lookup(host)
      if (route !== undefined && isForwardable(route)) {
        return forward(request, route.upstream, source).then(
          (forwarded) =>
            forwarded._tag === "Answered"
              ? forwarded.response
              : request.bodyUsed
              ? counted("upstream-unavailable")
              : runPromise(admit(request, host, source)),
          () => counted("upstream-ambiguous")
        )
      }
      return runPromise(admit(request, host, source))
    }

    return { handle } as const
  })
}) {}

