import { escapeHtml, type Mailbox, type MailMessage } from "@delivery/mail"
import type { Audience, SubmitApplication } from "./Domain.ts"

const quoted = (message: string) => message.split("\n").map((line) => `> ${line}`)

/**
 * Both notifications of a submission, rendered once, at submission: the envelopes the outbox keeps and every
 * attempt sends unchanged. The applicant's confirms the application; the team's carries the applicant's contact
 * and message.
 */
export const renderNotifications = (
  sender: Mailbox,
  submission: SubmitApplication
): ReadonlyArray<{ readonly audience: Audience; readonly message: MailMessage }> => {
  const { applicant, message, team } = submission
  const applicantMail: MailMessage = {
    from: sender,
    to: { address: applicant.email, name: applicant.name },
    subject: `Your application to ${team.name}`,
    text: [
      `Hello ${applicant.name},`,
      "",
      `your application to join ${team.name} has been received and passed on to the team.`,
      "They will answer you at this address."
    ].join("\n"),
    html: [
      `<p>Hello ${escapeHtml(applicant.name)},</p>`,
      `<p>your application to join ${escapeHtml(team.name)} has been received and passed on to the team.</p>`,
      "<p>They will answer you at this address.</p>"
    ].join("\n")
  }
  const teamMail: MailMessage = {
    from: sender,
    to: { address: team.email, name: team.name },
    subject: `New application from ${applicant.name}`,
    text: [
      `${applicant.name} <${applicant.email}> applied to join ${team.name}.`,
      ...(message.length > 0 ? ["", ...quoted(message)] : [])
    ].join("\n"),
    html: [
      `<p>${escapeHtml(applicant.name)} &lt;${escapeHtml(applicant.email)}&gt; applied to join ${escapeHtml(team.name)}.</p>`,
      ...(message.length > 0 ? [`<blockquote>${escapeHtml(message).replaceAll("\n", "<br>")}</blockquote>`] : [])
    ].join("\n")
  }
  return [{ audience: "applicant", message: applicantMail }, { audience: "team", message: teamMail }]
}
