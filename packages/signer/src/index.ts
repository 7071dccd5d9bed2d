export * from "./Domain.ts"
export {
  AttributeKey,
  Attributes,
  AttributeValue,
  CreatedAt,
  decodeEnvelope,
  decodeUnsignedEnvelope,
  Envelope,
  EnvelopeHead,
  EnvelopeInvalid,
  EventId,
  IdempotencyKey,
  invalidAt,
  type InvalidAt,
  MAX_ATTRIBUTE_CODE_POINTS,
  MAX_ATTRIBUTES,
  Metadata,
  MetadataKind,
  requireSupportedSchemaVersion,
  Route,
  SchemaVersion,
  Sequence,
  SignatureText,
  SUPPORTED_SCHEMA_VERSION,
  UnsignedEnvelope
} from "./Envelope.ts"
export {
  decodeEnvelopeSignature,
  eventIdentity,
  signEnvelope,
  signingBytes,
  signingText,
  verifyEnvelopeSignature,
  verifySignatureBytes
} from "./EnvelopeSignature.ts"
export { decodeBase64Url, decodeSignature, Ed25519PublicKey, encodeBase64Url, privateKeyFromSeed, publicKeyFromRaw, rawPublicKey } from "./Ed25519.ts"
export type { PrivateKeyEntry } from "./KeyList.ts"
export { parseKeyList } from "./KeyList.ts"
export * as KeySource from "./KeySource.ts"
export { SigningKeySource, type SigningKeySourceShape } from "./KeySource.ts"
export { KEY_AUDIT_LIMIT, PURGE_BATCH, replayWindowConfig, type SignRequest, Signer, SIGNER_REPLAY_WINDOW, type VerifiedEnvelope } from "./Signer.ts"
export {
  type KeySourceSummary,
  purgeIntervalConfig,
  SIGNER_CONFIG,
  SIGNER_PURGE_INTERVAL,
  SignerConfig
} from "./SignerConfig.ts"
export {
  KeyRegistered,
  KeyRevoked,
  KeyRotated,
  KeyUnchanged,
  SignerApi,
  SigningKeyList,
  SigningKeyRequest,
  SigningKeyView
} from "./Api.ts"
export { SignerHttpLive } from "./Http.ts"
export { newCorrelationId, systemActor } from "./KeyManagement.ts"
export {
  type KeyLookup,
  makeVerificationKeys,
  VERIFICATION_KEY_CAPACITY,
  type VerificationKey,
  type VerificationKeys
} from "./VerificationKeys.ts"
export {
  PURGE_WORKER,
  purgeRevokedLoop,
  purgeRevokedTick,
  signerPurgeWorker,
  SignerPurgeWorkerLive
} from "./SignerPurgeWorker.ts"
