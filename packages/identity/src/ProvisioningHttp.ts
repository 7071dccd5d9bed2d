import { HttpApi, HttpApiBuilder } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { Duration, Effect } from "effect"
import type { IdentityConflict, IdentityNotFound, PasswordRejected } from "./Domain.ts"
import { deliveryApiId } from "./Http.ts"
import { type Page, Identity, passwordMaxLength, passwordMinLength } from "./Identity.ts"
import { CurrentOperator, operatorActor } from "./OperatorAuthentication.ts"
import { PasswordRefused, ProvisioningApi, ProvisioningConflict, ProvisioningNotFound } from "./ProvisioningApi.ts"
import type { ChangeOutcome, ProvisioningActor } from "./Views.ts"

const ProvisioningOnlyApi = HttpApi.make(deliveryApiId).add(ProvisioningApi)

/** The operator and the request's correlation id: what the audit row records and the answer repeats. */
const attribution = Effect.all({
  actor: Effect.map(CurrentOperator, operatorActor),
  correlationId: requestCorrelationId
}) satisfies Effect.Effect<ProvisioningActor, never, CurrentOperator>

const notFoundReason = {
  tenant: "tenant-not-found",
  account: "account-not-found",
  "api-key": "api-key-not-found",
  "device-credential": "device-credential-not-found"
} as const

const conflictReason = { tenant: "tenant-exists", "account-email": "account-email-taken" } as const

type ServiceRefusal = IdentityNotFound | IdentityConflict | PasswordRejected
type WireRefusal = ProvisioningNotFound | ProvisioningConflict | PasswordRefused
/** Each service refusal becomes its wire refusal; every other error passes through. */
type Wire<E> = E extends IdentityNotFound ? ProvisioningNotFound
  : E extends IdentityConflict ? ProvisioningConflict
  : E extends PasswordRejected ? PasswordRefused
  : E

/** A service error in the wire shape: a stable reason and the correlation id, nothing the client sent. */
const toWire = (error: ServiceRefusal, correlationId: string): WireRefusal => {
  switch (error._tag) {
    case "IdentityNotFound":
      return new ProvisioningNotFound({ reason: notFoundReason[error.entity], correlationId })
    case "IdentityConflict":
      return new ProvisioningConflict({ reason: conflictReason[error.entity], correlationId })
    case "PasswordRejected":
      return new PasswordRefused({
        reason: error.reason === "too-short" ? "password-too-short" : "password-too-long",
        minLength: passwordMinLength,
        maxLength: passwordMaxLength,
        correlationId
      })
  }
}

const isServiceRefusal = (error: { readonly _tag: string }): error is ServiceRefusal =>
  error._tag === "IdentityNotFound" || error._tag === "IdentityConflict" || error._tag === "PasswordRejected"

const wire = <E extends { readonly _tag: string }>(error: E, correlationId: string) =>
  (isServiceRefusal(error) ? toWire(error, correlationId) : error) as Wire<E>

/** For reads: their refusals (an unknown tenant) in the wire shape. */
const withRefusals = <A, E extends { readonly _tag: string }, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, Wire<E>, R> =>
  Effect.flatMap(requestCorrelationId, (correlationId) => Effect.mapError(effect, (error) => wire(error, correlationId)))

/**
 * Runs `change` as the operator, logs it with its attribution and answers its refusals in the wire shape;
 * refusals change nothing and have no audit row.
 */
const asOperator = <A, E extends { readonly _tag: string }, R>(
  action: string,
  change: (by: ProvisioningActor) => Effect.Effect<A, E, R>
) =>
  Effect.gen(function* () {
    const by = yield* attribution
    return yield* change(by).pipe(
      Effect.tap(() => Effect.logInfo(`operator provisioning: ${action}`)),
      Effect.tapError((error) =>
        Effect.logInfo(`operator provisioning refused: ${action}`).pipe(Effect.annotateLogs({ refusal: error._tag }))),
      Effect.annotateLogs({ actor: by.actor }),
      Effect.mapError((error) => wire(error, by.correlationId))
    )
  })

/** The answer's outcome: the action's own word when it changed something, `unchanged` for a repeat. */
const outcomeAs = <W extends string>(word: W) => (outcome: ChangeOutcome): W | "unchanged" =>
  outcome === "applied" ? word : "unchanged"

const pageOf = (params: { readonly limit?: number | undefined; readonly after?: string | undefined }): Page => ({
  limit: params.limit ?? 100,
  after: params.after
})

const expiry = (seconds: number | undefined) => (seconds === undefined ? undefined : Duration.seconds(seconds))

/** Handlers, one call deep into `Identity`. Requires `OperatorAuthenticationLive` and `Identity`. */
export const ProvisioningHttpLive = HttpApiBuilder.group(ProvisioningOnlyApi, "provisioning", (handlers) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    return handlers
      .handle("createTenant", ({ payload }) =>
        asOperator("create tenant", (by) =>
          Effect.map(identity.createTenant(payload.id, by), (tenant) => ({ tenant, correlationId: by.correlationId }))))
      .handle("listTenants", ({ urlParams }) => identity.listTenants(pageOf(urlParams)))
      .handle("createAccount", ({ path, payload }) =>
        asOperator("create account", (by) =>
          Effect.map(
            identity.createAccountAs({ tenant: path.tenant, email: payload.email, password: payload.password }, by),
            (account) => ({ account, correlationId: by.correlationId })
          )))
      .handle("listAccounts", ({ path, urlParams }) => identity.listAccounts(path.tenant, pageOf(urlParams)).pipe(withRefusals))
      .handle("disableAccount", ({ path }) =>
        asOperator("disable account", (by) =>
          Effect.map(identity.setAccountEnabled(path.tenant, path.account, false, by), (changed) => ({
            account: changed.account,
            outcome: outcomeAs("disabled")(changed.outcome),
            correlationId: by.correlationId
          }))))
      .handle("enableAccount", ({ path }) =>
        asOperator("enable account", (by) =>
          Effect.map(identity.setAccountEnabled(path.tenant, path.account, true, by), (changed) => ({
            account: changed.account,
            outcome: outcomeAs("enabled")(changed.outcome),
            correlationId: by.correlationId
          }))))
      .handle("issueApiKey", ({ path, payload }) =>
        asOperator("issue api key", (by) =>
          Effect.map(
            identity.issueApiKeyAs({
              tenant: path.tenant,
              account: payload.account,
              kind: payload.kind,
              name: payload.name,
              permissions: payload.permissions,
              expiresIn: expiry(payload.expiresInSeconds)
            }, by),
            ({ token, ...apiKey }) => ({ apiKey, token, correlationId: by.correlationId })
          )))
      .handle("listApiKeys", ({ path, urlParams }) =>
        identity.listApiKeys(path.tenant, urlParams.account ?? null, pageOf(urlParams)).pipe(withRefusals))
      .handle("revokeApiKey", ({ path }) =>
        asOperator("revoke api key", (by) =>
          Effect.map(identity.revokeApiKey(path.tenant, path.id, by), (changed) => ({
            apiKey: changed.credential,
            outcome: outcomeAs("revoked")(changed.outcome),
            correlationId: by.correlationId
          }))))
      .handle("issueDeviceCredential", ({ path, payload }) =>
        asOperator("issue device credential", (by) =>
          Effect.map(
            identity.issueDeviceCredentialAs({
              tenant: path.tenant,
              account: payload.account,
              device: payload.device,
              expiresIn: expiry(payload.expiresInSeconds)
            }, by),
            ({ token, ...deviceCredential }) => ({ deviceCredential, token, correlationId: by.correlationId })
          )))
      .handle("listDeviceCredentials", ({ path, urlParams }) =>
        identity.listDeviceCredentials(path.tenant, urlParams.account ?? null, pageOf(urlParams)).pipe(withRefusals))
      .handle("revokeDeviceCredential", ({ path }) =>
        asOperator("revoke device credential", (by) =>
          Effect.map(identity.revokeDeviceCredential(path.tenant, path.id, by), (changed) => ({
            deviceCredential: changed.credential,
            outcome: outcomeAs("revoked")(changed.outcome),
            correlationId: by.correlationId
          }))))
  }))
