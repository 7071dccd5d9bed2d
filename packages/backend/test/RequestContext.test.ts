import {
  HttpApi,
  HttpApiBuilder,
  HttpApiEndpoint,
  HttpApiGroup,
  type HttpApp,
  type HttpRouter,
  HttpServer,
  HttpServerResponse
} from "@effect/platform"
import { BunHttpServer } from "@effect/platform-bun"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Schema } from "effect"
import { builtInOnly } from "../src/GroupContext.ts"
import { serveDraining } from "../src/HttpServer.ts"

/** A service of the caller's, like each of the backend's: handlers take theirs when they are built. */
class CallerService extends Context.Tag("test/CallerService")<CallerService, { readonly name: string }>() {}

/** A service the probe group's handlers read, as the inbox's read EnvelopeInbox. */
class GroupService extends Context.Tag("test/GroupService")<GroupService, { readonly name: string }>() {}

const contextKeys = Effect.map(Effect.context<never>(), (context) => [...context.unsafeMap.keys()].sort())

const ProbeApi = HttpApi.make("probe").add(
  HttpApiGroup.make("probe").add(HttpApiEndpoint.get("keys", "/keys").addSuccess(Schema.Struct({ keys: Schema.Array(Schema.String) })))
)

/** Answers with the keys of the context its handler runs in. */
const ProbeLive = HttpApiBuilder.group(ProbeApi, "probe", (handlers) =>
  Effect.gen(function* () {
    yield* GroupService
    return handlers.handle("keys", () => Effect.map(contextKeys, (keys) => ({ keys })))
  }))

/** The keys a request to the probe API's handler sees when the group is built from `group`, in a backend that also has CallerService. */
const handlerKeys = (group: Layer.Layer<HttpApiGroup.ApiGroup<"probe", "probe">, never, HttpApiBuilder.Router | GroupService>) =>
  Effect.gen(function* () {
    const { dispose, handler } = HttpApiBuilder.toWebHandler(
      HttpApiBuilder.api(ProbeApi).pipe(
        Layer.provide(group),
        Layer.provide([
          HttpApiBuilder.Router.Live,
          Layer.succeed(GroupService, { name: "group" }),
          Layer.succeed(CallerService, { name: "caller" })
        ]),
        Layer.merge(HttpServer.layerContext)
      )
    )
    yield* Effect.addFinalizer(() => Effect.promise(dispose))
    const answer = yield* Effect.promise(() => handler(new Request("http://localhost/keys")).then((r) => r.json() as Promise<{ keys: Array<string> }>))
    return answer.keys
  })

/** Answers with the keys of the context the request's fiber runs in; typed as an app of the router, as the backend's is. */
const app: HttpApp.Default<never, HttpRouter.HttpRouter.DefaultServices> = Effect.map(contextKeys, (keys) => HttpServerResponse.unsafeJson({ keys }))

describe("the context a request runs in", () => {
  it.scopedLive("a request's fiber starts in the router's services and the request alone, none of the caller's other services", () =>
    Effect.gen(function* () {
      const { url } = yield* serveDraining(app, {
        hostname: "127.0.0.1",
        port: 0,
        maxRequestBodySize: 1024,
        drainMs: 1000
      })
      const answer = yield* Effect.promise(() => fetch(`${url}/anything`).then((r) => r.json() as Promise<{ keys: Array<string> }>))
      // The router's services, the request, its scope and its server span: nothing of the caller's.
      expect(answer.keys).toEqual([
        "@effect/platform/Etag/Generator",
        "@effect/platform/FileSystem",
        "@effect/platform/HttpPlatform",
        "@effect/platform/HttpServerRequest",
        "@effect/platform/Path",
        "effect/ParentSpan",
        "effect/Scope"
      ])
    }).pipe(
      Effect.provide(Layer.succeed(CallerService, { name: "caller" })),
      Effect.provide(BunHttpServer.layerContext)
    ))

  it.scopedLive("a group built by builtInOnly runs its handlers in the services it declares, not in every service of the backend", () =>
    Effect.gen(function* () {
      const trimmed = yield* handlerKeys(builtInOnly(ProbeLive, Context.pick(HttpApiBuilder.Router, GroupService)))
      expect(trimmed).toContain("test/GroupService")
      expect(trimmed).not.toContain("test/CallerService")
      // Built as HttpApiBuilder.group leaves it, the handler's context holds every service the group was built in.
      const whole = yield* handlerKeys(ProbeLive)
      expect(whole).toContain("test/CallerService")
    }))
})
