import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Role } from "./Config.ts"

/** One readiness check. `reason` is a stable code or a list of migration names, never a secret or raw driver text. */
export const Check = Schema.Struct({
  ok: Schema.Boolean,
  reason: Schema.optional(Schema.String)
})

export const WorkersCheck = Schema.Struct({
  ok: Schema.Boolean,
  /** False in the ingress role: it never starts delivery workers. */
  enabled: Schema.Boolean,
  running: Schema.Array(Schema.String),
  notRunning: Schema.Array(Schema.Struct({ name: Schema.String, status: Schema.String }))
})

export const ReadyChecks = Schema.Struct({
  database: Check,
  migrations: Check,
  workers: WorkersCheck
})
export type ReadyChecks = typeof ReadyChecks.Type

export class Alive extends Schema.Class<Alive>("Alive")({
  status: Schema.Literal("alive")
}) {}

export class Ready extends Schema.Class<Ready>("Ready")({
  status: Schema.Literal("ready"),
  role: Role,
  checks: ReadyChecks
}) {}

export class NotReady extends Schema.TaggedError<NotReady>()("NotReady", {
  status: Schema.Literal("not-ready"),
  role: Role,
  /** Names of the checks that failed: `database`, `migrations`, `workers`. */
  failed: Schema.Array(Schema.String),
  checks: ReadyChecks
}) {}

export class HealthApi extends HttpApiGroup.make("health")
  .add(
    HttpApiEndpoint.get("health", "/health")
      .addSuccess(Alive)
      .annotate(OpenApi.Description, "Liveness: 200 whenever the process serves HTTP.")
  )
  .add(
    HttpApiEndpoint.get("ready", "/ready")
      .addSuccess(Ready)
      .addError(NotReady, { status: 503 })
      .annotate(
        OpenApi.Description,
        "Readiness: 200 when the database answers, every migration is applied and the role's workers run; otherwise 503 naming the failed checks."
      )
  )
  .annotate(OpenApi.Title, "Health")
{}
