export * from "./Domain.ts"
export { EnvelopeInbox, EnvelopeInboxLive, type ReceiveInput, STREAM_PAGE_LIMIT } from "./EnvelopeInbox.ts"
export { EnvelopeInboxApi, EnvelopeIntake, IntakeRequest } from "./Api.ts"
export { EnvelopeInboxHttpLive, EnvelopeIntakeLive } from "./Http.ts"
export { InboxRetention, inboxRetentionWorker, InboxRetentionWorker, MAX_BATCHES_PER_SWEEP, retentionLoop, type SweepResult } from "./InboxRetention.ts"
export { RETENTION_BATCH, type StreamKey } from "./InboxRepo.ts"
export {
  INBOX_CONFIG,
  InboxConfig,
  MaxEnvelopeBytesConfig,
  PayloadRetentionConfig,
  RetentionIntervalConfig,
  SyncLimitConfig
} from "./InboxConfig.ts"
export { FLUSH_FAILED, MAX_PENDING_WINDOWS, REFUSAL_FLUSH_INTERVAL, RefusalAudit } from "./RefusalAudit.ts"
export { contiguousCursor } from "./StreamRules.ts"
export { SyncLimiter, syncKey } from "./SyncLimiter.ts"
export { type FloorActor } from "./EnvelopeInbox.ts"
export { InboxStreamsApi, RaiseReplayFloor, ReplayFloorRaised, StreamNotFound, StreamView } from "./StreamsApi.ts"
export { InboxStreamsHttpLive } from "./StreamsHttp.ts"
