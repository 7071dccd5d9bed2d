import { AccountId, ApiKeyName, Email, Identity, Permission, TenantId } from "@delivery/identity"
import { ENQUEUE_PERMISSION } from "@delivery/outbox"
import { OPERATOR_TOKEN } from "@delivery/testing"
import { Effect, Redacted, Schedule } from "effect"
import { createPrivateKey, createPublicKey, randomBytes } from "node:crypto"

export interface ConsoleAnswer {
  readonly status: number
  readonly headers: Headers
  readonly body: string
}

/** A browser-like client of the console: plain fetch, its own cookie, no redirects followed. */
export const consoleClient = (baseUrl: string) => {
  let cookie: string | undefined
  const request = (method: "GET" | "POST", path: string, options: { form?: Record<string, string>; headers?: Record<string, string> } = {}) =>
    Effect.promise(async (): Promise<ConsoleAnswer> => {
      const headers: Record<string, string> = { connection: "close", ...options.headers }
      if (cookie !== undefined) headers.cookie = cookie
      if (options.form !== undefined) headers["content-type"] = "application/x-www-form-urlencoded"
      const response = await fetch(`${baseUrl}${path}`, {
        method,
        headers,
        redirect: "manual",
        ...(options.form === undefined ? {} : { body: new URLSearchParams(options.form).toString() })
      })
      const set = response.headers.get("set-cookie")
      if (set !== null) {
        const [pair] = set.split(";")
        cookie = pair!.endsWith("=") ? undefined : pair
      }
      return { status: response.status, headers: response.headers, body: await response.text() }
    })
  return {
    get: (path: string, headers?: Record<string, string>) => request("GET", path, headers === undefined ? {} : { headers }),
    post: (path: string, form: Record<string, string>, headers?: Record<string, string>) =>
      request("POST", path, headers === undefined ? { form } : { form, headers }),
    cookie: () => cookie,
    setCookie: (value: string | undefined) => {
      cookie = value
    }
  }
}
export type ConsoleClient = ReturnType<typeof consoleClient>

/** Signs in with the operator token; the client keeps the session cookie. */
export const signedIn = (baseUrl: string) =>
  Effect.gen(function* () {
    const client = consoleClient(baseUrl)
    const answer = yield* client.post("/console/sign-in", { token: OPERATOR_TOKEN })
    if (answer.status !== 303) return yield* Effect.dieMessage(`sign-in answered ${answer.status}`)
    return { client, setCookie: answer.headers.get("set-cookie")! }
  })

/** The session's CSRF token as a page's forms carry it. */
export const csrfOf = (page: string) => /name="csrf" value="([^"]+)"/.exec(page)?.[1]

/** The value of `data-<name>` on the element that also carries `data-<key>="<value>"`. */
export const dataWithin = (page: string, key: string, value: string, name: string) =>
  new RegExp(`data-${key}="${value}"[^>]*>[\\s\\S]*?data-${name}="([^"]*)"`).exec(page)?.[1]

/** The items count shown for one family and state on the overview. */
export const overviewCount = (page: string, family: string, state: string) => {
  const card = new RegExp(`<article class="family" data-family="${family}">([\\s\\S]*?)</article>`).exec(page)?.[1] ?? ""
  const row = new RegExp(`<tr data-state="${state}">[\\s\\S]*?<td class="num count">(\\d+)</td>`).exec(card)?.[1]
  return row === undefined ? undefined : Number(row)
}

/** An Ed25519 key as SIGNER_KEYS takes it and its raw public key. */
export const signingKey = () => {
  const seed = randomBytes(32)
  const privateKey = createPrivateKey({
    key: Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), seed]),
    format: "der",
    type: "pkcs8"
  })
  const publicKey = createPublicKey(privateKey).export({ format: "jwk" }).x!
  return { seed: seed.toString("base64url"), publicKey }
}

const json = (baseUrl: string, method: string, path: string, bearer: string, body?: unknown) =>
  Effect.promise(async () => {
    const response = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json", connection: "close" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
    const text = await response.text()
    return { status: response.status, body: text === "" ? undefined : JSON.parse(text) }
  })

/**
 * A tenant whose project `web` delivers to `endpoint`: account, an API key allowed to enqueue, its public key
 * registered. `enqueue(n)` enqueues one message with sequence n and returns its id.
 */
export const outboxTenant = (baseUrl: string, tenant: string, key: { readonly publicKey: string }, endpoint: string) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    const id = TenantId.make(tenant)
    yield* identity.createTenant(id)
    const account = yield* identity.createAccount({ tenant: id, email: `ops@${tenant}.example` as Email })
    const apiKey = yield* identity.issueApiKey({
      tenant: id,
      account: account as AccountId,
      kind: "agent",
      name: ApiKeyName.make("console-test"),
      permissions: [Permission.make(ENQUEUE_PERMISSION)]
    })
    const registered = yield* json(baseUrl, "POST", `/operator/tenants/${tenant}/signing-keys`, OPERATOR_TOKEN, { keyId: "k1", publicKey: key.publicKey })
    if (registered.status !== 201) return yield* Effect.dieMessage(`key registration answered ${registered.status}`)
    const target = yield* json(baseUrl, "PUT", `/operator/outbox/targets/${tenant}/web`, OPERATOR_TOKEN, { endpoint })
    if (target.status !== 200) return yield* Effect.dieMessage(`target registration answered ${target.status}`)
    const enqueue = (sequence: number, payloadMarker: string) =>
      Effect.flatMap(
        json(baseUrl, "POST", "/api/outbox/messages", Redacted.value(apiKey.token), {
          envelope: {
            type: "controlplane/v1",
            route: { tenant, project: "web", producer: "scheduler" },
            eventId: `evt-console-${String(sequence).padStart(6, "0")}`,
            idempotencyKey: `console:${sequence}`,
            sequence,
            createdAt: "2026-12-03T12:00:00Z",
            schemaVersion: 1,
            metadata: { kind: "task.proposed", subject: payloadMarker, attributes: {} }
          },
          maxAttempts: 1
        }),
        (answer) => answer.status === 201 ? Effect.succeed(answer.body.message.id as string) : Effect.dieMessage(`enqueue answered ${answer.status}`)
      )
    return { apiKey: Redacted.value(apiKey.token), enqueue }
  })

/** Retries `effect` until `done` holds (at most 30 seconds). */
export const eventually = <A, E, R>(effect: Effect.Effect<A, E, R>, done: (value: A) => boolean) =>
  effect.pipe(
    Effect.filterOrFail(done, () => "not yet" as const),
    Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("30 seconds"))),
    Effect.orDie
  )
