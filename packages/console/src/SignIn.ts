import { HttpServerRequest } from "@effect/platform"
import { OperatorCredential, PeerLimitConfig } from "@delivery/identity"
import { Effect, Option, Redacted, Schema } from "effect"
import { admitPeer, answer, htmlResponse, redirect, refuse } from "./ConsoleHttp.ts"
import { isCrossSite, isTls, SESSION_COOKIE, withoutSessionCookie, withSessionCookie } from "./ConsoleSecurity.ts"
import { ConsoleSessions } from "./ConsoleSessions.ts"
import { html } from "./Html.ts"
import { layout } from "./Layout.ts"

/** The actor the console's sessions write into audit rows: an operator, signed in through the console. */
export const CONSOLE_ACTOR = "operator:console"

const signInPage = layout({
  title: "Sign in",
  body: html`<section class="signin">
<h1>Operator sign-in</h1>
<p class="muted">Exchange the operator token (<code>OPERATOR_TOKEN</code>) for a console session. The token is sent once and never stored by the browser.</p>
<form method="post" action="/console/sign-in">
<label>Operator token <input type="password" name="token" autocomplete="off" required maxlength="512"></label>
<button type="submit">Sign in</button>
</form>
</section>`
})

const SignInForm = Schema.Struct({ token: Schema.String.pipe(Schema.maxLength(512)) })

export const makeSignIn = Effect.gen(function* () {
  const sessions = yield* ConsoleSessions
  const credential = yield* OperatorCredential
  const { trustedProxyHops } = yield* PeerLimitConfig

  const show = Effect.succeed(htmlResponse(signInPage))

  /**
   * The token is checked like the operator bearer: the peer's budget first (429 with Retry-After), then the
   * constant-time comparison. Only then does a session start; the cookie is the only thing the browser keeps.
   */
  const submit = answer(Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    if (isCrossSite(request)) return yield* refuse(403, "cross-site-request", "Refused: the request did not come from a console page")
    yield* admitPeer
    const form = yield* request.urlParamsBody.pipe(
      Effect.flatMap((params) => Schema.decodeUnknown(SignInForm)(Object.fromEntries(params))),
      Effect.option
    )
    if (Option.isNone(form)) return yield* refuse(400, "request-invalid", "Refused: the sign-in form could not be read")
    yield* credential.verify(form.value.token).pipe(
      Effect.catchTags({
        Unauthenticated: (failure) => refuse(401, failure.reason, "Sign-in refused: the operator token was not accepted"),
        OperatorAccessDisabled: (failure) => refuse(403, failure.reason, "Sign-in refused: operator access is disabled (OPERATOR_TOKEN is not set)")
      })
    )
    const started = yield* sessions.start(CONSOLE_ACTOR)
    yield* Effect.logInfo("console session started").pipe(Effect.annotateLogs({ actor: CONSOLE_ACTOR }))
    return withSessionCookie(redirect("/console/overview"), Redacted.value(started.token), {
      expiresAt: started.session.expiresAt,
      secure: isTls(request, trustedProxyHops)
    })
  }))

  /** Ends the session in the database, so its cookie signs nobody in even if it was copied. */
  const signOut = Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const token = request.cookies[SESSION_COOKIE]
    if (token !== undefined) yield* sessions.end(token)
    return withoutSessionCookie(redirect("/console/sign-in"), isTls(request, trustedProxyHops))
  })

  return { show, submit, signOut } as const
})
