import { type Context, Effect, Layer } from "effect"

/**
 * Builds `group` in `only` the services it declares, rather than in every service of the backend: HttpApiBuilder
 * merges the context a group was built in into the context of each of its requests, and Effect copies and compares
 * that context entry by entry for every span and service provided while the request runs. The type of `only` must
 * cover the group's requirements, so a service the group reads cannot be left out.
 */
export const builtInOnly = <ROut, E, RIn>(group: Layer.Layer<ROut, E, RIn>, only: (context: Context.Context<NoInfer<RIn>>) => Context.Context<NoInfer<RIn>>) =>
  Layer.scopedContext(
    Effect.gen(function* () {
      const scope = yield* Effect.scope
      // The backend's memo map: a layer the group shares with the rest (HttpApiBuilder.Router.Live) is built once.
      const memoMap = yield* Layer.CurrentMemoMap
      const services = only(yield* Effect.context<RIn>())
      return yield* Effect.mapInputContext(Layer.buildWithMemoMap(group, memoMap, scope), (_: Context.Context<never>) => services)
    })
  )
