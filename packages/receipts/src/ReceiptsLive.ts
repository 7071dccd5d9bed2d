import { Mailer } from "@delivery/mail"
import { Layer, Option } from "effect"
import { FileStoreLive } from "./FileStore.ts"
import { Receipts } from "./Receipts.ts"
import type { ReceiptsSettings } from "./ReceiptsConfig.ts"
import { ReceiptWork, ReceiptWorkSettings } from "./ReceiptWork.ts"

/**
 * Receipts and their effects executor for one process's settings: the file store only with both roots (checked at
 * start-up, before the listener), the mailer only with receipt provider configuration. Without a provider no
 * receipt provider call can happen in this process; without roots uploads and attachments are refused.
 */
export const receiptsLayer = (settings: ReceiptsSettings) => {
  // Absent services are absent from the context (the consumers use `Effect.serviceOption`); the casts only give
  // both branches one type.
  const files = Option.match(settings.roots, {
    onNone: () => Layer.empty as unknown as ReturnType<typeof FileStoreLive>,
    onSome: FileStoreLive
  })
  const mail = Option.match(settings.provider, {
    onNone: () => Layer.empty as unknown as ReturnType<typeof Mailer.layerWith>,
    onSome: (provider) => Mailer.layerWith(provider.mail)
  })
  const shared = Layer.mergeAll(files, mail, Layer.succeed(ReceiptWorkSettings, { timing: settings.timing, provider: settings.provider }))
  return Layer.mergeAll(Receipts.Default, ReceiptWork.Default).pipe(Layer.provideMerge(shared))
}
