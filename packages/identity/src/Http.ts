import { HttpApi, HttpApiBuilder } from "@effect/platform"
import { IdentityApi } from "./Api.ts"
import { CurrentIdentity } from "./Authentication.ts"

/**
 * The id of the backend's HttpApi. A group's handlers are registered against an
 * API by id and group name, so this package builds its layer against an API with
 * the same id that contains only its own group; the backend's
 * `HttpApi.make("delivery").add(IdentityApi)…` picks it up.
 */
export const deliveryApiId = "delivery" as const

const IdentityOnlyApi = HttpApi.make(deliveryApiId).add(IdentityApi)

/** Handlers, one call deep. Requires the `Authentication` middleware implementation (`AuthenticationLive`). */
export const IdentityHttpLive = HttpApiBuilder.group(
  IdentityOnlyApi,
  "identity",
  (handlers) => handlers.handle("whoami", () => CurrentIdentity)
)
