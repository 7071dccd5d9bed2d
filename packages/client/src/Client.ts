import { FetchHttpClient, HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Api } from "@delivery/backend"
import { Effect, FiberRef, Option, Redacted } from "effect"
import { globalValue } from "effect/GlobalValue"

/**
 * Where the backend is and which bearer to send: the operator token for `/operator/...` routes, an API key
 * for `/api/...`, a device credential for the inbox. The token is redacted until the request is built.
 */
export interface ClientOptions {
  readonly baseUrl: string
  readonly token?: Redacted.Redacted<string> | undefined
}

/** What the producer reads of an answer besides its body. */
export interface AnswerHead {
  readonly status: number
  readonly retryAfter: Option.Option<string>
}

/**
 * The status and `Retry-After` header of the last answer this fiber received. HttpApiClient decodes an
 * answer from its body alone, and an answer whose body is not the API's (a gateway's 502, 503 or 504 page)
 * becomes a decoding error without its status; the producer needs both, so every answer leaves them here on
 * its way through.
 */
export const lastAnswer = globalValue(
  Symbol.for("@delivery/client/Client/lastAnswer"),
  () => FiberRef.unsafeMake<Option.Option<AnswerHead>>(Option.none())
)

/**
 * A typed client of the whole API, derived from the backend's own `HttpApi` definition: every route is a
 * method (`client.provisioning.createTenant({ payload })`), every declared refusal a typed error, every
 * answer decoded by the schema the server encodes it with. Needs an `HttpClient` (`FetchHttpClient.layer`
 * works on Bun and on Node 20).
 */
export const makeClient = (options: ClientOptions) =>
  HttpApiClient.make(Api, {
    baseUrl: options.baseUrl,
    transformClient: (client) =>
      client.pipe(
        HttpClient.mapRequest((request) =>
          options.token === undefined ? request : HttpClientRequest.bearerToken(request, Redacted.value(options.token))),
        HttpClient.tap((response) =>
          FiberRef.set(lastAnswer, Option.some({ status: response.status, retryAfter: Option.fromNullable(response.headers["retry-after"]) })))
      )
  })

export type DeliveryClient = Effect.Effect.Success<ReturnType<typeof makeClient>>

/** `makeClient` with the platform's fetch: no other dependency. */
export const makeFetchClient = (options: ClientOptions) => Effect.provide(makeClient(options), FetchHttpClient.layer)
