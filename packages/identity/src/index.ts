export * from "./Domain.ts"
export {
  Identity,
  type IssueApiKey,
  type IssueDeviceCredential,
  passwordMaxLength,
  passwordMinLength,
  type VerifiedAccount
} from "./Identity.ts"
export { Authentication, AuthenticationFailure, CurrentIdentity, requirePermission } from "./Authentication.ts"
export { authenticationLayer, AuthenticationLive, PeerLimitConfig, retryAfterSeconds } from "./AuthenticationLive.ts"
export { IdentityApi } from "./Api.ts"
export { deliveryApiId, IdentityHttpLive } from "./Http.ts"
export { maxTokenLength } from "./Token.ts"
