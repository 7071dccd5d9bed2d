export { type AnswerHead, type ClientOptions, type DeliveryClient, lastAnswer, makeClient, makeFetchClient } from "./Client.ts"
export {
  envelopeOf,
  type EventToSend,
  makeProducer,
  type Producer,
  type ProducerKey,
  type ProducerOptions,
  ProducerGaveUp,
  type RetryPolicy,
  type Sent
} from "./Producer.ts"
export {
  type DeliveryRequest,
  DeliveryRejected,
  type KeyLookup,
  makeVerifier,
  operatorKeys,
  staticKeys,
  type TrustedKey,
  VerificationReason,
  type VerifiedDelivery,
  type VerifierOptions
} from "./Verifier.ts"
