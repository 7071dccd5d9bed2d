import { describe, expect, it } from "@effect/vitest"
import { fingerprint, renderBody } from "@delivery/mail"
import { Either } from "effect"
import { freezeNotification, renderNotification, thawNotification } from "../src/Notification.ts"

// The payer's notification as first rendered (docs/receipts.md, "The effects queue"): pinned word for word, since
// what is frozen is exactly this; the frozen form thaws only to the same message.

const data = {
  reference: "R-2026-0042",
  currency: "EUR",
  total_minor: 25_350,
  paid_at: new Date("2026-11-30T12:00:00.000Z"),
  payer_name: "Bob <Payer> & Co",
  payer_email: "bob@example.com",
  lines: [
    { description: "Consulting", quantity: 2, unit_minor: 12_500, amount_minor: 25_000 },
    { description: "Tea", quantity: 1, unit_minor: 350, amount_minor: 350 }
  ],
  files: 2
}
const sender = { address: "receipts@acme.example", name: "Acme" }

describe("the receipt notification", () => {
  it("renders exactly this message: amounts in minor units as decimals with the currency, every line, the total, the documents kept, and that nothing is charged", () => {
    expect(renderNotification(sender, data)).toEqual({
      from: sender,
      to: { address: "bob@example.com", name: "Bob <Payer> & Co" },
      subject: "Receipt R-2026-0042",
      text: [
        "Hello Bob <Payer> & Co,",
        "",
        "this is your receipt R-2026-0042 for a payment of 253.50 EUR made on 2026-11-30T12:00:00.000Z.",
        "",
        "Consulting: 2 x 125.00 EUR = 250.00 EUR",
        "Tea: 1 x 3.50 EUR = 3.50 EUR",
        "",
        "Total: 253.50 EUR",
        "",
        "2 document(s) are kept with this receipt.",
        "",
        "This mail records a payment made elsewhere; it does not charge you anything."
      ].join("\n"),
      html: [
        "<p>Hello Bob &lt;Payer&gt; &amp; Co,</p>",
        "<p>this is your receipt R-2026-0042 for a payment of 253.50 EUR made on 2026-11-30T12:00:00.000Z.</p>",
        "<ul><li>Consulting: 2 x 125.00 EUR = 250.00 EUR</li><li>Tea: 1 x 3.50 EUR = 3.50 EUR</li></ul>",
        "<p>Total: 253.50 EUR</p>",
        "<p>This mail records a payment made elsewhere; it does not charge you anything.</p>"
      ].join("\n")
    })
    // Without documents the text is the same less the documents' line and its blank line.
    expect(renderNotification(sender, { ...data, files: 0 }).text)
      .toBe(renderNotification(sender, data).text.replace("\n\n2 document(s) are kept with this receipt.", ""))
  })

  it("the frozen envelope is the message's canonical JSON with the fingerprint of the body the provider receives; it thaws to the same message, and a tampered envelope or fingerprint does not thaw", () => {
    const message = renderNotification(sender, data)
    const frozen = freezeNotification(message)
    expect(frozen.sha256).toBe(fingerprint(message))
    expect(JSON.parse(frozen.envelope)).toEqual(message)
    const thawed = thawNotification(frozen.envelope, frozen.sha256)
    expect(Either.isRight(thawed) && renderBody(thawed.right)).toBe(renderBody(message))
    expect(thawNotification(frozen.envelope.replace("Consulting", "Consultinh"), frozen.sha256)).toEqual(Either.left("envelope-invalid"))
    expect(thawNotification(frozen.envelope, "0".repeat(64))).toEqual(Either.left("envelope-invalid"))
    expect(thawNotification("not json", frozen.sha256)).toEqual(Either.left("envelope-invalid"))
  })
})
