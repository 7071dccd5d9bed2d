import { Canonical, positiveDuration, ProviderHttp } from "@delivery/core"
import { Config, Effect, Either, Layer, Redacted, Schema } from "effect"

// One transactional-mail adapter for every family that sends mail (password reset, receipts, team
// applications), on core's provider adapter: endpoint checked at start-up, no redirects followed, a stable
// Idempotency-Key, a timeout, and the four outcome classes each family maps to its own rule.

/** A mailbox as providers take it: an address, optionally with a display name. */
const Address = Schema.String.pipe(
  Schema.maxLength(254),
  Schema.pattern(/^[^\s@<>",;]+@[^\s@<>",;]+$/, { message: () => "Expected an e-mail address" })
)

const NoLineBreak = Schema.String.pipe(Schema.pattern(/^[^\r\n]*$/, { message: () => "Expected no line break" }))

export const Mailbox = Schema.Struct({
  address: Address,
  name: Schema.optional(NoLineBreak.pipe(Schema.maxLength(200)))
})
export type Mailbox = typeof Mailbox.Type

/**
 * One message. Bounded so a rendered mail stays small, and no header-like field can carry a line break
 * (no header injection through a subject or a display name).
 */
export const MailMessage = Schema.Struct({
  from: Mailbox,
  to: Mailbox,
  subject: NoLineBreak.pipe(Schema.minLength(1), Schema.maxLength(998)),
  text: Schema.String.pipe(Schema.maxLength(100_000)),
  html: Schema.String.pipe(Schema.maxLength(200_000))
}).annotations({ identifier: "MailMessage", parseOptions: { onExcessProperty: "error" } })
export type MailMessage = typeof MailMessage.Type

const formatMailbox = (mailbox: Mailbox) =>
  mailbox.name === undefined ? mailbox.address : `${JSON.stringify(mailbox.name)} <${mailbox.address}>`

/**
 * The request body, in the shape common transactional mail APIs take (`from`, `to`, `subject`, `text`,
 * `html`), as RFC 8785 canonical JSON: the same message always gives the same bytes, so a family can
 * fingerprint exactly what it sends (`fingerprint`).
 */
export const renderBody = (message: MailMessage): string =>
  // Strings and an array of strings only: canonicalization cannot fail on them.
  Either.getOrThrow(Canonical.canonicalString({
    from: formatMailbox(message.from),
    to: [formatMailbox(message.to)],
    subject: message.subject,
    text: message.text,
    html: message.html
  }))

/** Text for an HTML part: the five characters HTML gives meaning to, as entities. */
export const escapeHtml = (text: string) =>
  text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;").replaceAll("\"", "&quot;").replaceAll("'", "&#39;")

/** SHA-256 (lower-case hex) of the exact body `send` would post for `message`. */
export const fingerprint = (message: MailMessage): string => Canonical.sha256Hex(renderBody(message))

/**
 * A message frozen for later attempts: its canonical JSON and the fingerprint of the body the provider receives.
 * Every retry sends exactly what was frozen (spec 002: receipts' frozen notification, team applications' envelopes).
 */
export const freezeMessage = (message: MailMessage) => ({
  envelope: Either.getOrThrow(Canonical.canonicalString(Schema.encodeSync(MailMessage)(message))),
  sha256: fingerprint(message)
})

const decodeMessage = Schema.decodeUnknownEither(Schema.parseJson(MailMessage))

/** A frozen envelope back to its message; Left when it is not one or does not match its fingerprint. */
export const thawMessage = (envelope: string, sha256: string): Either.Either<MailMessage, "envelope-invalid"> =>
  Either.flatMap(
    Either.mapLeft(decodeMessage(envelope), () => "envelope-invalid" as const),
    (message) => fingerprint(message) === sha256 ? Either.right(message) : Either.left("envelope-invalid" as const)
  )

/** Where and how to reach the provider. The token is a secret: redacted, never logged, never in an error. */
export const MailProviderConfig = Config.all({
  endpoint: ProviderHttp.endpointConfig("MAIL_PROVIDER_URL"),
  // Validated before `nested`, so a refusal names the variable.
  token: Config.redacted().pipe(
    Config.validate({ message: "Expected a non-empty token", validation: (token) => Redacted.value(token).length > 0 }),
    Config.nested("MAIL_PROVIDER_TOKEN")
  ),
  timeout: positiveDuration("MAIL_PROVIDER_TIMEOUT", "10 seconds")
})
export type MailProviderSettings = Config.Config.Success<typeof MailProviderConfig>

/**
 * `send(message, idempotencyKey)` posts the message once with `Authorization: Bearer <token>` and never fails:
 * the outcome is `Delivered` (2xx: the provider's acknowledgement, not proof of inbox delivery), `Rejected`
 * (4xx, permanent), `Ambiguous` (timeout or interruption after sending) or `Temporary` (5xx, transport). A
 * retry must pass the same idempotency key.
 */
const makeMailer = (settings: MailProviderSettings) =>
  Effect.gen(function* () {
    const provider = yield* ProviderHttp.ProviderHttp
    const send = (message: MailMessage, idempotencyKey: string) =>
      provider.send({
        endpoint: settings.endpoint,
        idempotencyKey,
        body: renderBody(message),
        contentType: "application/json",
        headers: { authorization: `Bearer ${Redacted.value(settings.token)}` },
        timeout: settings.timeout
      })
    return { send } as const
  })

export class Mailer extends Effect.Service<Mailer>()("@delivery/mail/Mailer", {
  effect: Effect.flatMap(MailProviderConfig, makeMailer)
}) {
  /** With core's fetch-based provider adapter. */
  static readonly layerFetch = Mailer.Default.pipe(Layer.provide(ProviderHttp.ProviderHttp.layerFetch))

  /** With settings already read (the backend validates them once at start-up) and the fetch-based adapter. */
  static readonly layerWith = (settings: MailProviderSettings) =>
    Layer.effect(Mailer, Effect.map(makeMailer(settings), (mailer) => Mailer.make(mailer))).pipe(
      Layer.provide(ProviderHttp.ProviderHttp.layerFetch)
    )
}
