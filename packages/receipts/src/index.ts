export * from "./Api.ts"
export * from "./Domain.ts"
export { checkRoots, FileStore, FileStoreLive, ReceiptStorageError, RootInvalid, UploadRefused } from "./FileStore.ts"
export { ReceiptsHttpLive, ReceiptsOperatorHttpLive } from "./Http.ts"
export { freezeNotification, renderNotification, thawNotification } from "./Notification.ts"
export { planEffects, Receipts, type Recorder, requestSha256 } from "./Receipts.ts"
export { loadReceiptsSettings, RECEIPT_DELIVERY, RECEIPTS_CONFIG, type ReceiptsSettings, type StorageRoots } from "./ReceiptsConfig.ts"
export { receiptsLayer } from "./ReceiptsLive.ts"
export { type ClaimedEffect, ReceiptsRepo } from "./ReceiptsRepo.ts"
export {
  type EffectOutcome,
  InvalidDurableEnvelope,
  makeOwner,
  receiptLoop,
  receiptWorkerLayer,
  ReceiptWork,
  ReceiptWorkSettings,
  type TickResult,
  WORKER_NAME
} from "./ReceiptWork.ts"
