import { HttpApi, HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { CurrentIdentity, deliveryApiId, Permission, requirePermission, withHeader } from "@delivery/identity"
import { Effect, Option } from "effect"
import { ReceiptsApi, ReceiptsOperatorApi } from "./Api.ts"
import { RECEIPTS_PERMISSION, ReceiptNotFound, ReceiptsUnavailable, UploadRejected } from "./Domain.ts"
import { type Recorder, Receipts } from "./Receipts.ts"
import { ReceiptWork, ReceiptWorkSettings } from "./ReceiptWork.ts"

const ReceiptsOnlyApi = HttpApi.make(deliveryApiId).add(ReceiptsApi).add(ReceiptsOperatorApi)

const permission = Permission.make(RECEIPTS_PERMISSION)
const CONTENT_TYPE = /^[a-z0-9!#$&^_.+-]{1,63}\/[a-z0-9!#$&^_.+-]{1,63}$/

const unavailable = (reason: ReceiptsUnavailable["reason"]) =>
  Effect.flatMap(requestCorrelationId, (correlationId) => Effect.fail(new ReceiptsUnavailable({ reason, correlationId })))

/** The API key and the request: who recorded what, for the audit row. */
const recorder = Effect.gen(function* () {
  yield* requirePermission(permission)
  const identity = yield* CurrentIdentity
  const correlationId = yield* requestCorrelationId
  // requirePermission admits API keys only.
  const actor = identity._tag === "ApiKey" ? `api-key:${identity.keyId}` : `account:${identity.account}`
  return { tenant: identity.tenant, account: identity.account, actor, correlationId } satisfies Recorder
})

export const ReceiptsHttpLive = HttpApiBuilder.group(ReceiptsOnlyApi, "receipts", (handlers) =>
  Effect.gen(function* () {
    const receipts = yield* Receipts
    const work = yield* ReceiptWork
    const settings = yield* ReceiptWorkSettings
    const maxBytes = settings.timing.fileMaxBytes
    return handlers
      .handle("uploadFile", () =>
        Effect.gen(function* () {
          const by = yield* recorder
          const request = yield* HttpServerRequest.HttpServerRequest
          const contentType = (request.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase()
          if (!CONTENT_TYPE.test(contentType)) {
            return yield* new UploadRejected({ reason: "content-type-invalid", maxBytes, correlationId: by.correlationId })
          }
          const declared = request.headers["content-length"]
          const declaredLength = declared !== undefined && /^\d{1,16}$/.test(declared) ? Number(declared) : undefined
          return yield* receipts.stage(request.stream, {
            by,
            contentType,
            maxBytes,
            ...(declaredLength === undefined ? {} : { declaredLength })
          }).pipe(
            Effect.catchTags({
              UploadRefused: (error) => Effect.fail(new UploadRejected({ reason: error.reason, maxBytes, correlationId: by.correlationId })),
              StorageUnconfigured: () => unavailable("receipt-storage-unconfigured"),
              ReceiptStorageError: () => unavailable("file-storage-failed"),
              ReceiptsStorageUnavailable: () => unavailable("storage-unavailable")
            })
          )
        }))
      .handle("record", ({ payload }) =>
        Effect.gen(function* () {
          const by = yield* recorder
          const { replayed, response } = yield* receipts.record(payload, by).pipe(
            Effect.catchTags({
              StorageUnconfigured: () => unavailable("receipt-storage-unconfigured"),
              ReceiptsStorageUnavailable: () => unavailable("storage-unavailable")
            })
          )
          if (replayed) {
            yield* withHeader("idempotent-replayed", "true")
            return response
          }
          // The bounded post-commit path (spec 002): only with receipt provider configuration in this process.
          if (Option.isSome(settings.provider)) yield* work.runInline(response.receipt.id)
          return response
        }))
      .handle("receipt", ({ path }) =>
        Effect.gen(function* () {
          const by = yield* recorder
          const state = yield* receipts.state(by.tenant, path.id).pipe(
            Effect.catchTag("ReceiptsStorageUnavailable", () => unavailable("storage-unavailable"))
          )
          if (Option.isNone(state)) return yield* new ReceiptNotFound({ reason: "receipt-not-found", correlationId: by.correlationId })
          return state.value
        }))
  }))

export const ReceiptsOperatorHttpLive = HttpApiBuilder.group(ReceiptsOnlyApi, "receiptsOperator", (handlers) =>
  Effect.gen(function* () {
    const receipts = yield* Receipts
    return handlers.handle("receiptState", ({ path }) =>
      Effect.gen(function* () {
        const state = yield* receipts.state(path.tenant, path.id).pipe(
          Effect.catchTag("ReceiptsStorageUnavailable", () => unavailable("storage-unavailable"))
        )
        if (Option.isNone(state)) {
          return yield* new ReceiptNotFound({ reason: "receipt-not-found", correlationId: yield* requestCorrelationId })
        }
        return state.value
      }))
  }))
