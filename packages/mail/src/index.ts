export {
  escapeHtml,
  fingerprint,
  freezeMessage,
  MailMessage,
  Mailbox,
  Mailer,
  MailProviderConfig,
  type MailProviderSettings,
  renderBody,
  thawMessage
} from "./Mail.ts"
