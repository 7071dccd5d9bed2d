import { decodeBase64Url, publicKeyFromRaw } from "@delivery/signer"
import { FetchHttpClient, HttpClient, HttpClientRequest, type HttpClientResponse } from "@effect/platform"
import { Clock, Data, Duration, Effect, Either, Option, Redacted, Schema, Stream } from "effect"
import { randomBytes } from "node:crypto"
import type { StackId } from "../Domain.ts"
import {
  ASSERTION_TYPE,
  type Bytes32,
  DRAIN_READ_ACTION,
  DrainReport,
  type IncomingWakeCapability,
  type Phase,
  signObject,
  verifyObject
} from "../Protocol.ts"
import { CloudSettingsTag } from "./CloudConfig.ts"

// The cloud's half of a drain read (spec 001): a drain assertion signed by the cloud control signer, POSTed to the
// tenant, and the tenant's report verified with the stack's report key before anything in it is believed.

/** A drain read that gave no verified report: the sleep cycle is aborted with this code. */
export class DrainReadFailed extends Data.TaggedError("DrainReadFailed")<{
  readonly code:
    | "drain-unreachable"
    | "drain-refused"
    | "report-invalid"
    | "report-key-unknown"
    | "report-signature-invalid"
    | "report-mismatch"
  readonly status?: number
}> {}

export interface DrainTarget {
  readonly stack: StackId
  readonly audience: string
  readonly upstream: string
  readonly reportKeyId: string
  readonly reportPublicKey: string
}

export interface DrainCycle {
  readonly idleHold: Bytes32
  readonly phase: Phase
  readonly holdSeconds: number
}

const decodeReport = Schema.decodeUnknownEither(DrainReport)

/** The largest report a tenant sends: 1,000 projected keys and 100 ids per blocker fit well below it. */
const MAX_REPORT_BYTES = 4 * 1024 * 1024

/** The body as text, read no further than MAX_REPORT_BYTES (undefined past it): a report is bounded before parsing. */
const readBounded = (response: HttpClientResponse.HttpClientResponse) =>
  Effect.gen(function* () {
    const chunks: Array<Uint8Array> = []
    let total = 0
    yield* Stream.runForEachWhile(response.stream, (chunk) =>
      Effect.sync(() => {
        total += chunk.byteLength
        if (total > MAX_REPORT_BYTES) return false
        chunks.push(chunk)
        return true
      }))
    return total > MAX_REPORT_BYTES ? undefined : Buffer.concat(chunks).toString("utf8")
  })

export class DrainClient extends Effect.Service<DrainClient>()("@delivery/idle-wake/DrainClient", {
  effect: Effect.gen(function* () {
    const settings = yield* CloudSettingsTag
    const client = (yield* HttpClient.HttpClient).pipe(HttpClient.filterStatusOk, HttpClient.withTracerPropagation(false))

    const assertion = (target: DrainTarget, cycle: DrainCycle, capability: Option.Option<IncomingWakeCapability>, now: number) =>
      signObject(
        {
          type: ASSERTION_TYPE,
          version: 2,
          action: DRAIN_READ_ACTION,
          stack: target.stack,
          audience: target.audience,
          requestId: randomBytes(24).toString("base64url"),
          issuedAt: new Date(now).toISOString(),
          expiresAt: new Date(now + Duration.toMillis(settings.assertionLifetime)).toISOString(),
          keyId: settings.signingKeyId,
          cycle: { idleHold: cycle.idleHold, phase: cycle.phase, holdSeconds: cycle.holdSeconds },
          ...(Option.isSome(capability) ? { idleCapabilities: { incomingWake: capability.value } } : {})
        },
        Redacted.value(settings.signingKey)
      )

    /**
     * One drain read: the signed report, verified with the stack's report key and checked to answer this very
     * assertion (stack, request id, phase). A read that does not end in such a report fails with its code.
     */
    const read = Effect.fn("DrainClient.read")(function* (
      target: DrainTarget,
      cycle: DrainCycle,
      capability: Option.Option<IncomingWakeCapability>
    ) {
      const now = yield* Clock.currentTimeMillis
      const signed = assertion(target, cycle, capability, now)
      const request = HttpClientRequest.post(`${target.upstream}/idle-wake/v1/drain-reads`).pipe(
        HttpClientRequest.bodyUnsafeJson(signed)
      )
      const text = yield* client.execute(request).pipe(
        Effect.flatMap(readBounded),
        Effect.scoped,
        Effect.timeout(settings.drainTimeout),
        Effect.catchAll((error) =>
          Effect.fail(
            error._tag === "ResponseError" && error.reason === "StatusCode"
              ? new DrainReadFailed({ code: "drain-refused", status: error.response.status })
              : new DrainReadFailed({ code: "drain-unreachable" })
          ))
      )
      if (text === undefined) return yield* new DrainReadFailed({ code: "report-invalid" })
      const parsed = Either.try(() => JSON.parse(text) as unknown)
      if (Either.isLeft(parsed)) return yield* new DrainReadFailed({ code: "report-invalid" })
      const report = decodeReport(parsed.right)
      if (Either.isLeft(report)) return yield* new DrainReadFailed({ code: "report-invalid" })
      if (report.right.keyId !== target.reportKeyId) return yield* new DrainReadFailed({ code: "report-key-unknown" })
      const raw = decodeBase64Url(target.reportPublicKey, 32)
      if (Either.isLeft(raw)) return yield* new DrainReadFailed({ code: "report-key-unknown" })
      // Over the report as received, never over a re-encoding of it.
      if (!verifyObject(parsed.right as { signature: string }, publicKeyFromRaw(raw.right))) {
        return yield* new DrainReadFailed({ code: "report-signature-invalid" })
      }
      const answer = report.right
      if (answer.stack !== target.stack || answer.requestId !== signed.requestId || answer.phase !== cycle.phase) {
        return yield* new DrainReadFailed({ code: "report-mismatch" })
      }
      return answer
    })

    return { read } as const
  }),
  dependencies: [FetchHttpClient.layer]
}) {}
