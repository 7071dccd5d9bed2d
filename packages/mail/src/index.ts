export { escapeHtml, fingerprint, MailMessage, Mailbox, Mailer, MailProviderConfig, type MailProviderSettings, renderBody } from "./Mail.ts"
