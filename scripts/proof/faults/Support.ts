import { type BackendProcess, connect, type RecordedRequest } from "@delivery/testing"
import { Data, type Duration, Effect } from "effect"
import { createHash, createPrivateKey, createPublicKey, randomBytes } from "node:crypto"
import type { World } from "../World.ts"

// What the fault scenarios share: HTTP calls that never throw (an outage answers with status 0), provisioning through
// the operator routes only, bounded polls, a read-only SQL pool for checks, and the provider-side accounting of a
// family (requests per idempotency key, deliveries, duplicates, identical bodies). Nothing here writes an outcome.

/** A step the scenario cannot go on without (provisioning refused, a process that never listened). */
export class StepFailed extends Data.TaggedError("StepFailed")<{ readonly message: string }> {}

export const unique = (prefix: string) => `${prefix}-${randomBytes(4).toString("hex")}`

export interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly json: any
  /** Why there was no answer (status 0): a refused or broken connection, a timeout. A code, never a message. */
  readonly error?: string
  readonly sentAt: number
  readonly answeredAt: number
}

export interface CallOptions {
  readonly token?: string
  readonly body?: unknown
  readonly headers?: Readonly<Record<string, string>>
  readonly timeoutMs?: number
}

/** One request on a fresh connection. Never fails: no answer is status 0 with the error's code. */
export const call = (port: number, method: string, path: string, options: CallOptions = {}) =>
  Effect.promise(async (): Promise<Answer> => {
    const sentAt = Date.now()
    const headers: Record<string, string> = { connection: "close", ...options.headers }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    if (options.body !== undefined) headers["content-type"] ??= "application/json"
    const body = options.body === undefined
      ? undefined
      : options.body instanceof Uint8Array || typeof options.body === "string"
      ? (options.body as RequestInit["body"])
      : JSON.stringify(options.body)
    try {
      const response = await fetch(`http://127.0.0.1:${port}${path}`, {
        method,
        headers,
        body,
        signal: AbortSignal.timeout(options.timeoutMs ?? 15_000)
      })
      const text = await response.text()
      let json: unknown
      try {
        json = text === "" ? undefined : JSON.parse(text)
      } catch {
        json = undefined
      }
      return { status: response.status, headers: Object.fromEntries(response.headers), json, sentAt, answeredAt: Date.now() }
    } catch (error) {
      const code = (error as { readonly code?: unknown; readonly name?: unknown })
      const name = typeof code.code === "string" ? code.code : typeof code.name === "string" ? code.name : "error"
      return { status: 0, headers: {}, json: undefined, error: name, sentAt, answeredAt: Date.now() }
    }
  })

export const is2xx = (status: number) => status >= 200 && status < 300

/** Polls `read` every `everyMs` until `ready` holds or `timeoutMs` passes: the last value read, and whether it held. */
export const pollUntil = <A, E, R>(
  read: Effect.Effect<A, E, R>,
  ready: (value: A) => boolean,
  options: { readonly timeoutMs: number; readonly everyMs?: number }
) =>
  Effect.gen(function* () {
    const started = Date.now()
    let last = yield* read
    while (!ready(last)) {
      if (Date.now() - started >= options.timeoutMs) return { ok: false, value: last, at: Date.now() } as const
      yield* Effect.sleep(options.everyMs ?? 100)
      last = yield* read
    }
    return { ok: true, value: last, at: Date.now() } as const
  })

// --- Fixtures, through the operator routes only -----------------------------------------------------------------

export const PERMISSIONS = {
  outbox: "outbox:enqueue",
  receipts: "receipts:write",
  teamApplications: "team-applications:write"
} as const

/** An Ed25519 signing key for a tenant: the seed goes to the backends' SIGNER_KEYS, the public key to the operator route. */
export const signingKey = (tenant: string, keyId = "k1") => {
  const seed = randomBytes(32)
  // PKCS#8 DER of an Ed25519 key is a fixed 16-byte prefix and the 32-byte seed.
  const privateKey = createPrivateKey({
    key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]),
    format: "der",
    type: "pkcs8"
  })
  const publicKey = createPublicKey(privateKey).export({ format: "jwk" }).x!
  return { tenant, keyId, publicKey, signerKeys: `${tenant}:${keyId}:${seed.toString("base64url")}` }
}

const expectStatus = (what: string, answer: Answer, statuses: ReadonlyArray<number>) =>
  statuses.includes(answer.status)
    ? Effect.succeed(answer)
    : Effect.fail(new StepFailed({ message: `${what}: status ${answer.status}${answer.error === undefined ? "" : ` (${answer.error})`}` }))

export interface Tenant {
  readonly tenant: string
  readonly account: string
  /** An API key with the permissions asked for. */
  readonly token: string
}

/**
 * A tenant with one account and an API key, made over the operator routes; with `signing`, its public key is
 * registered; with `targets`, each project's delivery target is the loopback path given.
 */
export const provision = (
  world: World,
  port: number,
  options: {
    readonly tenant: string
    readonly permissions: ReadonlyArray<string>
    readonly signing?: ReturnType<typeof signingKey>
    readonly targets?: Readonly<Record<string, string>>
  }
) =>
  Effect.gen(function* () {
    const op = { token: world.operatorToken }
    const { tenant } = options
    yield* expectStatus("create tenant", yield* call(port, "POST", "/operator/tenants", { ...op, body: { id: tenant } }), [201])
    const account = yield* expectStatus(
      "create account",
      yield* call(port, "POST", `/operator/tenants/${tenant}/accounts`, { ...op, body: { email: `ops@${tenant}.example` } }),
      [201]
    )
    const accountId = account.json.account.id as string
    const key = yield* expectStatus(
      "issue API key",
      yield* call(port, "POST", `/operator/tenants/${tenant}/api-keys`, {
        ...op,
        body: { account: accountId, kind: "agent", name: "proof", permissions: options.permissions }
      }),
      [201]
    )
    if (options.signing !== undefined) {
      yield* expectStatus(
        "register signing key",
        yield* call(port, "POST", `/operator/tenants/${tenant}/signing-keys`, {
          ...op,
          body: { keyId: options.signing.keyId, publicKey: options.signing.publicKey }
        }),
        [200, 201]
      )
    }
    for (const [project, path] of Object.entries(options.targets ?? {})) {
      yield* expectStatus(
        "register delivery target",
        yield* call(port, "PUT", `/operator/outbox/targets/${tenant}/${project}`, { ...op, body: { endpoint: world.loopback.urlFor(path) } }),
        [200, 201]
      )
    }
    return { tenant, account: accountId, token: key.json.token as string } satisfies Tenant
  })

// --- Work, over HTTP ---------------------------------------------------------------------------------------------

/** A team application; every address and name unique to it. */
export const application = () => {
  const tag = randomBytes(3).toString("hex")
  return {
    commandId: unique("cmd"),
    team: { slug: `crew-${tag}`, name: `Crew ${tag}`, email: `crew.${tag}@teams.proof.example` },
    applicant: { name: `Applicant ${tag}`, email: `applicant.${tag}@proof.example` },
    message: `Application ${tag}`
  }
}

export const receipt = (attachments: ReadonlyArray<string> = []) => ({
  commandId: unique("cmd"),
  reference: `R-${randomBytes(3).toString("hex")}`,
  currency: "EUR",
  paidAt: "2026-11-30T12:00:00.000Z",
  payer: { name: "Proof Payer", email: `payer.${randomBytes(3).toString("hex")}@proof.example` },
  lines: [{ description: "Consulting", quantity: 2, unitMinor: 12_500 }],
  ...(attachments.length === 0 ? {} : { attachments })
})

/** An outbox enqueue request (the backend signs the envelope with the tenant's active key). */
export const outboxMessage = (tenant: string, project: string, n: number, tag: string) => ({
  envelope: {
    type: "controlplane/v1",
    route: { tenant, project, producer: "proof" },
    eventId: `evt-${tag}-${String(n).padStart(12, "0")}`,
    idempotencyKey: `${tag}:${n}`,
    sequence: n,
    createdAt: new Date().toISOString(),
    schemaVersion: 1,
    metadata: { kind: "task.proposed", subject: `task-${n}`, attributes: { title: `proof ${n}` } }
  }
})

/** Short outbox timing: a 2 s request, a 3 s cycle and a 4 s lease (the outbox requires lease > cycle > requests). */
export const OUTBOX_FAST: Readonly<Record<string, string>> = {
  OUTBOX_POLL_INTERVAL: "100 millis",
  OUTBOX_BATCH_SIZE: "10",
  OUTBOX_CONCURRENCY: "10",
  OUTBOX_REQUEST_TIMEOUT: "2 seconds",
  OUTBOX_CYCLE_TIMEOUT: "3 seconds",
  OUTBOX_LEASE: "4 seconds",
  OUTBOX_BACKOFF_BASE: "200 millis",
  OUTBOX_BACKOFF_CAP: "1 second",
  OUTBOX_BACKOFF_JITTER: "0"
}

// --- Provider-side accounting -------------------------------------------------------------------------------------

export const sha256Hex = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex")

export interface KeyAccount {
  /** Requests that reached the provider under the family's keys (retries, replays and refusals included). */
  readonly requests: number
  /** Keys with no request at all. */
  readonly unsent: number
  /** Keys the provider accepted more than once (must be 0: the loopback deduplicates by key). */
  readonly acceptedTwice: number
  /** Keys never accepted. */
  readonly undelivered: number
  /** Keys whose requests did not all carry the same body. */
  readonly changedBodies: number
  /**
   * Per key, requests that may have reached a real provider (answered 2xx, or left without an answer: hung, dropped,
   * abandoned by the client) beyond the first: what a provider has to deduplicate. A 5xx answer delivered nothing.
   */
  readonly duplicates: number
}

const mayHaveDelivered = (r: RecordedRequest) =>
  (r.status !== undefined && is2xx(r.status)) || r.handling === "hung" || r.handling === "dropped" || r.clientAborted

/** How the provider saw one family's idempotency keys. */
export const accountKeys = (
  keys: ReadonlyArray<string>,
  requests: ReadonlyArray<RecordedRequest>,
  deliveries: ReadonlyArray<{ readonly idempotencyKey: string | undefined }>
): KeyAccount => {
  const wanted = new Set(keys)
  const byKey = new Map<string, Array<RecordedRequest>>()
  for (const r of requests) {
    if (r.idempotencyKey === undefined || !wanted.has(r.idempotencyKey)) continue
    byKey.set(r.idempotencyKey, [...(byKey.get(r.idempotencyKey) ?? []), r])
  }
  const accepted = new Map<string, number>()
  for (const d of deliveries) if (d.idempotencyKey !== undefined && wanted.has(d.idempotencyKey)) accepted.set(d.idempotencyKey, (accepted.get(d.idempotencyKey) ?? 0) + 1)
  let requestsCount = 0
  let changedBodies = 0
  let duplicates = 0
  for (const sent of byKey.values()) {
    requestsCount += sent.length
    if (new Set(sent.map((r) => sha256Hex(r.body))).size > 1) changedBodies++
    duplicates += Math.max(0, sent.filter(mayHaveDelivered).length - 1)
  }
  return {
    requests: requestsCount,
    unsent: keys.filter((k) => !byKey.has(k)).length,
    acceptedTwice: [...accepted.values()].filter((n) => n > 1).length,
    undelivered: keys.filter((k) => !accepted.has(k)).length,
    changedBodies,
    duplicates
  }
}

export const describeAccount = (a: KeyAccount, keys: number) =>
  `${keys} keys, ${a.requests} requests, ${keys - a.undelivered} delivered, ${a.acceptedTwice} accepted twice, ${a.changedBodies} changed bodies, ${a.duplicates} duplicates`

// --- Read-only SQL ------------------------------------------------------------------------------------------------

/** A small pool on the world's database, for reads (and the one allowed fault injection, a table rename). */
export const readPool = (world: World) => connect(world.databaseUrl, { maxConnections: 2 })

/** A process's exit code, or "none" when it has not exited within `timeout`. */
export const exitOf = (process: BackendProcess, timeout: Duration.DurationInput = "30 seconds") =>
  process.exitCode(timeout).pipe(Effect.orElseSucceed(() => "none" as const))

export const seconds = (ms: number) => Math.round(ms / 100) / 10
