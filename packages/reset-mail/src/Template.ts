import { escapeHtml, type Mailbox, type MailMessage } from "@delivery/mail"
import { Context, Layer, Redacted } from "effect"

/** What a reset mail is rendered from: live verification and account data and this process's settings. */
export interface ResetMailInput {
  readonly sender: Mailbox
  readonly origin: string
  readonly to: string
  readonly token: Redacted.Redacted<string>
  readonly expiresAt: Date
}

/**
 * The reset mail's template. Everything the mail says is in the rendered payload, so a changed template changes
 * the fingerprint and quarantines rows already attempted under the old one (spec 002); the version is part of
 * the text for the same reason.
 */
export class ResetTemplate extends Context.Tag("@delivery/reset-mail/ResetTemplate")<ResetTemplate, {
  readonly render: (input: ResetMailInput) => MailMessage
}>() {}


/** The link carries the token in its fragment, which browsers never send to a server or write to its logs. */
export const resetLink = (origin: string, token: Redacted.Redacted<string>) =>
  `${origin}/reset-password#token=${Redacted.value(token)}`

export const renderDefault = (input: ResetMailInput): MailMessage => {
  const link = resetLink(input.origin, input.token)
  const expires = input.expiresAt.toISOString()
  return {
    from: input.sender,
    to: { address: input.to },
    subject: "Reset your password",
    text: [
      "Someone asked to reset the password of the account with this address.",
      "",
      `To choose a new password, open this link before ${expires}:`,
      link,
      "",
      "If you did not ask for this, ignore this mail: your password stays as it is.",
      "",
      "(reset-mail template v1)"
    ].join("\n"),
    html: [
      "<p>Someone asked to reset the password of the account with this address.</p>",
      `<p>To choose a new password, open <a href="${escapeHtml(link)}">this link</a> before ${escapeHtml(expires)}.</p>`,
      "<p>If you did not ask for this, ignore this mail: your password stays as it is.</p>",
      "<!-- reset-mail template v1 -->"
    ].join("\n")
  }
}

export const ResetTemplateDefault = Layer.succeed(ResetTemplate, { render: renderDefault })
