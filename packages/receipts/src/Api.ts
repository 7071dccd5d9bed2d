import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Authentication, OperatorAuthentication, PermissionDenied, TenantId } from "@delivery/identity"
import { Schema } from "effect"
import {
  AttachmentRefused,
  CommandConflict,
  FileId,
  FileStaged,
  ReceiptNotFound,
  ReceiptRecorded,
  ReceiptsUnavailable,
  ReceiptState,
  RecordReceipt,
  UploadRejected
} from "./Domain.ts"

const ReceiptPath = Schema.Struct({ id: FileId })

/**
 * Receipts for a tenant's API keys with permission `receipts:write`. Behind `Authentication` (401, 429, 503).
 * A receipt records a payment made elsewhere and notifies the payer; nothing here performs a payment.
 */
export class ReceiptsApi extends HttpApiGroup.make("receipts")
  .add(
    HttpApiEndpoint.post("uploadFile", "/api/receipts/files")
      .addSuccess(FileStaged, { status: 201 })
      .addError(UploadRejected, { status: 413 })
      .addError(PermissionDenied, { status: 403 })
      .addError(ReceiptsUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Upload an attachment (the raw bytes as the body, with its Content-Type)")
      .annotate(
        OpenApi.Description,
        "Streamed into the private staging root with its SHA-256 computed on the way and RECEIPT_FILE_MAX_BYTES enforced while it arrives (413 `file-too-large`, `upload-truncated`, `upload-empty`, `content-type-invalid`); never buffered whole, never named by the client. Answers the file id to list in a receipt's `attachments`."
      )
  )
  .add(
    HttpApiEndpoint.post("record", "/api/receipts")
      .setPayload(RecordReceipt)
      .addSuccess(ReceiptRecorded, { status: 201 })
      .addError(CommandConflict, { status: 409 })
      .addError(AttachmentRefused, { status: 422 })
      .addError(PermissionDenied, { status: 403 })
      .addError(ReceiptsUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Record a receipt: business facts, command receipt, audit and effects in one transaction")
      .annotate(
        OpenApi.Description,
        "201 with the receipt and its effects. The same `commandId` with the same content answers the recorded response again (`idempotent-replayed: true`) and writes nothing; with other content 409 `command-id-reused`. Attachments must be this tenant's staged files, each attached once (422)."
      )
  )
  .add(
    HttpApiEndpoint.get("receipt", "/api/receipts/:id")
      .setPath(ReceiptPath)
      .addSuccess(ReceiptState)
      .addError(ReceiptNotFound, { status: 404 })
      .addError(PermissionDenied, { status: 403 })
      .addError(ReceiptsUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "A receipt's effects and their states (no contact details, no bodies)")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Receipts")
{}

/** Any tenant's receipt effects, for operators. Behind `OperatorAuthentication`. */
export class ReceiptsOperatorApi extends HttpApiGroup.make("receiptsOperator")
  .add(
    HttpApiEndpoint.get("receiptState", "/operator/receipts/:tenant/:id")
      .setPath(Schema.Struct({ tenant: TenantId, id: FileId }))
      .addSuccess(ReceiptState)
      .addError(ReceiptNotFound, { status: 404 })
      .addError(ReceiptsUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "A receipt's effects and their states (no contact details, no bodies)")
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Receipts (operator)")
{}
