import { HttpApi, HttpApiBuilder } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { CurrentIdentity, deliveryApiId, Permission, requirePermission, withHeader } from "@delivery/identity"
import { Effect, Option } from "effect"
import { TeamApplicationsApi, TeamApplicationsOperatorApi } from "./Api.ts"
import { ApplicationNotFound, TEAM_APPLICATIONS_PERMISSION, TeamApplicationsUnavailable } from "./Domain.ts"
import { type Submitter, TeamApplications } from "./TeamApplications.ts"

const TeamApplicationsOnlyApi = HttpApi.make(deliveryApiId).add(TeamApplicationsApi).add(TeamApplicationsOperatorApi)

const permission = Permission.make(TEAM_APPLICATIONS_PERMISSION)

const unavailable = (reason: TeamApplicationsUnavailable["reason"]) =>
  Effect.flatMap(requestCorrelationId, (correlationId) => Effect.fail(new TeamApplicationsUnavailable({ reason, correlationId })))

const storageUnavailable = { TeamApplicationsStorageUnavailable: () => unavailable("storage-unavailable") }

/** The API key and the request: who submitted, for the audit row. */
const submitter = Effect.gen(function* () {
  yield* requirePermission(permission)
  const identity = yield* CurrentIdentity
  const correlationId = yield* requestCorrelationId
  // requirePermission admits API keys only.
  const actor = identity._tag === "ApiKey" ? `api-key:${identity.keyId}` : `account:${identity.account}`
  return { tenant: identity.tenant, account: identity.account, actor, correlationId } satisfies Submitter
})

const notFound = Effect.flatMap(requestCorrelationId, (correlationId) => Effect.fail(new ApplicationNotFound({ reason: "application-not-found", correlationId })))

export const TeamApplicationsHttpLive = HttpApiBuilder.group(TeamApplicationsOnlyApi, "teamApplications", (handlers) =>
  Effect.gen(function* () {
    const applications = yield* TeamApplications
    return handlers
      .handle("submit", ({ payload }) =>
        Effect.gen(function* () {
          const by = yield* submitter
          const { replayed, response } = yield* applications.submit(payload, by).pipe(
            Effect.catchTags({ ...storageUnavailable, SenderUnconfigured: () => unavailable("team-applications-unconfigured") })
          )
          if (replayed) yield* withHeader("idempotent-replayed", "true")
          return response
        }))
      .handle("application", ({ path }) =>
        Effect.gen(function* () {
          const by = yield* submitter
          const state = yield* applications.state(by.tenant, path.id).pipe(Effect.catchTags(storageUnavailable))
          return Option.isSome(state) ? state.value : yield* notFound
        }))
  }))

export const TeamApplicationsOperatorHttpLive = HttpApiBuilder.group(TeamApplicationsOnlyApi, "teamApplicationsOperator", (handlers) =>
  Effect.gen(function* () {
    const applications = yield* TeamApplications
    return handlers
      .handle("summary", () => applications.summary.pipe(Effect.catchTags(storageUnavailable)))
      .handle("applicationState", ({ path }) =>
        Effect.gen(function* () {
          const state = yield* applications.state(path.tenant, path.id).pipe(Effect.catchTags(storageUnavailable))
          return Option.isSome(state) ? state.value : yield* notFound
        }))
  }))
