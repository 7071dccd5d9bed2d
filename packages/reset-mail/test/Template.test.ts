import { describe, expect, it } from "@effect/vitest"
import { fingerprint } from "@delivery/mail"
import { Redacted } from "effect"
import { renderDefault, resetLink } from "../src/Template.ts"

// The reset mail as the provider receives it (docs/reset-mail.md): every word is part of the fingerprint, so the
// exact text is pinned here; a change to it is a template change, which quarantines rows attempted under the old one.

const token = Redacted.make(`reset_${"A".repeat(43)}`)
const input = {
  sender: { address: "no-reply@acme.example", name: "Acme" },
  origin: "https://app.acme.example",
  to: "bob@example.com",
  token,
  expiresAt: new Date("2026-12-01T10:00:00.000Z")
}

describe("the reset mail template", () => {
  it("renders exactly this message: the link carries the token in its fragment, the expiry is stated, the template version is in both parts", () => {
    expect(renderDefault(input)).toEqual({
      from: { address: "no-reply@acme.example", name: "Acme" },
      to: { address: "bob@example.com" },
      subject: "Reset your password",
      text: [
        "Someone asked to reset the password of the account with this address.",
        "",
        "To choose a new password, open this link before 2026-12-01T10:00:00.000Z:",
        `https://app.acme.example/reset-password#token=reset_${"A".repeat(43)}`,
        "",
        "If you did not ask for this, ignore this mail: your password stays as it is.",
        "",
        "(reset-mail template v1)"
      ].join("\n"),
      html: [
        "<p>Someone asked to reset the password of the account with this address.</p>",
        `<p>To choose a new password, open <a href="https://app.acme.example/reset-password#token=reset_${"A".repeat(43)}">this link</a> before 2026-12-01T10:00:00.000Z.</p>`,
        "<p>If you did not ask for this, ignore this mail: your password stays as it is.</p>",
        "<!-- reset-mail template v1 -->"
      ].join("\n")
    })
    expect(resetLink(input.origin, token)).toBe(`https://app.acme.example/reset-password#token=reset_${"A".repeat(43)}`)
  })

  it("HTML-escapes what it puts into the HTML part (& < > \" ')", () => {
    const html = renderDefault({ ...input, origin: `https://a.example/x?a=1&b="<'>` }).html
    expect(html).toContain(`href="https://a.example/x?a=1&amp;b=&quot;&lt;&#39;&gt;/reset-password#token=`)
    expect(html).not.toContain(`"<'>`)
  })

  it("the same live data renders the same fingerprint; a changed sender, origin, mailbox, token or expiry renders another", () => {
    const base = fingerprint(renderDefault(input))
    expect(fingerprint(renderDefault({ ...input }))).toBe(base)
    for (const changed of [
      { ...input, sender: { address: "no-reply@acme.example", name: "Acme Inc" } },
      { ...input, origin: "https://app2.acme.example" },
      { ...input, to: "bobby@example.com" },
      { ...input, token: Redacted.make(`reset_${"B".repeat(43)}`) },
      { ...input, expiresAt: new Date("2026-12-01T10:00:01.000Z") }
    ]) expect(fingerprint(renderDefault(changed))).not.toBe(base)
  })
})
