import { describe, expect, it } from "@effect/vitest"
import { Either, ParseResult, Schema } from "effect"
import { escapeHtml, fingerprint, freezeMessage, MailMessage, thawMessage } from "../src/index.ts"

// The mail adapter's pure rules (docs/mail.md): what a message may hold, the HTML escape the families' templates use,
// and a frozen message, which every retry of receipts and team applications sends as it was frozen.

const message = Schema.decodeUnknownSync(MailMessage)({
  from: { address: "no-reply@acme.example", name: "Acme" },
  to: { address: "bob@example.com" },
  subject: "Your receipt",
  text: "Thank you.",
  html: "<p>Thank you.</p>"
})
const encoded = Schema.encodeSync(MailMessage)(message)

/** The refusal of `input` as one text: the schema's tree of problems. */
const refusal = (input: unknown): string =>
  Either.match(Schema.decodeUnknownEither(MailMessage)(input), {
    onLeft: (error) => ParseResult.TreeFormatter.formatErrorSync(error),
    onRight: () => "accepted"
  })

describe("mail messages (spec 002: one mail adapter for every family)", () => {
  it("an address is the whole field: text before or after it (a bracket, a second mailbox) is refused and named as not an e-mail address", () => {
    for (const address of ["<bob@example.com", "bob@example.com>", "bob@example.com, eve@example.com", "bob@example.com eve", "Bob <bob@example.com>"]) {
      const text = refusal({ ...encoded, to: { address } })
      expect(text, address).toContain("Expected an e-mail address")
      expect(text, address).toMatch(/^MailMessage/)
    }
    expect(refusal({ ...encoded, to: { address: "bob.o'neil+news@sub.example.com" } })).toBe("accepted")
  })

  it("a line break in a display name or the subject is refused and named as a line break", () => {
    expect(refusal({ ...encoded, to: { address: "bob@example.com", name: "Bob\r\nBcc: eve@example.com" } })).toContain("Expected no line break")
    expect(refusal({ ...encoded, subject: "Receipt\nBcc: eve@example.com" })).toContain("Expected no line break")
  })

  it("escapeHtml writes the five characters HTML gives meaning to as entities, the ampersand first so that nothing is escaped twice", () => {
    expect(escapeHtml(`<a href="x" title='y'>Tom & Jerry</a>`)).toBe("&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;Tom &amp; Jerry&lt;/a&gt;")
    expect(escapeHtml("&lt;")).toBe("&amp;lt;")
    expect(escapeHtml("plain text")).toBe("plain text")
  })
})

describe("a frozen message (spec 002: a retry sends the same envelope)", () => {
  it("freezeMessage gives the message's canonical JSON and the fingerprint of the body the provider receives; thawMessage gives the message back", () => {
    const frozen = freezeMessage(message)
    expect(frozen.envelope).toBe(
      "{\"from\":{\"address\":\"no-reply@acme.example\",\"name\":\"Acme\"},\"html\":\"<p>Thank you.</p>\",\"subject\":\"Your receipt\",\"text\":\"Thank you.\",\"to\":{\"address\":\"bob@example.com\"}}"
    )
    expect(frozen.sha256).toBe(fingerprint(message))
    expect(thawMessage(frozen.envelope, frozen.sha256)).toEqual(Either.right(message))
  })

  it("thawMessage refuses, as envelope-invalid, an envelope changed after it was frozen, another fingerprint, text that is not JSON and JSON that is not a message", () => {
    const frozen = freezeMessage(message)
    const changed = frozen.envelope.replace("Your receipt", "Your refund")
    expect(thawMessage(changed, frozen.sha256)).toEqual(Either.left("envelope-invalid"))
    expect(thawMessage(frozen.envelope, fingerprint({ ...message, subject: "Your refund" }))).toEqual(Either.left("envelope-invalid"))
    expect(thawMessage("{\"from\":", frozen.sha256)).toEqual(Either.left("envelope-invalid"))
    const extra = JSON.stringify({ ...encoded, bcc: "eve@example.com" })
    expect(thawMessage(extra, frozen.sha256)).toEqual(Either.left("envelope-invalid"))
  })
})
