import { Args, Command } from "@effect/cli"
import { Effect, Schema } from "effect"
import { answer } from "./Answers.ts"
import { tenant } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { group } from "./Group.ts"
import { table, time } from "./Output.ts"

// A team application's two notifications and their delivery states, and the counts by state (spec 002,
// docs/operations.md "Command line"). The routes never answer with an address or an envelope, so neither can
// print here.

const id = Args.text({ name: "application" }).pipe(
  Args.withSchema(Schema.String.pipe(
    Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, { message: () => "an application id (a lower-case UUID)" })
  )),
  Args.withDescription("application id, as the submission answered it")
)

const get = Command.make("get", { tenant, id }, ({ id, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.teamApplicationsOperator.applicationState({ path: { tenant, id } }).pipe(
      Effect.flatMap(answer("teamApplicationsOperator", "applicationState", (application) => [
        `team application ${application.id} to team ${application.team} of ${application.tenant}, submitted ${time(application.createdAt)}`,
        ...table(
          ["effect", "audience", "state", "attempts", "next attempt", "lease ends", "outcome", "failures", "last error"],
          application.notifications.map((notification) => [
            notification.effectId,
            notification.audience,
            notification.state,
            String(notification.attempts),
            time(notification.nextAttemptAt),
            time(notification.leaseExpiresAt),
            time(notification.outcomeAt),
            String(notification.failures),
            notification.lastError ?? "-"
          ])
        )
      ]))
    )
  })).pipe(Command.withDescription("A team application's notifications with their delivery states (no addresses, no envelopes)"))

const summary = Command.make("summary", {}, () =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.teamApplicationsOperator.summary().pipe(
      Effect.flatMap(answer("teamApplicationsOperator", "summary", ({ endedQueueItems, states }) => [
        ...table(["state", "count"], states.map((row) => [row.state, String(row.count)])),
        `ended queue items: ${endedQueueItems}`
      ]))
    )
  })).pipe(Command.withDescription("Team-application notifications counted by delivery state, and the ended queue items still kept"))

export const teamApplications = group(
  "team-applications",
  "Team applications: each application's notifications and their delivery states, and the counts by state",
  [get, summary]
)
