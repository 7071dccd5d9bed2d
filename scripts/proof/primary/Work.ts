import { type Envelope } from "@delivery/signer"
import { makeProducer } from "@delivery/client"
import { FetchHttpClient } from "@effect/platform"
import { Effect, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { DEVICE, KEY_ID, PROJECT, TENANT, type TenantKey } from "./Fixtures.ts"
import { type Answer, call } from "./Http.ts"

// Every piece of work of the primary scenario is created over HTTP, as a tenant, a user or a producer would:
// outbox messages, password-reset requests, receipts with an uploaded attachment, team applications, and signed
// inbound envelopes. Each function answers what the product acknowledged (ids, provider idempotency keys), which
// is the scenario's record of accepted work.

const tag = () => randomBytes(4).toString("hex")

export interface AcceptedMessage {
  readonly id: string
  /** The envelope's own idempotency key, as enqueued. */
  readonly idempotencyKey: string
}

/** POST /api/outbox/messages: the message id is the webhook's Idempotency-Key. */
export const enqueueMessage = (baseUrl: string, apiKey: string, sequence: number) =>
  Effect.map(
    call(baseUrl, "POST", "/api/outbox/messages", {
      token: apiKey,
      body: {
        envelope: {
          type: "controlplane/v1",
          route: { tenant: TENANT, project: PROJECT, producer: "scheduler" },
          eventId: `evt-out-${String(sequence).padStart(12, "0")}-${tag()}`,
          idempotencyKey: `proof:out:${sequence}`,
          sequence,
          createdAt: new Date().toISOString(),
          schemaVersion: 1,
          metadata: { kind: "task.proposed", subject: `task-${sequence}`, attributes: { title: `Task ${sequence}` } }
        },
        // Providers fail for a while in this scenario: the message must not run out of attempts meanwhile.
        maxAttempts: 100
      }
    }),
    (answer): { readonly answer: Answer; readonly accepted?: AcceptedMessage } =>
      answer.status === 201
        ? { answer, accepted: { id: answer.json.message.id as string, idempotencyKey: `proof:out:${sequence}` } }
        : { answer }
  )

/** POST /api/password-resets: always 202, whether or not the address has an enabled account. */
export const requestReset = (baseUrl: string, email: string) =>
  call(baseUrl, "POST", "/api/password-resets", { body: { tenant: TENANT, email } })

export interface AcceptedReceipt {
  readonly id: string
  /** The notify effect's id: the mail's Idempotency-Key. */
  readonly notifyKey: string
  readonly effects: number
}

/** An attachment upload, then the receipt that attaches it (its effects: promote, delete staged, audit, notify). */
export const recordReceipt = (baseUrl: string, apiKey: string, n: number) =>
  Effect.gen(function* () {
    const upload = yield* call(baseUrl, "POST", "/api/receipts/files", {
      token: apiKey,
      body: new Uint8Array(randomBytes(4_096 + n)),
      contentType: "application/pdf"
    })
    if (upload.status !== 201) return { answer: upload, step: "upload" } as ReceiptAttempt
    const recorded = yield* call(baseUrl, "POST", "/api/receipts", {
      token: apiKey,
      body: {
        commandId: `proof-receipt-${n}-${tag()}`,
        reference: `R-PROOF-${n}`,
        currency: "EUR",
        paidAt: "2026-11-30T12:00:00.000Z",
        payer: { name: `Payer ${n}`, email: `payer${n}.${tag()}@payers.example` },
        lines: [{ description: "Consulting", quantity: n, unitMinor: 12_500 }],
        attachments: [upload.json.fileId]
      }
    })
    if (recorded.status !== 201) return { answer: recorded, step: "record" } as ReceiptAttempt
    const effects = recorded.json.effects as ReadonlyArray<{ readonly id: string; readonly kind: string }>
    const notify = effects.find((e) => e.kind === "notify")
    const attempt: ReceiptAttempt = notify === undefined
      ? { answer: recorded, step: "record" }
      : { answer: recorded, step: "record", accepted: { id: recorded.json.receipt.id as string, notifyKey: notify.id, effects: effects.length } }
    return attempt
  })

export interface ReceiptAttempt {
  readonly answer: Answer
  readonly step: "upload" | "record"
  readonly accepted?: AcceptedReceipt
}

export interface AcceptedApplication {
  readonly id: string
  /** Both notifications' effect ids: the mails' Idempotency-Keys. */
  readonly notificationKeys: ReadonlyArray<string>
}

export const submitApplication = (baseUrl: string, apiKey: string, n: number) =>
  Effect.map(
    call(baseUrl, "POST", "/api/team-applications", {
      token: apiKey,
      body: {
        commandId: `proof-application-${n}-${tag()}`,
        team: { slug: `team-${n}`, name: `Team ${n}`, email: `team${n}.${tag()}@teams.example` },
        applicant: { name: `Applicant ${n}`, email: `applicant${n}.${tag()}@applicants.example` },
        message: `Application ${n}`
      }
    }),
    (answer): { readonly answer: Answer; readonly accepted?: AcceptedApplication } =>
      answer.status === 201
        ? {
          answer,
          accepted: {
            id: answer.json.application.id as string,
            notificationKeys: (answer.json.notifications as ReadonlyArray<{ readonly effectId: string }>).map((n) => n.effectId)
          }
        }
        : { answer }
  )

/** Signed envelopes of one producer stream, made with the client package's producer (RFC 8785 + Ed25519). */
export const signEnvelopes = (key: TenantKey, deviceToken: string, producer: string, count: number) =>
  Effect.gen(function* () {
    const signer = yield* makeProducer({
      baseUrl: "http://127.0.0.1:1",
      token: Redacted.make(deviceToken),
      key: { keyId: KEY_ID, privateKey: key.privateKey }
    })
    const envelopes: Array<Envelope> = []
    for (let sequence = 1; sequence <= count; sequence++) {
      envelopes.push(yield* signer.sign({
        route: { tenant: TENANT, project: PROJECT, producer },
        sequence,
        eventId: `evt-${producer}-${String(sequence).padStart(8, "0")}-${tag()}`,
        metadata: { kind: "task.updated", subject: `subject-${sequence}`, attributes: { device: DEVICE } }
      }))
    }
    return envelopes
  }).pipe(Effect.provide(FetchHttpClient.layer))

/** What one POST of an envelope got: acknowledged (201 accepted, 200 duplicate) or not. */
export interface EnvelopeSend {
  readonly envelope: Envelope
  readonly process: string
  readonly status: number
  readonly outcome?: "accepted" | "duplicate"
  readonly eventIdentity?: string
}

export const acknowledged = (send: EnvelopeSend) => send.outcome !== undefined

/** One POST, once: whatever happens (a killed process included) is recorded, nothing is retried here. */
export const sendEnvelope = (target: { readonly name: string; readonly url: string }, deviceToken: string, envelope: Envelope) =>
  Effect.map(
    call(target.url, "POST", "/controlplane/v1/envelopes", { token: deviceToken, body: envelope, timeoutMs: 5_000 }),
    (answer): EnvelopeSend => {
      const outcome = answer.json?.outcome
      return (answer.status === 201 && outcome === "accepted") || (answer.status === 200 && outcome === "duplicate")
        ? { envelope, process: target.name, status: answer.status, outcome, eventIdentity: answer.json.eventIdentity as string }
        : { envelope, process: target.name, status: answer.status }
    }
  )

/** Sends again with the client package's producer (retries 429/503/transport): a duplicate counts as success. */
export const resendEnvelope = (baseUrl: string, deviceToken: string, key: TenantKey, envelope: Envelope) =>
  Effect.gen(function* () {
    const producer = yield* makeProducer({
      baseUrl,
      token: Redacted.make(deviceToken),
      key: { keyId: KEY_ID, privateKey: key.privateKey },
      retry: { maxAttempts: 10, base: "200 millis", cap: "2 seconds" }
    })
    return yield* producer.sendSigned(envelope)
  }).pipe(Effect.provide(FetchHttpClient.layer), Effect.either)
