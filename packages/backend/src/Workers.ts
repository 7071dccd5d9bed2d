import { Context, Effect, Layer } from "effect"
import { AppConfig } from "./Config.ts"

/** Present once the role's workers are running; the HTTP server depends on it, so it starts after them. */
export class Workers extends Context.Tag("@delivery/backend/Workers")<
  Workers,
  { readonly enabled: boolean; readonly count: number }
>() {}

/**
 * Builds `workers` in the `backend` role only: the `ingress` role never builds them (spec 002), so none of
 * their layers, configuration or fibers exist in an ingress process.
 */
export const WorkersLive = <R>(workers: ReadonlyArray<Layer.Layer<never, never, R>>) =>
  Layer.unwrapEffect(
    Effect.map(AppConfig, ({ role }) => {
      if (role === "ingress") {
        return Layer.effect(
          Workers,
          Effect.as(Effect.logInfo("role ingress: delivery workers are not started"), { enabled: false, count: 0 })
        )
      }
      const all = workers.reduce<Layer.Layer<never, never, R>>((acc, worker) => Layer.merge(acc, worker), Layer.empty)
      return Layer.effect(
        Workers,
        Effect.as(Effect.logInfo(`role backend: ${workers.length} worker layer(s) started`), {
          enabled: true,
          count: workers.length
        })
      ).pipe(Layer.provide(all))
    })
  )
