export * from "./Domain.ts"
export { Outbox, requestFingerprint } from "./Outbox.ts"
export { OUTBOX_CONFIG, OutboxConfig, OutboxSettings, type Settings, SyncPolicyConfig, type SyncPolicy } from "./OutboxConfig.ts"
export { ENQUEUE_PERMISSION, OutboxApi, OutboxOperatorApi } from "./Api.ts"
export { OutboxHttpLive, OutboxOperatorHttpLive } from "./Http.ts"
export { type Delivery, httpSender, noopSender, NotSent, OutboxSender, type Send, type SendOutcome, senderOf } from "./Sender.ts"
export { decide, type Decision } from "./Delivery.ts"
export {
  deliveryRateKey,
  HttpSenderLive,
  OutboxDelivery,
  outboxWorkerLayer,
  outboxWorkerLive,
  type TickResult,
  WORKER_NAME
} from "./OutboxWorker.ts"
export * as WebhookSignature from "./WebhookSignature.ts"
export { WebhookSigner } from "./WebhookSignature.ts"
