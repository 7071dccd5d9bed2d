import { Data, Effect } from "effect"
import { createPrivateKey, createPublicKey, type KeyObject, randomBytes } from "node:crypto"
import { type Answer, call } from "./Http.ts"

// Prerequisites only, through the product's own provisioning routes with the operator token: a tenant, accounts
// with passwords (for resets), an API key for the tenant API, a producer device credential, the tenant's signing
// key and the project's delivery target. No work is created here and no SQL is written.

export const TENANT = "proof"
export const PROJECT = "web"
export const KEY_ID = "k1"
export const DEVICE = "proof-device"
export const PERMISSIONS = ["outbox:enqueue", "receipts:write", "team-applications:write"] as const

/** The tenant's Ed25519 key: the producer signs inbound envelopes with it, the backend signs outbound ones. */
export interface TenantKey {
  readonly seed: Buffer
  readonly privateKey: KeyObject
  /** Raw 32-byte public key, unpadded base64url, as the signing-key route takes it. */
  readonly publicKey: string
}

export const makeTenantKey = (): TenantKey => {
  const seed = randomBytes(32)
  // PKCS#8 DER of an Ed25519 key is a fixed 16-byte prefix and the 32-byte seed.
  const privateKey = createPrivateKey({
    key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]),
    format: "der",
    type: "pkcs8"
  })
  const publicKey = createPublicKey(privateKey).export({ format: "jwk" }).x!
  return { seed, privateKey, publicKey }
}

/** SIGNER_KEYS for the processes: the backend signs outbound envelopes with the tenant's registered key. */
export const signerKeysEnv = (key: TenantKey) => `${TENANT}:${KEY_ID}:${key.seed.toString("base64url")}`

export interface ResetAccount {
  readonly id: string
  readonly email: string
}

export interface Fixtures {
  readonly apiKey: string
  readonly deviceToken: string
  readonly resetAccounts: ReadonlyArray<ResetAccount>
}

/** A failed step: which one and the status it got (never a body: it could echo what was sent). */
export class FixtureFailed extends Data.TaggedError("FixtureFailed")<{ readonly step: string; readonly status: number }> {}

const expectStatus = (step: string, answer: Answer, ...statuses: ReadonlyArray<number>) =>
  statuses.includes(answer.status) ? Effect.succeed(answer) : Effect.fail(new FixtureFailed({ step, status: answer.status }))

export const provision = (baseUrl: string, operatorToken: string, key: TenantKey, options: { readonly resetAccounts: number; readonly hooksEndpoint: string }) =>
  Effect.gen(function* () {
    const op = { token: operatorToken }
    yield* expectStatus("tenant", yield* call(baseUrl, "POST", "/operator/tenants", { ...op, body: { id: TENANT } }), 201)
    const ops = yield* expectStatus(
      "account",
      yield* call(baseUrl, "POST", `/operator/tenants/${TENANT}/accounts`, { ...op, body: { email: "ops@proof.example" } }),
      201
    )
    const opsAccount = ops.json.account.id as string
    const resetAccounts: Array<ResetAccount> = []
    for (let i = 1; i <= options.resetAccounts; i++) {
      const email = `user${i}.${randomBytes(3).toString("hex")}@proof.example`
      const created = yield* expectStatus(
        "reset account",
        yield* call(baseUrl, "POST", `/operator/tenants/${TENANT}/accounts`, {
          ...op,
          body: { email, password: `pw-${randomBytes(12).toString("base64url")}` }
        }),
        201
      )
      resetAccounts.push({ id: created.json.account.id as string, email })
    }
    const apiKey = yield* expectStatus(
      "api key",
      yield* call(baseUrl, "POST", `/operator/tenants/${TENANT}/api-keys`, {
        ...op,
        body: { account: opsAccount, kind: "agent", name: "proof", permissions: PERMISSIONS }
      }),
      201
    )
    const device = yield* expectStatus(
      "device credential",
      yield* call(baseUrl, "POST", `/operator/tenants/${TENANT}/device-credentials`, { ...op, body: { account: opsAccount, device: DEVICE } }),
      201
    )
    yield* expectStatus(
      "signing key",
      yield* call(baseUrl, "POST", `/operator/tenants/${TENANT}/signing-keys`, { ...op, body: { keyId: KEY_ID, publicKey: key.publicKey } }),
      201
    )
    yield* expectStatus(
      "delivery target",
      yield* call(baseUrl, "PUT", `/operator/outbox/targets/${TENANT}/${PROJECT}`, { ...op, body: { endpoint: options.hooksEndpoint } }),
      200
    )
    return { apiKey: apiKey.json.token as string, deviceToken: device.json.token as string, resetAccounts } satisfies Fixtures
  })
