import { expect, layer } from "@effect/vitest"
import { ProviderHttp } from "@delivery/core"
import { LoopbackProvider, LoopbackReply } from "@delivery/testing"
import { ConfigProvider, Duration, Effect, Either, Layer, Logger, Redacted, Schema } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { fingerprint, MailMessage, Mailer, renderBody } from "../src/index.ts"

// The shared mail adapter against a real loopback HTTP provider (docs/mail.md): the body and headers a
// provider receives, the four outcome classes, and what is never sent, logged or kept.

const TOKEN = `mail-${randomBytes(24).toString("base64url")}`

const message = Schema.decodeUnknownSync(MailMessage)({
  from: { address: "no-reply@acme.example", name: "Acme" },
  to: { address: "bob@example.com" },
  subject: "Reset your password",
  text: "Open https://acme.example/reset#token to choose a new password.",
  html: "<p>Open <a href=\"https://acme.example/reset#token\">this link</a> to choose a new password.</p>"
})

const mailerAt = (url: string, extra: Record<string, string> = {}) =>
  Mailer.layerFetch.pipe(
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({
      MAIL_PROVIDER_URL: url,
      MAIL_PROVIDER_TOKEN: TOKEN,
      MAIL_PROVIDER_TIMEOUT: "300 millis",
      ...extra
    })))))
  )

const withMailer = <A, E>(use: (mailer: Mailer) => Effect.Effect<A, E>) =>
  Effect.gen(function* () {
    const provider = yield* LoopbackProvider
    return yield* Effect.flatMap(Mailer, use).pipe(Effect.provide(mailerAt(provider.urlFor("/emails"))))
  })

layer(LoopbackProvider.Default, { excludeTestServices: true })("the mail adapter against a loopback provider", (it) => {
  it.effect("a message is one POST of canonical JSON (from, to, subject, text, html) with the bearer token, the caller's Idempotency-Key and a JSON content type; its fingerprint is the SHA-256 of exactly the bytes the provider received", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      yield* provider.script({ times: 1, reply: LoopbackReply.status(202) })
      const outcome = yield* withMailer((mailer) => mailer.send(message, "reset-mail:42:1"))
      expect(outcome).toMatchObject({ _tag: "Delivered", status: 202 })
      const [request] = yield* provider.awaitRequests(1)
      expect(request).toMatchObject({ method: "POST", path: "/emails", idempotencyKey: "reset-mail:42:1" })
      expect(request!.headers["authorization"]).toBe(`Bearer ${TOKEN}`)
      expect(request!.headers["content-type"]).toMatch(/^application\/json/)
      expect(JSON.parse(request!.bodyText)).toEqual({
        from: "\"Acme\" <no-reply@acme.example>",
        to: ["bob@example.com"],
        subject: "Reset your password",
        text: message.text,
        html: message.html
      })
      expect(fingerprint(message)).toBe(createHash("sha256").update(request!.body).digest("hex"))
      // A different message is a different fingerprint; the same message, the same one.
      expect(fingerprint({ ...message, subject: "Reset your password now" })).not.toBe(fingerprint(message))
      expect(fingerprint(Schema.decodeUnknownSync(MailMessage)(Schema.encodeSync(MailMessage)(message)))).toBe(fingerprint(message))
    }))

  it.effect("provider outcomes keep core's classes: 4xx Rejected, 5xx and a dropped connection Temporary, no answer within MAIL_PROVIDER_TIMEOUT Ambiguous; none of them carries the token, and no log line does", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const logs: Array<string> = []
      const capture = Logger.replace(Logger.defaultLogger, Logger.make(({ message, annotations }) => logs.push(JSON.stringify({ message, annotations }))))
      const outcomes = yield* withMailer((mailer) =>
        Effect.gen(function* () {
          const results: Array<unknown> = []
          for (const reply of [LoopbackReply.status(422), LoopbackReply.status(503, { retryAfter: "7" }), LoopbackReply.drop(), LoopbackReply.hang()]) {
            yield* provider.script({ times: 1, reply })
            results.push(yield* mailer.send(message, `key-${results.length}`))
          }
          return results
        })
      ).pipe(Effect.provide(capture))
      expect(outcomes).toMatchObject([
        { _tag: "Rejected", code: "provider-4xx", status: 422 },
        { _tag: "Temporary", status: 503, retryAfter: "7" },
        { _tag: "Temporary" },
        { _tag: "Ambiguous", code: "provider-timeout" }
      ])
      expect(JSON.stringify(outcomes)).not.toContain(TOKEN)
      expect(logs.join("\n")).not.toContain(TOKEN)
    }))

  it.effect("configuration: an endpoint with credentials or a query, or a missing or empty token, stops the adapter from being built, naming the variable and never the token", () =>
    Effect.gen(function* () {
      const failure = (url: string, extra: Record<string, string> = {}) =>
        Effect.flip(Effect.provide(Mailer, mailerAt(url, extra))).pipe(Effect.map((error) => String(error)))
      expect(yield* failure("https://user:secret@mail.example/emails")).toContain("MAIL_PROVIDER_URL")
      expect(yield* failure("https://mail.example/emails?key=1")).toContain("MAIL_PROVIDER_URL")
      const empty = yield* failure("https://mail.example/emails", { MAIL_PROVIDER_TOKEN: "" })
      expect(empty).toContain("MAIL_PROVIDER_TOKEN")
      expect(empty).toContain("Expected a non-empty token")
      expect(yield* failure("https://mail.example/emails", { MAIL_PROVIDER_TIMEOUT: "soon" })).toContain("MAIL_PROVIDER_TIMEOUT")
      expect(empty).not.toContain(TOKEN)
    }))

  it.effect("Mailer.layerWith sends with settings read once elsewhere (the backend reads them at start-up): the same request as the configured adapter", () =>
    Effect.gen(function* () {
      const provider = yield* LoopbackProvider
      yield* provider.reset
      const settings = {
        endpoint: Either.getOrThrow(ProviderHttp.ProviderEndpoint.parse(provider.urlFor("/emails"))),
        token: Redacted.make(TOKEN),
        timeout: Duration.millis(300)
      }
      const outcome = yield* Effect.flatMap(Mailer, (mailer) => mailer.send(message, "receipt:7")).pipe(Effect.provide(Mailer.layerWith(settings)))
      expect(outcome).toMatchObject({ _tag: "Delivered" })
      const [request] = yield* provider.awaitRequests(1)
      expect(request).toMatchObject({ method: "POST", path: "/emails", idempotencyKey: "receipt:7" })
      expect(request!.headers["authorization"]).toBe(`Bearer ${TOKEN}`)
      expect(request!.bodyText).toBe(renderBody(message))
    }))

  it.effect("a message is closed and bounded: a line break in the subject or a display name (header injection), an unknown member, or a malformed address is refused before anything is sent", () =>
    Effect.sync(() => {
      const decode = Schema.decodeUnknownEither(MailMessage)
      const encoded = Schema.encodeSync(MailMessage)(message)
      for (const bad of [
        { ...encoded, subject: "Hello\r\nBcc: everyone@example.com" },
        { ...encoded, from: { address: "no-reply@acme.example", name: "Acme\nBcc: x@example.com" } },
        { ...encoded, bcc: "everyone@example.com" },
        { ...encoded, to: { address: "not an address" } },
        { ...encoded, subject: "" }
      ]) {
        expect(Either.isLeft(decode(bad)), JSON.stringify(bad)).toBe(true)
      }
      expect(Either.isRight(decode(encoded))).toBe(true)
    }))
})
