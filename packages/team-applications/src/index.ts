export * from "./Api.ts"
export * from "./Domain.ts"
export { TeamApplicationsHttpLive, TeamApplicationsOperatorHttpLive } from "./Http.ts"
export {
  AttemptResult,
  CLEANUP_WORKER_NAME,
  cleanupLoop,
  DeliveryFailed,
  deliveryLoop,
  DeliverySettings,
  makeDeliver,
  notificationHooks,
  WORKER_NAME
} from "./Delivery.ts"
export * as EffectQueueStore from "./EffectQueueStore.ts"
export { renderNotifications } from "./Notifications.ts"
export {
  makeNotificationQueue,
  NotificationQueue,
  QueueItem,
  requestSha256,
  type Submitter,
  TeamApplications,
  TeamApplicationsSender
} from "./TeamApplications.ts"
export {
  CLEANUP_INTERVAL,
  loadTeamApplicationsSettings,
  QUEUE_RETENTION,
  TEAM_APPLICATION_DELIVERY,
  TEAM_APPLICATIONS_CONFIG,
  type TeamApplicationsSettings
} from "./TeamApplicationsConfig.ts"
export { notificationStoreLayer, teamApplicationsLayer, teamApplicationWorkers } from "./TeamApplicationsLive.ts"
export { TeamApplicationsRepo } from "./TeamApplicationsRepo.ts"
