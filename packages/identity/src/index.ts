export * from "./Domain.ts"
export {
  Identity,
  type IssueApiKey,
  type IssueDeviceCredential,
  passwordMaxLength,
  passwordMinLength,
  type VerifiedAccount
} from "./Identity.ts"
export { AuthenticatedRequest, Authentication, AuthenticationFailure, CurrentIdentity, requirePermission } from "./Authentication.ts"
export { type ApiKeyMaterial, presentedKeyMaterial, type PresentedKeyMaterial } from "./KeyMaterial.ts"
export { authenticationLayer, AuthenticationLive } from "./AuthenticationLive.ts"
export { peerFrom, peerOf } from "./Peer.ts"
export {
  consumeOrRefuse,
  IDENTITY_CONFIG,
  IDENTITY_PEER_LIMIT,
  IDENTITY_PEER_WINDOW,
  PeerLimit,
  PeerLimitConfig,
  peerLimitLayer,
  PeerLimitLive,
  retryAfterSeconds,
  TRUSTED_PROXY_HOPS,
  withHeader
} from "./PeerLimit.ts"
export {
  CurrentOperator,
  OperatorAccessDisabled,
  OperatorAuthentication,
  OperatorAuthenticationFailure,
  operatorActor,
  OperatorIdentity
} from "./OperatorAuthentication.ts"
export {
  maxOperatorTokenLength,
  OPERATOR_CONFIG,
  OPERATOR_TOKEN,
  operatorAuthenticationLayer,
  OperatorCredential,
  OperatorCredentialLive,
  OperatorAuthenticationLive,
  OperatorTokenConfig
} from "./OperatorAuthenticationLive.ts"
export { IdentityApi } from "./Api.ts"
export { deliveryApiId, IdentityHttpLive } from "./Http.ts"
export { maxTokenLength } from "./Token.ts"
export { type Page } from "./Identity.ts"
export * from "./Views.ts"
export {
  AccountChanged,
  AccountCreated,
  AccountPage,
  ApiKeyIssued,
  ApiKeyPage,
  ApiKeyRevoked,
  CreateAccount,
  CreateTenant,
  DeviceCredentialIssued,
  DeviceCredentialPage,
  DeviceCredentialRevoked,
  IssueApiKeyRequest,
  IssueDeviceCredentialRequest,
  maxExpiresInSeconds,
  PasswordRefused,
  ProvisioningApi,
  ProvisioningConflict,
  ProvisioningNotFound,
  TenantCreated,
  TenantPage
} from "./ProvisioningApi.ts"
export { ProvisioningHttpLive } from "./ProvisioningHttp.ts"
export { SessionIssued, SessionsApi, SignIn } from "./SessionsApi.ts"
export { SessionsHttpLive } from "./SessionsHttp.ts"
export { IDENTITY_SESSION_TTL, SessionTtlConfig } from "./Identity.ts"
export { IDENTITY_SIGNIN_LIMIT, IDENTITY_SIGNIN_WINDOW, SignInLimit, SignInLimitConfig, SignInLimitLive } from "./SignInLimit.ts"
export {
  PASSWORD_RESET_TTL,
  PasswordResets,
  PasswordResetUnavailable,
  ResetInvalid,
  type ResetMailContext,
  ResetTtlConfig
} from "./PasswordResets.ts"
export { isResetToken, maxResetTokenLength, PASSWORD_RESET_TOKEN_KEY, ResetTokenKeyConfig } from "./ResetToken.ts"
