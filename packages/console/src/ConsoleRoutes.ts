import { FileSystem, HttpApiBuilder, type HttpRouter, type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { type QueueViews, repositoryRootOf, type WorkerRegistry } from "@delivery/core"
import { type PeerLimit } from "@delivery/identity"
import { ResetMailRepo, ResetRequests } from "@delivery/reset-mail"
import { Effect, Layer, Schema } from "effect"
import { createRequire } from "node:module"
import { join } from "node:path"
import { htmlResponse, redirect, signedInAction, signedInPage } from "./ConsoleHttp.ts"
import { type Html, html } from "./Html.ts"
import { securityHeaders } from "./ConsoleSecurity.ts"
import { BACKEND_SECTIONS, ConsoleSections, layout, type Section } from "./Layout.ts"
import { makeOutboxPages } from "./OutboxPages.ts"
import { makeSigningKeyPages } from "./SigningKeyPages.ts"
import { makeStreamPages } from "./StreamPages.ts"
import { makeConnectorEventPages } from "./ConnectorEventPages.ts"
import { makeReceiptEffectPages } from "./ReceiptEffectPages.ts"
import { makeResetMailPages } from "./ResetMailPages.ts"
import { makeTeamNotificationPages } from "./TeamNotificationPages.ts"
import { overviewSection } from "./Overview.ts"
import { type ConsoleSessions } from "./ConsoleSessions.ts"
import { makeSignIn } from "./SignIn.ts"

// Found from the repository's root, not from this module: under `bun run start` every module's URL is the bundle's.
const packageDir = join(repositoryRootOf(import.meta.url), "packages/console")
const require = createRequire(join(packageDir, "package.json"))

export type ConsoleServices = ConsoleSessions | QueueViews | WorkerRegistry | PeerLimit

/** What a console handler may need once `withServices` has provided the shared services and the navigation. */
type Handler<A, E> = Effect.Effect<A, E, ConsoleServices | ConsoleSections | HttpRouter.RouteContext | HttpServerRequest.HttpServerRequest | HttpServerRequest.ParsedSearchParams>

export type WithServices = <A, E>(handler: Handler<A, E>) => Effect.Effect<A, E, HttpRouter.RouteContext | HttpServerRequest.HttpServerRequest | HttpServerRequest.ParsedSearchParams>

/** What a role adds to the overview, below its queue families and workers: a section that refreshes itself. */
export interface RolePages<E> {
  readonly overview?: Effect.Effect<Html, E>
}

/** A role's own pages: registered on the console's router, each handler wrapped by `withServices`. */
export type PageRoutes<E, R> = (
  router: Router,
  withServices: WithServices
) => Effect.Effect<RolePages<unknown> | void, E, R>

type Router = HttpRouter.HttpRouter.Service<unknown, HttpRouter.HttpRouter.DefaultServices>

/** A family's list and item pages, each with its live section. */
export interface ListAndDetail {
  readonly list: Handler<HttpServerResponse.HttpServerResponse, never>
  readonly listLive: Handler<HttpServerResponse.HttpServerResponse, never>
  readonly detail: Handler<HttpServerResponse.HttpServerResponse, never>
  readonly detailLive: Handler<HttpServerResponse.HttpServerResponse, never>
}

/** Registers `list` (and its `/live`) and `item` (and its `/live`): the four routes every family's pages have. */
export const listAndDetailRoutes = (
  router: Router,
  withServices: WithServices,
  paths: { readonly list: string; readonly item: string },
  pages: ListAndDetail
) =>
  Effect.all([
    router.get(paths.list as HttpRouter.PathInput, withServices(pages.list)),
    router.get(`${paths.list}/live` as HttpRouter.PathInput, withServices(pages.listLive)),
    router.get(paths.item as HttpRouter.PathInput, withServices(pages.detail)),
    router.get(`${paths.item}/live` as HttpRouter.PathInput, withServices(pages.detailLive))
  ], { discard: true })

/** The console's static files, read once at start-up: htmx from its npm package, the stylesheet from this package. */
const assets = Effect.gen(function* () {
  const fs = yield* FileSystem.FileSystem
  const htmx = yield* fs.readFileString(require.resolve("htmx.org/dist/htmx.min.js"))
  const css = yield* fs.readFileString(join(packageDir, "assets/console.css"))
  const icon = yield* fs.readFileString(join(packageDir, "assets/favicon.svg"))
  const asset = (body: string, contentType: string) =>
    HttpServerResponse.text(body, {
      contentType,
      headers: { ...securityHeaders, "cache-control": "public, max-age=3600" }
    })
  return {
    htmx: asset(htmx, "text/javascript; charset=utf-8"),
    css: asset(css, "text/css; charset=utf-8"),
    icon: asset(icon, "image/svg+xml")
  }
})

/**
 * The operator console of one role under `/console`, added to its router next to its API: the assets, sign-in and
 * sign-out, the overview of the role's queue families and workers, then the role's own pages and navigation.
 * Needs `QueueViews`, `WorkerRegistry`, the operator credential, the peer limit and the session store, and what
 * the role's pages need.
 */
export const consoleRoutes = <E, R>(sections: ReadonlyArray<Section>, pages: PageRoutes<E, R>) => HttpApiBuilder.Router.use((router) =>
  Effect.gen(function* () {
    const files = yield* assets
    const signIn = yield* makeSignIn
    // The services every handler uses, taken once here: a route's handler may need only the request itself.
    const context = yield* Effect.context<ConsoleServices>()
    const withServices: WithServices = (handler) =>
      Effect.provide(handler, context).pipe(Effect.provideService(ConsoleSections, sections))
    // Registered first: a role's extra overview section is known once its pages are made.
    const role = (yield* pages(router, withServices)) ?? {}
    const extra = role.overview ?? Effect.succeed(html``)
    const overview = overviewSection

    yield* router.get("/console/assets/htmx.min.js", Effect.succeed(files.htmx))
    yield* router.get("/console/assets/console.css", Effect.succeed(files.css))
    yield* router.get("/console/assets/favicon.svg", Effect.succeed(files.icon))
    yield* router.get("/console", Effect.succeed(redirect("/console/overview")))
    yield* router.get("/console/sign-in", signIn.show)
    yield* router.post("/console/sign-in", withServices(signIn.submit))
    yield* router.post("/console/sign-out", withServices(signedInAction(Schema.Struct({}), () => signIn.signOut)))

    yield* router.get("/console/overview", withServices(signedInPage((session) =>
      Effect.map(Effect.all([overview, extra]), ([section, more]) =>
        htmlResponse(layout({ title: "Overview", current: "/console/overview", viewer: session, body: html`${section}${more}` }))))))
    yield* router.get("/console/overview/live", withServices(signedInPage(() => Effect.map(overview, (section) => htmlResponse(section)))))
  })
)

/**
 * The backend role's console: its delivery families' pages. Needs the family services it shows and acts on
 * (`Outbox`, `EnvelopeInbox`, `Signer`, `Receipts`, `TeamApplications`, `ConnectorEventInbox`), `Identity` (a replay
 * floor is refused for a tenant that does not exist) and, for the reset-mail pages, `PasswordResets`.
 */
export const ConsoleRoutesLive = consoleRoutes(BACKEND_SECTIONS, (router, withServices) =>
  Effect.gen(function* () {
    const outbox = yield* makeOutboxPages
    yield* listAndDetailRoutes(router, withServices, { list: "/console/outbox", item: "/console/outbox/:tenant/:project/:id" }, outbox)
    yield* router.get("/console/outbox/:tenant/:project/:id/redrive", withServices(outbox.confirmRedrive))
    yield* router.post("/console/outbox/:tenant/:project/:id/redrive", withServices(outbox.redrive))
    const streams = yield* makeStreamPages
    yield* listAndDetailRoutes(router, withServices, { list: "/console/streams", item: "/console/streams/:tenant/:project/:producer" }, streams)
    yield* router.get("/console/streams/:tenant/:project/:producer/replay-floor", withServices(streams.confirmRaise))
    yield* router.post("/console/streams/:tenant/:project/:producer/replay-floor", withServices(streams.raiseFloor))
    const keys = yield* makeSigningKeyPages
    yield* router.get("/console/signing-keys", withServices(keys.list))
    yield* router.get("/console/signing-keys/live", withServices(keys.listLive))
    yield* router.get("/console/signing-keys/:tenant/rotate", withServices(keys.rotateForm))
    yield* router.post("/console/signing-keys/:tenant/rotate", withServices(keys.rotate))
    yield* router.get("/console/signing-keys/:tenant/:keyId/revoke", withServices(keys.confirmRevoke))
    yield* router.post("/console/signing-keys/:tenant/:keyId/revoke", withServices(keys.revoke))
    const resetMail = yield* makeResetMailPages
    yield* listAndDetailRoutes(router, withServices, { list: "/console/reset-mail", item: "/console/reset-mail/:tenant/:id" }, resetMail)
    const receiptEffects = yield* makeReceiptEffectPages
    yield* listAndDetailRoutes(router, withServices, { list: "/console/receipt-effects", item: "/console/receipt-effects/:tenant/:id" }, receiptEffects)
    const teamNotifications = yield* makeTeamNotificationPages
    yield* listAndDetailRoutes(router, withServices, { list: "/console/team-notifications", item: "/console/team-notifications/:tenant/:id" }, teamNotifications)
    const connectorEvents = yield* makeConnectorEventPages
    yield* listAndDetailRoutes(router, withServices, { list: "/console/connector-events", item: "/console/connector-events/:id" }, connectorEvents)
  })
).pipe(
  // The backend's HTTP layer has no ResetRequests of its own (only its queue view and pending-work probe build one):
  // the console builds its own over the shared pool, as the reset-mail operator routes do with their repository.
  Layer.provide(ResetRequests.Default.pipe(Layer.provide(ResetMailRepo.Default)))
)
