import { AccountId, ApiKeyName, DeviceId, Email, Permission, TenantId } from "@delivery/identity"
import { KeyId, RawPublicKey } from "@delivery/signer"
import { OPERATOR_TOKEN } from "@delivery/testing"
import { Clock, Effect, Redacted, Schema } from "effect"
import { createPrivateKey, createPublicKey, randomBytes } from "node:crypto"
import { makeFetchClient } from "../../src/index.ts"

/** An Ed25519 key pair from a random seed, as `SIGNER_KEYS` takes it (`tenant:keyId:<seed>`). */
export const keyPair = () => {
  const seed = randomBytes(32)
  // PKCS#8 DER of an Ed25519 key is a fixed 16-byte prefix and the 32-byte seed.
  const privateKey = createPrivateKey({
    key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]),
    format: "der",
    type: "pkcs8"
  })
  const publicKey = new Uint8Array(Buffer.from(createPublicKey(privateKey).export({ format: "jwk" }).x!, "base64url"))
  return { seed: seed.toString("base64url"), privateKey, publicKey }
}

export const operatorClient = (baseUrl: string) => makeFetchClient({ baseUrl, token: Redacted.make(OPERATOR_TOKEN) })

/**
 * A tenant provisioned through the typed client alone: an account, a device credential for producer
 * `laptop-1`, an API key allowed to enqueue, and signing key `k1` registered with its public key.
 */
export const provisionTenant = (baseUrl: string, tenantName: string, key = keyPair()) =>
  Effect.gen(function* () {
    const operator = yield* operatorClient(baseUrl)
    const tenant = TenantId.make(tenantName)
    yield* operator.provisioning.createTenant({ payload: { id: tenant } })
    const { account } = yield* operator.provisioning.createAccount({
      path: { tenant },
      payload: { email: Schema.decodeSync(Email)(`ops@${tenantName}.example`) }
    })
    const device = yield* operator.provisioning.issueDeviceCredential({
      path: { tenant },
      payload: { account: AccountId.make(account.id), device: DeviceId.make("laptop-1") }
    })
    const apiKey = yield* operator.provisioning.issueApiKey({
      path: { tenant },
      payload: { account: account.id, kind: "agent", name: ApiKeyName.make("scheduler"), permissions: [Permission.make("outbox:enqueue")] }
    })
    yield* operator.signer.register({ path: { tenant }, payload: { keyId: KeyId.make("k1"), publicKey: RawPublicKey.make(key.publicKey) } })
    return { operator, tenant, account, device, apiKey, key }
  })

/** A clock that reads `millis` whenever asked: a check made at that moment. */
export const stoppedClock = (millis: number): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => millis,
  currentTimeMillis: Effect.succeed(millis),
  unsafeCurrentTimeNanos: () => BigInt(millis) * 1_000_000n,
  currentTimeNanos: Effect.succeed(BigInt(millis) * 1_000_000n),
  sleep: () => Effect.void
})
