import { HttpApi, HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { deliveryApiId, PasswordRefused, passwordMaxLength, passwordMinLength } from "@delivery/identity"
import { Clock, Duration, Effect, Layer } from "effect"
import { acceptedAnswer, PasswordResetApi, ResetMailOperatorApi, ResetRefused, ResetUnavailable } from "./Api.ts"
import { ResetLimits, ResetLimitsLive } from "./ResetLimits.ts"
import { ResetRequestConfig } from "./ResetMailConfig.ts"
import { ResetMailRepo } from "./ResetMailRepo.ts"
import { ResetRequests } from "./ResetRequests.ts"

const ResetOnlyApi = HttpApi.make(deliveryApiId).add(PasswordResetApi).add(ResetMailOperatorApi)

const unavailable = (reason: ResetUnavailable["reason"]) =>
  Effect.flatMap(requestCorrelationId, (correlationId) => Effect.fail(new ResetUnavailable({ reason, correlationId })))

const handlers = HttpApiBuilder.group(ResetOnlyApi, "passwordReset", (handlers) =>
  Effect.gen(function* () {
    const requests = yield* ResetRequests
    const limits = yield* ResetLimits
    const { responseFloorMs } = yield* ResetRequestConfig
    return handlers
      .handle("requestReset", ({ payload }) =>
        Effect.gen(function* () {
          const started = yield* Clock.currentTimeMillis
          yield* limits.admitSource(yield* HttpServerRequest.HttpServerRequest)
          yield* limits.admitAddress(payload.tenant, payload.email)
          // The outcome (an account or not) is never logged with the address, and never changes the answer.
          yield* requests.request(payload).pipe(
            Effect.catchTags({
              PasswordResetUnavailable: () => unavailable("password-reset-unavailable"),
              IdentityStorageUnavailable: () => unavailable("storage-unavailable"),
              ResetMailStorageUnavailable: () => unavailable("storage-unavailable")
            })
          )
          // Answer at the same time after arrival whatever the work was: no timing difference between addresses.
          const elapsed = (yield* Clock.currentTimeMillis) - started
          if (elapsed < responseFloorMs) yield* Effect.sleep(Duration.millis(responseFloorMs - elapsed))
          return acceptedAnswer
        }))
      .handle("completeReset", ({ payload }) =>
        Effect.gen(function* () {
          yield* limits.admitSource(yield* HttpServerRequest.HttpServerRequest)
          const correlationId = yield* requestCorrelationId
          const done = yield* requests.complete({ ...payload, correlationId }).pipe(
            Effect.catchTags({
              ResetInvalid: () => Effect.fail(new ResetRefused({ reason: "reset-invalid", correlationId })),
              PasswordRejected: (error) =>
                Effect.fail(
                  new PasswordRefused({
                    reason: error.reason === "too-short" ? "password-too-short" : "password-too-long",
                    minLength: passwordMinLength,
                    maxLength: passwordMaxLength,
                    correlationId
                  })
                ),
              PasswordResetUnavailable: () => unavailable("password-reset-unavailable"),
              IdentityStorageUnavailable: () => unavailable("storage-unavailable")
            })
          )
          yield* Effect.logInfo("password reset completed").pipe(Effect.annotateLogs({ tenant: done.tenant, account: done.account }))
          return { status: "completed" } as const
        }))
  }))

const operatorHandlers = HttpApiBuilder.group(ResetOnlyApi, "resetMailOperator", (handlers) =>
  Effect.gen(function* () {
    const repo = yield* ResetMailRepo
    const storage = <A, R>(effect: Effect.Effect<A, { readonly _tag: "ResetMailStorageUnavailable" }, R>) =>
      Effect.catchTag(effect, "ResetMailStorageUnavailable", () => unavailable("storage-unavailable"))
    return handlers
      .handle("summary", () =>
        storage(repo.summary).pipe(
          Effect.map((rows) => ({ counts: rows.map((row) => ({ ...row, state: row.state as never })) }))
        ))
      .handle("ended", ({ urlParams }) =>
        Effect.gen(function* () {
          const limit = urlParams.limit ?? 100
          // One row ahead: a cursor only when another page follows.
          const fetched = yield* storage(repo.list({
            state: urlParams.state,
            reason: urlParams.reason ?? null,
            tenant: urlParams.tenant ?? null,
            after: urlParams.after ?? null,
            limit: limit + 1
          }))
          const rows = fetched.slice(0, limit)
          return {
            rows: rows.map((row) => ({
              id: row.id,
              tenant: row.tenant_id,
              state: urlParams.state,
              // Ended rows always carry their reason (a CHECK constraint).
              reason: row.reason ?? "",
              attempt: row.attempt,
              providerStatus: row.provider_status,
              createdAt: row.created_at,
              updatedAt: row.updated_at
            })),
            next: fetched.length > limit ? rows[rows.length - 1]!.id : null
          }
        }))
  }))

/** Public reset routes (with their per-process limits) and the operator view. */
export const PasswordResetHttpLive = handlers.pipe(
  Layer.provide(ResetLimitsLive),
  Layer.provide(ResetRequests.Default),
  Layer.provide(ResetMailRepo.Default)
)
export const ResetMailOperatorHttpLive = operatorHandlers.pipe(Layer.provide(ResetMailRepo.Default))
