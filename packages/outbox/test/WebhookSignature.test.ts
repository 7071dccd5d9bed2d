import { describe, expect, it, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { KeyId, privateKeyFromSeed, Signer, SigningKeySource, TenantId } from "@delivery/signer"
import { connect, TestDatabase } from "@delivery/testing"
import { Effect, Layer, TestClock, TestContext } from "effect"
import { sign } from "node:crypto"
import { WebhookSignature, WebhookSigner } from "../src/index.ts"
import { KeySourceLive, publicKeyOf, seedOf, setupTenant, SuiteLayer } from "./support/OutboxTest.ts"

const { formatSignature, signedContent, verifyWebhook } = WebhookSignature

const NOW = 1_700_000_000
const id = "0b7e4b9c-3f2a-4c1e-9a57-1c2d3e4f5a6b"
const body = "{\"a\":1}"
const signWith = (seed: number, content: Uint8Array) =>
  formatSignature(new Uint8Array(sign(null, content, privateKeyFromSeed(seedOf(seed)))))

/** A header signed by seed 1 over `id.NOW.body`, checked at NOW against the public key of seed 1. */
const valid = {
  id,
  timestamp: String(NOW),
  body,
  signatureHeader: signWith(1, signedContent(id, NOW, body)),
  publicKeys: [publicKeyOf(1)],
  nowSeconds: NOW,
  toleranceSeconds: 300
}

describe("verifyWebhook: the receiver's check of a Standard Webhooks v1a signature", () => {
  it("a v1a signature over `id.timestamp.body` verifies under the signing key, and under no other", () => {
    expect(verifyWebhook(valid)).toBe(true)
    expect(verifyWebhook({ ...valid, publicKeys: [publicKeyOf(2)] })).toBe(false)
    expect(verifyWebhook({ ...valid, publicKeys: [] })).toBe(false)
  })

  it("the signed content is `id.timestamp.body`: another id, timestamp or body fails", () => {
    expect(verifyWebhook({ ...valid, id: `${id}x` })).toBe(false)
    expect(verifyWebhook({ ...valid, body: "{\"a\":2}" })).toBe(false)
    expect(verifyWebhook({ ...valid, timestamp: String(NOW + 1) })).toBe(false)
  })

  it("the timestamp must be 1 to 12 plain decimal digits: a signed but malformed timestamp is refused", () => {
    // Each malformed header below is signed over exactly the content a lenient parser would rebuild.
    for (const timestamp of [`${NOW}x`, `x${NOW}`, ` ${NOW}`, `${NOW}.0`, "", "1234567890123"]) {
      const number = Number(timestamp.replace(/[^0-9.]/g, ""))
      const header = signWith(1, signedContent(id, number, body))
      expect(verifyWebhook({ ...valid, timestamp, signatureHeader: header, nowSeconds: number, toleranceSeconds: 10 ** 13 }), timestamp).toBe(false)
    }
  })

  it("tolerance: a timestamp exactly toleranceSeconds away (either side) verifies, one second further does not", () => {
    for (const skew of [300, -300]) {
      expect(verifyWebhook({ ...valid, nowSeconds: NOW + skew }), String(skew)).toBe(true)
    }
    for (const skew of [301, -301]) {
      expect(verifyWebhook({ ...valid, nowSeconds: NOW + skew }), String(skew)).toBe(false)
    }
  })

  it("the header is a space-delimited list: one verifying v1a entry among others is enough", () => {
    const other = signWith(2, signedContent(id, NOW, body))
    expect(verifyWebhook({ ...valid, signatureHeader: `v1,c2lnbmF0dXJl ${other} ${valid.signatureHeader}` })).toBe(true)
    expect(verifyWebhook({ ...valid, signatureHeader: `${valid.signatureHeader} ${other}` })).toBe(true)
  })

  it("only the v1a scheme counts: the same signature under another scheme name, or an entry without a value, is refused", () => {
    const value = valid.signatureHeader.slice("v1a,".length)
    expect(verifyWebhook({ ...valid, signatureHeader: `v1,${value}` })).toBe(false)
    expect(verifyWebhook({ ...valid, signatureHeader: `v2a,${value}` })).toBe(false)
    expect(verifyWebhook({ ...valid, signatureHeader: "v1a" })).toBe(false)
  })

  it("a signature must be exactly 64 bytes: a valid one with trailing bytes appended is refused", () => {
    const value = Buffer.from(valid.signatureHeader.slice("v1a,".length), "base64")
    const longer = `v1a,${Buffer.concat([value, Buffer.from([0, 0, 0])]).toString("base64")}`
    expect(verifyWebhook({ ...valid, signatureHeader: longer })).toBe(false)
    expect(verifyWebhook({ ...valid, signatureHeader: "v1a,AAAA" })).toBe(false)
  })

  it("several trusted keys (a rotation): a signature verifies when any one of them signed it", () => {
    expect(verifyWebhook({ ...valid, publicKeys: [publicKeyOf(2), publicKeyOf(1)] })).toBe(true)
    expect(verifyWebhook({ ...valid, publicKeys: [publicKeyOf(1), publicKeyOf(2)] })).toBe(true)
  })
})

const SignerLayer = WebhookSigner.Default.pipe(Layer.provide(KeySourceLive), Layer.provideMerge(SuiteLayer))
const withTestClock = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, TestContext.TestContext)

layer(SignerLayer, { excludeTestServices: true })("WebhookSigner: the tenant's active key signs each attempt (real PostgreSQL)", (it) => {
  it.effect("the three headers: webhook-id is the message id, webhook-timestamp the attempt's Clock second (rounded down), webhook-signature v1a over `id.timestamp.body` by the active key", () =>
    Effect.gen(function*() {
      yield* setupTenant("acme", "web", "http://127.0.0.1:9/hooks")
      const webhooks = yield* WebhookSigner
      const headersFor = yield* webhooks.forBatch([TenantId.make("acme")])
      const headers = yield* withTestClock(
        Effect.zipRight(TestClock.setTime(NOW * 1000 + 999), headersFor(TenantId.make("acme"), id, body))
      )
      expect(headers["webhook-id"]).toBe(id)
      expect(headers["webhook-timestamp"]).toBe(String(NOW))
      expect(headers["webhook-signature"]).toBe(signWith(1, signedContent(id, NOW, body)))
    }))

  it.effect("headersFor.now (a key source signing in this process) makes headersFor's headers at once on the Clock; a tenant without an active key, or outside the batch, is WebhookKeyUnavailable returned", () =>
    Effect.gen(function*() {
      yield* setupTenant("acme", "web", "http://127.0.0.1:9/hooks")
      const [headersFor, viaEffect] = yield* withTestClock(Effect.gen(function*() {
        yield* TestClock.setTime(NOW * 1000 + 999)
        const batch = yield* (yield* WebhookSigner).forBatch([TenantId.make("acme"), TenantId.make("keyless")])
        return [batch, yield* batch(TenantId.make("acme"), id, body)] as const
      }))
      expect(headersFor.now).toBeDefined()
      const now = headersFor.now!(TenantId.make("acme"), id, body)
      expect(now).toEqual(viaEffect)
      expect(now).toEqual({
        "webhook-id": id,
        "webhook-timestamp": String(NOW),
        "webhook-signature": signWith(1, signedContent(id, NOW, body))
      })
      expect(headersFor.now!(TenantId.make("keyless"), id, body)).toEqual(new WebhookSignature.WebhookKeyUnavailable({ tenant: "keyless" }))
      expect(headersFor.now!(TenantId.make("beta"), id, body)).toEqual(new WebhookSignature.WebhookKeyUnavailable({ tenant: "beta" }))
    }))

  it.effect("a key source that must sign elsewhere (no signNow, a KMS) gives no headersFor.now: every attempt signs through the source's effect", () =>
    Effect.gen(function*() {
      yield* setupTenant("acme", "web", "http://127.0.0.1:9/hooks")
      const source = yield* Effect.provide(SigningKeySource, KeySourceLive)
      const remote = WebhookSigner.Default.pipe(
        Layer.provide(Layer.succeed(SigningKeySource, { sign: source.sign, publicKey: source.publicKey })),
        Layer.provide(Layer.succeed(Signer, yield* Signer))
      )
      const headersFor = yield* Effect.flatMap(WebhookSigner, (w) => w.forBatch([TenantId.make("acme")])).pipe(Effect.provide(remote))
      expect(headersFor.now).toBeUndefined()
      expect((yield* headersFor(TenantId.make("acme"), id, body))["webhook-id"]).toBe(id)
    }))

  it.effect("a tenant with no active key is refused with WebhookKeyUnavailable naming the tenant; so is a tenant of another batch", () =>
    Effect.gen(function*() {
      yield* setupTenant("acme", "web", "http://127.0.0.1:9/hooks")
      const webhooks = yield* WebhookSigner
      const headersFor = yield* webhooks.forBatch([TenantId.make("keyless"), TenantId.make("acme")])
      const refused = yield* Effect.flip(headersFor(TenantId.make("keyless"), id, body))
      expect(refused).toEqual(new WebhookSignature.WebhookKeyUnavailable({ tenant: "keyless" }))
      expect(refused._tag).toBe("WebhookKeyUnavailable")
      // Only the batch's tenants were looked up: acme signs, beta (not in the batch) does not.
      yield* headersFor(TenantId.make("acme"), id, body)
      expect(yield* Effect.flip(headersFor(TenantId.make("beta"), id, body))).toEqual(
        new WebhookSignature.WebhookKeyUnavailable({ tenant: "beta" })
      )
    }))

  it.effect("an active key whose private key the key source lacks is refused with WebhookKeyUnavailable naming the tenant", () =>
    Effect.gen(function*() {
      const signer = yield* Signer
      const tenant = TenantId.make("sourceless")
      if ((yield* signer.keys(tenant)).length === 0) yield* signer.registerKey(tenant, KeyId.make("k9"), publicKeyOf(9))
      const headersFor = yield* (yield* WebhookSigner).forBatch([tenant])
      expect(yield* Effect.flip(headersFor(tenant, id, body))).toEqual(new WebhookSignature.WebhookKeyUnavailable({ tenant }))
    }))

  it.effect("a key lookup that fails (the database is unreachable) signs nothing: WebhookKeyUnavailable, never a crash of the batch", () =>
    Effect.gen(function*() {
      const closed = yield* Effect.scoped(connect((yield* TestDatabase).url))
      const unreachable = WebhookSigner.Default.pipe(
        Layer.provide(Signer.Default),
        Layer.provide(KeySourceLive),
        Layer.provide(Layer.succeed(SqlClient.SqlClient, closed))
      )
      const result = yield* Effect.gen(function*() {
        const headersFor = yield* (yield* WebhookSigner).forBatch([TenantId.make("acme")])
        return yield* Effect.flip(headersFor(TenantId.make("acme"), id, body))
      }).pipe(Effect.provide(unreachable))
      expect(result).toEqual(new WebhookSignature.WebhookKeyUnavailable({ tenant: "acme" }))
    }))
})
