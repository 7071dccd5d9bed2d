import { Canonical } from "@delivery/core"
import type { PresentedKeyMaterial } from "@delivery/identity"
import { Either } from "effect"
import { createHash, createHmac } from "node:crypto"
import type { StackId } from "./Domain.ts"
import { type Bytes32, bytesOf, type IncomingProof, type IncomingWakeCapability } from "./Protocol.ts"

// The derivations of the incoming proof (spec 001, "Pre-wake API admission"). Every hash input starts with its own
// label and a zero byte, so no value computed for one purpose is ever valid for another (domain separation).
// docs/idle-wake.md, "Derivations", states each one; the worked example recomputes them from the page.

const LABEL = {
  challenge: "delivery/idle-wake/v1/challenge",
  keySalt: "delivery/idle-wake/v1/tenant-api-http-v2/salt",
  key: "delivery/idle-wake/v1/tenant-api-http-v2/key",
  bindings: "delivery/idle-wake/v1/github-broker-events-v1/bindings"
} as const

const ZERO = Buffer.from([0])
const text = (value: string) => Buffer.from(value, "utf8")

const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64url") as Bytes32

/**
 * The cycle's signed challenge: SHA-256(label ‖ 0 ‖ stack ‖ 0 ‖ idle-hold bytes). The idle hold is the cloud's new
 * random value for this sleep cycle and is inside the signed assertion, so the challenge is both fresh and signed.
 */
export const challengeOf = (stack: StackId, idleHold: Bytes32): Bytes32 =>
  b64(createHash("sha256").update(text(LABEL.challenge)).update(ZERO).update(text(stack)).update(ZERO).update(bytesOf(idleHold)).digest())

/** The per-cycle salt of the key projection: HMAC-SHA256 keyed by the challenge. */
const keySaltOf = (challenge: Bytes32): Buffer => createHmac("sha256", bytesOf(challenge)).update(text(LABEL.keySalt)).digest()

export interface KeyFingerprintInput {
  readonly kind: string
  readonly lookupId: string
  readonly secretHash: Uint8Array
}

/**
 * One key's wake fingerprint for one cycle: HMAC-SHA256(salt, label ‖ 0 ‖ kind ‖ 0 ‖ lookup id ‖ 0 ‖ SHA-256 of the
 * secret). The tenant computes it from its stored hash, the cloud from a presented token; neither the token nor the
 * stored hash leaves the tenant, and a fingerprint of one cycle says nothing about another (a fresh salt each).
 */
export const keyFingerprint = (challenge: Bytes32, key: KeyFingerprintInput): Bytes32 =>
  b64(
    createHmac("sha256", keySaltOf(challenge))
      .update(text(LABEL.key)).update(ZERO)
      .update(text(key.kind)).update(ZERO)
      .update(text(key.lookupId)).update(ZERO)
      .update(key.secretHash)
      .digest()
  )

/** The fingerprint of a presented bearer token's material (`presentedKeyMaterial` in identity). */
export const presentedFingerprint = (challenge: Bytes32, material: PresentedKeyMaterial): Bytes32 =>
  keyFingerprint(challenge, material)

export interface Binding {
  readonly endpoint: string
  readonly generation: number
  readonly connection: string
  readonly owner: string
  readonly registration: string
  readonly appId: string
  readonly installationId: string
  readonly channel: string
}

/**
 * The canonical fingerprint of all current GitHub bindings: SHA-256(label ‖ 0 ‖ RFC 8785 of
 * `{ connectorInstance, connectorGeneration, bindings }`), bindings sorted by endpoint id. Any change of any binding,
 * of the instance or of its generation changes it.
 */
export const bindingsFingerprint = (
  connectorInstance: string | null,
  connectorGeneration: number,
  bindings: ReadonlyArray<Binding>
): Bytes32 => {
  // Stryker disable next-line EqualityOperator,ConditionalExpression: endpoint ids are unique (primary key), so the equal branch is never taken
  const sorted = [...bindings].sort((a, b) => (a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : 0))
  const canonical = Either.getOrThrow(
    Canonical.canonicalBytes({ connectorInstance, connectorGeneration, bindings: sorted.map((b) => ({ ...b })) })
  )
  return b64(createHash("sha256").update(text(LABEL.bindings)).update(ZERO).update(canonical).digest())
}

export type StopRefusal =
  | "report-not-version-3"
  | "report-not-idle"
  | "report-wrong-stack"
  | "challenge-mismatch"
  | "capability-mismatch"
  | "profile-missing"
  | "proof-changed"

/**
 * The cloud's comparison before it stops compute (spec 001): both reads of the cycle are idle version 3 reports for
 * the stack, the proof answers exactly the capability requested with every requested profile, its challenge is the
 * one of this stack and idle hold, and the initial and final proofs are the same bytes. What comes back is the
 * receipt the cloud stores; anything else refuses the stop.
 */
export const compareForStop = (input: {
  readonly stack: StackId
  readonly idleHold: Bytes32
  readonly requested: IncomingWakeCapability
  readonly initial: { readonly version: number; readonly stack: string; readonly idle: boolean; readonly incomingWake?: IncomingProof }
  readonly final: { readonly version: number; readonly stack: string; readonly idle: boolean; readonly incomingWake?: IncomingProof }
}): Either.Either<IncomingProof, StopRefusal> => {
  const reads = [input.initial, input.final]
  for (const read of reads) {
    if (read.version !== 3 || read.incomingWake === undefined) return Either.left("report-not-version-3")
    if (read.stack !== input.stack || read.incomingWake.stack !== input.stack) return Either.left("report-wrong-stack")
    if (!read.idle) return Either.left("report-not-idle")
  }
  const initial = input.initial.incomingWake!
  const final = input.final.incomingWake!
  if (final.challenge !== challengeOf(input.stack, input.idleHold)) return Either.left("challenge-mismatch")
  const same = (a: unknown, b: unknown) =>
    Buffer.from(Either.getOrThrow(Canonical.canonicalBytes(a))).equals(Buffer.from(Either.getOrThrow(Canonical.canonicalBytes(b))))
  if (!same(final.capability, input.requested)) return Either.left("capability-mismatch")
  for (const { profile } of input.requested.profiles) {
    if (final.profiles[profile] === undefined) return Either.left("profile-missing")
  }
  if (!same(initial, final)) return Either.left("proof-changed")
  return Either.right(final)
}
