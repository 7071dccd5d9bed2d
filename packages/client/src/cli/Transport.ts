import { FetchHttpClient, HttpClient, HttpClientError } from "@effect/platform"
import { Duration, Effect, FiberRef, Layer, Option } from "effect"

/** No single request waits longer: a silent backend is unavailable (exit 4), and the producer retries it. */
export const REQUEST_TIMEOUT = Duration.seconds(30)

/**
 * The `x-correlation-id` of the last answer this fiber received. Every answer carries it; refusals that have no
 * `correlationId` member of their own are reported with it.
 */
export const lastCorrelationId = FiberRef.unsafeMake<Option.Option<string>>(Option.none())

/**
 * The platform's fetch, bounded by `REQUEST_TIMEOUT`. A timeout is a transport failure (`RequestError`), so it
 * is classified like a refused connection and the producer sends the same envelope again.
 */
export const TransportLive = Layer.effect(
  HttpClient.HttpClient,
  Effect.map(HttpClient.HttpClient, (client) =>
    client.pipe(
      HttpClient.transform((response, request) =>
        Effect.timeoutFail(response, {
          duration: REQUEST_TIMEOUT,
          onTimeout: () =>
            new HttpClientError.RequestError({
              request,
              reason: "Transport",
              description: `no answer within ${Duration.format(REQUEST_TIMEOUT)}`
            })
        })),
      HttpClient.tap((response) => FiberRef.set(lastCorrelationId, Option.fromNullable(response.headers["x-correlation-id"])))
    ))
).pipe(Layer.provide(FetchHttpClient.layer))
