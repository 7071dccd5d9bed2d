import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { Api } from "./Api.ts"
import { Alive } from "./HealthApi.ts"
import { Readiness } from "./Readiness.ts"

const alive = new Alive({ status: "alive" })

export const HealthHttpLive = HttpApiBuilder.group(Api, "health", (handlers) =>
  Effect.gen(function* () {
    const readiness = yield* Readiness
    return handlers
      // Liveness never touches the database: a slow database must not get a serving process restarted.
      .handle("health", () => Effect.succeed(alive))
      .handle("ready", () => readiness.check)
  }))
