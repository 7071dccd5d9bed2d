import { HttpApiBuilder, HttpApiScalar } from "@effect/platform"
import { CloudConsoleRoutesLive, ConsoleRoutesLive, ConsoleSessions } from "@delivery/console"
import {
  Authentication,
  AuthenticationLive,
  IdentityHttpLive,
  OperatorAuthenticationLive,
  OperatorCredentialLive,
  PeerLimitLive,
  ProvisioningHttpLive,
  SessionsHttpLive
} from "@delivery/identity"
import { SignerHttpLive } from "@delivery/signer"
import { OutboxHttpLive, OutboxOperatorHttpLive } from "@delivery/outbox"
import { PasswordResetHttpLive, ResetMailOperatorHttpLive } from "@delivery/reset-mail"
import { ReceiptsHttpLive, ReceiptsOperatorHttpLive } from "@delivery/receipts"
import { TeamApplicationsHttpLive, TeamApplicationsOperatorHttpLive } from "@delivery/team-applications"
import { EnvelopeInbox, EnvelopeInboxHttpLive, InboxStreamsHttpLive } from "@delivery/envelope-inbox"
import { IdleWakeConnectorsHttpLive, IdleWakeHttpLive, IdleWakeOperatorHttpLive } from "@delivery/idle-wake"
import { Context, Layer } from "effect"
import { Api } from "./Api.ts"
import { builtInOnly } from "./GroupContext.ts"
import { HealthHttpLive } from "./HealthHttp.ts"
import { requestInvalid } from "./RequestInvalid.ts"

/** The inbox's ingest route, the hottest of the API: its handler needs the inbox and the bearer middleware. */
const InboxIngestLive = builtInOnly(EnvelopeInboxHttpLive, Context.pick(HttpApiBuilder.Router, EnvelopeInbox, Authentication))

/**
 * Handlers for every group of `Api`. A new group adds its handler layer here (one line), next to its
 * `.add(...)` in `Api.ts`; an API-level middleware such as authentication is provided here too.
 */
export const ApiLive = HttpApiBuilder.api(Api).pipe(
  Layer.provide(HealthHttpLive),
  Layer.provide(IdentityHttpLive),
  Layer.provide(ProvisioningHttpLive),
  Layer.provide(SessionsHttpLive),
  Layer.provide(PasswordResetHttpLive),
  Layer.provide(ResetMailOperatorHttpLive),
  Layer.provide(ReceiptsHttpLive),
  Layer.provide(ReceiptsOperatorHttpLive),
  Layer.provide(TeamApplicationsHttpLive),
  Layer.provide(TeamApplicationsOperatorHttpLive),
  Layer.provide(InboxIngestLive),
  Layer.provide(InboxStreamsHttpLive),
  Layer.provide(SignerHttpLive),
  Layer.provide(OutboxOperatorHttpLive),
  Layer.provide(OutboxHttpLive),
  Layer.provide(IdleWakeHttpLive),
  Layer.provide(IdleWakeOperatorHttpLive),
  Layer.provide(IdleWakeConnectorsHttpLive),
  // Both bearer middlewares share one PeerLimitLive, so tenant and operator attempts count against one budget per peer.
  Layer.provide(AuthenticationLive),
  Layer.provide(OperatorAuthenticationLive)
)

/** API-level middleware of the edge: decode errors leave as `RequestInvalid`, which quotes nothing the client sent. */
export const EdgeMiddlewareLive = HttpApiBuilder.middleware(Api, requestInvalid(Api))

/** `/openapi.json` and a Scalar page at `/docs`; the Scalar script is inlined, so the page needs no CDN. */
export const DocsLive = Layer.mergeAll(
  HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" }),
  HttpApiScalar.layer({ path: "/docs" })
)

/**
 * The operator console at `/console` (packages/console), on the same router and edge as the API. Its sign-in
 * admits peers against the same `PeerLimitLive` as the bearer middlewares, so the console gives no second budget
 * for guessing the operator token.
 */
const consoleOf = <E, R>(routes: Layer.Layer<never, E, R>) =>
  routes.pipe(
    Layer.provide(ConsoleSessions.Default),
    Layer.provide(OperatorCredentialLive),
    Layer.provide(PeerLimitLive)
  )

export const ConsoleLive = consoleOf(ConsoleRoutesLive)

/** The cloud role's console (its stacks and broker events), on its operator listener, with the same sign-in. */
export const CloudConsoleLive = consoleOf(CloudConsoleRoutesLive)
