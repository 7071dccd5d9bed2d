import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Authentication, OperatorAuthentication, PermissionDenied, TenantId } from "@delivery/identity"
import { Schema } from "effect"
import {
  ApplicationId,
  ApplicationNotFound,
  ApplicationState,
  ApplicationSubmitted,
  CommandConflict,
  DeliverySummary,
  SubmitApplication,
  TeamApplicationsUnavailable
} from "./Domain.ts"

/** Team applications for a tenant's API keys with permission `team-applications:write`. Behind `Authentication`. */
export class TeamApplicationsApi extends HttpApiGroup.make("teamApplications")
  .add(
    HttpApiEndpoint.post("submit", "/api/team-applications")
      .setPayload(SubmitApplication)
      .addSuccess(ApplicationSubmitted, { status: 201 })
      .addError(CommandConflict, { status: 409 })
      .addError(PermissionDenied, { status: 403 })
      .addError(TeamApplicationsUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Submit a team application: the application, its command receipt, both notifications and their queue items in one transaction")
      .annotate(
        OpenApi.Description,
        "201 with the application and its two notifications (to the applicant and to the team; each effect id is the provider idempotency key). The same `commandId` with the same content answers the recorded response again (`idempotent-replayed: true`) and writes nothing; with other content 409 `command-id-reused`. 503 `team-applications-unconfigured` when this process has no TEAM_APPLICATION_FROM."
      )
  )
  .add(
    HttpApiEndpoint.get("application", "/api/team-applications/:id")
      .setPath(Schema.Struct({ id: ApplicationId }))
      .addSuccess(ApplicationState)
      .addError(ApplicationNotFound, { status: 404 })
      .addError(PermissionDenied, { status: 403 })
      .addError(TeamApplicationsUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "An application's notifications and their delivery states (no addresses, no envelopes)")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Team applications")
{}

/** Delivery states for operators, across tenants. Behind `OperatorAuthentication`. */
export class TeamApplicationsOperatorApi extends HttpApiGroup.make("teamApplicationsOperator")
  .add(
    HttpApiEndpoint.get("summary", "/operator/team-applications/summary")
      .addSuccess(DeliverySummary)
      .addError(TeamApplicationsUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "Notifications by delivery state (team_application_delivery_state), and the ended queue items still kept")
  )
  .add(
    HttpApiEndpoint.get("applicationState", "/operator/team-applications/:tenant/:id")
      .setPath(Schema.Struct({ tenant: TenantId, id: ApplicationId }))
      .addSuccess(ApplicationState)
      .addError(ApplicationNotFound, { status: 404 })
      .addError(TeamApplicationsUnavailable, { status: 503 })
      .annotate(OpenApi.Summary, "An application's notifications and their delivery states (no addresses, no envelopes)")
  )
  .middleware(OperatorAuthentication)
  .annotate(OpenApi.Title, "Team applications (operator)")
{}
