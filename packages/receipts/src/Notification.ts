import { escapeHtml, freezeMessage, type Mailbox, type MailMessage, thawMessage } from "@delivery/mail"
import type { NotifyData } from "./ReceiptsRepo.ts"

/** Minor units as a decimal amount with two places (receipts record what was paid; no currency arithmetic here). */
const amount = (minor: number, currency: string) => `${(minor / 100).toFixed(2)} ${currency}`


/** The payer's notification, rendered from the receipt as it is at the first attempt. */
export const renderNotification = (sender: Mailbox, data: NotifyData): MailMessage => {
  const lines = data.lines.map((line) =>
    `${line.description}: ${line.quantity} x ${amount(Number(line.unit_minor), data.currency)} = ${amount(Number(line.amount_minor), data.currency)}`)
  const total = amount(data.total_minor, data.currency)
  const paid = data.paid_at.toISOString()
  return {
    from: sender,
    to: { address: data.payer_email, name: data.payer_name },
    subject: `Receipt ${data.reference}`,
    text: [
      `Hello ${data.payer_name},`,
      "",
      `this is your receipt ${data.reference} for a payment of ${total} made on ${paid}.`,
      "",
      ...lines,
      "",
      `Total: ${total}`,
      ...(data.files > 0 ? ["", `${data.files} document(s) are kept with this receipt.`] : []),
      "",
      "This mail records a payment made elsewhere; it does not charge you anything."
    ].join("\n"),
    html: [
      `<p>Hello ${escapeHtml(data.payer_name)},</p>`,
      `<p>this is your receipt ${escapeHtml(data.reference)} for a payment of ${escapeHtml(total)} made on ${escapeHtml(paid)}.</p>`,
      `<ul>${lines.map((line) => `<li>${escapeHtml(line)}</li>`).join("")}</ul>`,
      `<p>Total: ${escapeHtml(total)}</p>`,
      "<p>This mail records a payment made elsewhere; it does not charge you anything.</p>"
    ].join("\n")
  }
}

/** The frozen form (the mail adapter's): canonical JSON of the message and the fingerprint of the body sent. */
export const freezeNotification = freezeMessage

/** A stored envelope back to its message; Left when it is not one or does not match its fingerprint. */
export const thawNotification = thawMessage
