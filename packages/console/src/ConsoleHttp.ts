import { HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { requestCorrelationId } from "@delivery/core"
import { Effect, Option, type ParseResult, Predicate, Schema } from "effect"
import { PeerLimit } from "@delivery/identity"
import { type ConsoleSession, ConsoleSessions } from "./ConsoleSessions.ts"
import { csrfMatches, isCrossSite, securityHeaders, SESSION_COOKIE } from "./ConsoleSecurity.ts"
import { type Html } from "./Html.ts"
import { ConsoleSections, layout, refusalBody, type Viewer } from "./Layout.ts"

/** A console refusal: the HTTP status, the stable reason, and what the page says. */
export class ConsoleRefusal extends Schema.TaggedError<ConsoleRefusal>()("ConsoleRefusal", {
  status: Schema.Number,
  reason: Schema.String,
  message: Schema.String
}) {}

export const refuse = (status: number, reason: string, message: string) => Effect.fail(new ConsoleRefusal({ status, reason, message }))

/** An HTML answer with the console's security headers. */
export const htmlResponse = (body: Html, options: { readonly status?: number; readonly headers?: Record<string, string> } = {}) =>
  HttpServerResponse.text(body.html, {
    status: options.status ?? 200,
    contentType: "text/html; charset=utf-8",
    headers: { ...securityHeaders, ...options.headers }
  })

export const redirect = (location: string) =>
  HttpServerResponse.empty({ status: 303, headers: { ...securityHeaders, location } })

const isHtmx = (request: HttpServerRequest.HttpServerRequest) => request.headers["hx-request"] === "true"

/** A refusal as the page (or, for htmx, the fragment) that says it, with its reason and correlation id. */
export const refusalResponse = (refusal: ConsoleRefusal, viewer?: Viewer) =>
  Effect.gen(function* () {
    const correlationId = yield* requestCorrelationId
    const request = yield* HttpServerRequest.HttpServerRequest
    const body = refusalBody({ reason: refusal.reason, message: refusal.message, correlationId })
    const headers: Record<string, string> = { "x-console-refusal": refusal.reason }
    // An htmx refresh of an ended session takes the whole page to the sign-in form instead of swapping a refusal in.
    if (refusal.status === 401 && isHtmx(request)) headers["hx-redirect"] = "/console/sign-in"
    return htmlResponse(isHtmx(request) ? body : layout({ title: refusal.message, viewer, body }), {
      status: refusal.status,
      headers
    })
  })

/** Storage failures of any package the console reads: a 503 that changed nothing. */
const isStorageFailure = (error: unknown) =>
  Predicate.hasProperty(error, "_tag") && typeof error._tag === "string" &&
  /StorageUnavailable$|^StorageFailure$/.test(error._tag)

/**
 * The one way a console handler ends: its answer, or the page of its refusal. Refusals of the services it calls
 * (not found, conflicts, a dead letter that is not dead) keep their own stable reason; storage failures are 503.
 */
export const answer = <E, R>(
  handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>,
  viewer?: Viewer
) =>
  handler.pipe(
    Effect.catchAll((error: unknown) => {
      if (error instanceof ConsoleRefusal) return refusalResponse(error, viewer)
      if (isStorageFailure(error)) {
        return refusalResponse(new ConsoleRefusal({ status: 503, reason: "storage-unavailable", message: "The database could not be reached; nothing was changed" }), viewer)
      }
      const reason = Predicate.hasProperty(error, "reason") && typeof error.reason === "string" ? error.reason : "refused"
      const status = reason.endsWith("not-found") || reason === "key-unknown" ? 404 : reason.endsWith("-invalid") ? 400 : 409
      return refusalResponse(new ConsoleRefusal({ status, reason, message: `Refused: ${reason}` }), viewer)
    })
  )

/** The peer's identity budget (429 with Retry-After when spent, 503 when its store is unreachable). */
export const admitPeer = Effect.gen(function* () {
  const peers = yield* PeerLimit
  const request = yield* HttpServerRequest.HttpServerRequest
  yield* peers.admit(request).pipe(
    Effect.catchTags({
      IdentityRateLimited: () => refuse(429, "rate-limited", "Too many requests from this address; try again later"),
      IdentityStorageUnavailable: () => refuse(503, "storage-unavailable", "The request limit could not be checked; nothing was changed")
    })
  )
})

const sessionToken = Effect.map(HttpServerRequest.HttpServerRequest, (request) => Option.fromNullable(request.cookies[SESSION_COOKIE]))

/** The request's live session, or a refusal: a page request is sent to the sign-in form, anything else gets 401. */
export const requireSession = Effect.gen(function* () {
  const sessions = yield* ConsoleSessions
  const token = yield* sessionToken
  // A presented cookie costs a database lookup: the peer pays for it from the identity budget every bearer check
  // spends, so random cookies cannot buy unbounded lookups.
  if (Option.isSome(token)) yield* admitPeer
  const session = Option.isSome(token) ? yield* sessions.resolve(token.value) : Option.none<ConsoleSession>()
  if (Option.isNone(session)) {
    return yield* refuse(401, Option.isSome(token) ? "session-expired" : "session-missing", "Sign in to use the console")
  }
  const signedIn: SignedIn = { ...session.value, sections: yield* ConsoleSections }
  return signedIn
})

/** A live session as the pages see it: who, until when, its CSRF token and the navigation. */
export type SignedIn = ConsoleSession & Viewer

/** A page for signed-in operators: without a session, a browser's GET is redirected to the sign-in form. */
export const signedInPage = <E, R>(page: (session: SignedIn) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const session = yield* Effect.either(requireSession)
    if (session._tag === "Left") {
      if (session.left instanceof ConsoleRefusal && session.left.status === 401 && !isHtmx(request)) {
        return redirect("/console/sign-in")
      }
      return yield* answer(Effect.fail(session.left))
    }
    return yield* answer(page(session.right), session.right)
  })

const CsrfForm = Schema.Struct({ csrf: Schema.String.pipe(Schema.maxLength(128)) })

/**
 * A state-changing request: a live session, the same site, and the session's CSRF token in the form. Each
 * refusal changes nothing and says which check refused.
 */
export const signedInAction = <A, I extends Record<string, string | ReadonlyArray<string> | undefined>, E, R>(
  form: Schema.Schema<A, I>,
  action: (session: SignedIn, fields: A) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (isCrossSite(request)) return yield* answer(refuse(403, "cross-site-request", "Refused: the request did not come from a console page"))
    const session = yield* Effect.either(requireSession)
    if (session._tag === "Left") return yield* answer(Effect.fail(session.left))
    const viewer = session.right
    return yield* answer(
      Effect.gen(function* () {
        const params = yield* request.urlParamsBody.pipe(Effect.mapError(() => new ConsoleRefusal({ status: 400, reason: "request-invalid", message: "Refused: the form could not be read" })))
        const record = Object.fromEntries(params)
        const csrf = yield* Schema.decodeUnknown(CsrfForm)(record).pipe(Effect.option)
        if (Option.isNone(csrf) || !csrfMatches(csrf.value.csrf, viewer.csrf)) {
          return yield* refuse(403, "csrf-token-invalid", "Refused: the form's CSRF token is missing or wrong")
        }
        const fields = yield* Schema.decodeUnknown(form)(record).pipe(
          Effect.mapError((_: ParseResult.ParseError) => new ConsoleRefusal({ status: 400, reason: "request-invalid", message: "Refused: the form's values are invalid" }))
        )
        return yield* action(viewer, fields)
      }),
      viewer
    )
  })

const invalidRequest = () =>
  new ConsoleRefusal({ status: 400, reason: "request-invalid", message: "Refused: the address names something the console cannot show" })

/** The route's path parameters and query, decoded by closed schemas; anything else is 400 `request-invalid`. */
export const pathParams = <A, I extends Readonly<Record<string, string | undefined>>>(schema: Schema.Schema<A, I>) =>
  HttpRouter.schemaPathParams(schema).pipe(Effect.mapError(invalidRequest))

/** An empty query value (a filters form's field left blank, "any") is dropped before decoding. */
export const queryParams = <A, I>(schema: Schema.Schema<A, I>) =>
  Effect.flatMap(HttpServerRequest.ParsedSearchParams, (params) =>
    Schema.decodeUnknown(schema)(Object.fromEntries(Object.entries(params).filter(([, value]) => value !== "")))).pipe(
      Effect.mapError(invalidRequest)
    )
