import { HttpApi, HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect, Layer } from "effect"
import { deliveryApiId } from "./Http.ts"
import { Identity } from "./Identity.ts"
import { PeerLimit, PeerLimitLive } from "./PeerLimit.ts"
import { SessionsApi } from "./SessionsApi.ts"
import { SignInLimit, SignInLimitLive } from "./SignInLimit.ts"

const SessionsOnlyApi = HttpApi.make(deliveryApiId).add(SessionsApi)

const handlers = HttpApiBuilder.group(SessionsOnlyApi, "sessions", (handlers) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    const peers = yield* PeerLimit
    const addresses = yield* SignInLimit
    return handlers.handle("signIn", ({ payload }) =>
      Effect.gen(function* () {
        // Before any hashing: the same per-peer budget as every bearer check, so guessing passwords here
        // costs what guessing tokens costs.
        yield* peers.admit(yield* HttpServerRequest.HttpServerRequest)
        yield* addresses.admit(payload.tenant, payload.email)
        const session = yield* identity.signIn(payload)
        yield* Effect.logInfo("session issued").pipe(Effect.annotateLogs({ tenant: session.tenant, account: session.account }))
        return session
      }))
  }))

/** Handlers, sharing `PeerLimitLive` (one value, so one counter per peer) with the bearer middlewares. */
export const SessionsHttpLive = handlers.pipe(Layer.provide(PeerLimitLive), Layer.provide(SignInLimitLive))
