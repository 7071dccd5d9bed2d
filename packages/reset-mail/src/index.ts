export * from "./Api.ts"
export { PasswordResetHttpLive, ResetMailOperatorHttpLive } from "./Http.ts"
export { ResetLimits, ResetLimitsLive } from "./ResetLimits.ts"
export {
  DeliveryModeConfig,
  loadResetDelivery,
  PASSWORD_RESET_DELIVERY,
  PASSWORD_RESET_STALE_CLAIM,
  RESET_MAIL_CONFIG,
  type ResetDelivery,
  ResetRequestConfig,
  type WorkerSettings
} from "./ResetMailConfig.ts"
export { type ClaimedRow, ResetMailRepo, ResetMailState, ResetMailStorageUnavailable } from "./ResetMailRepo.ts"
export { RESET_MAIL_PAGE_LIMIT, ResetMailCursorInvalid, ResetMailItem, ResetMailPage } from "./ResetMailItems.ts"
export { ResetRequests } from "./ResetRequests.ts"
export {
  type AttemptOutcome,
  deliveryLoop,
  makeOwner,
  ResetMailDelivery,
  ResetMailSettings,
  resetMailWorkerLayer,
  resetMailWorkerLive,
  type TickResult,
  WORKER_NAME
} from "./ResetMailWorker.ts"
export { type ResetMailInput, renderDefault, resetLink, ResetTemplate, ResetTemplateDefault } from "./Template.ts"
