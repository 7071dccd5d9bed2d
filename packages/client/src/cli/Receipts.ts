import { Args, Command } from "@effect/cli"
import { Effect, Schema } from "effect"
import { answer } from "./Answers.ts"
import { tenant } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { group } from "./Group.ts"
import { table, time } from "./Output.ts"

// A receipt's effects and their states (spec 002, docs/receipts.md). The route never answers with the payer's
// contact or the notification body, so neither can print here.

const id = Args.text({ name: "receipt" }).pipe(
  Args.withSchema(Schema.String.pipe(
    Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, { message: () => "a receipt id (a lower-case UUID)" })
  )),
  Args.withDescription("receipt id, as the command answered it")
)

const get = Command.make("get", { tenant, id }, ({ id, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.receiptsOperator.receiptState({ path: { tenant, id } }).pipe(
      Effect.flatMap(answer("receiptsOperator", "receiptState", (receipt) => [
        `receipt ${receipt.id} (${receipt.reference}) of ${receipt.tenant}, recorded ${time(receipt.createdAt)}`,
        ...table(
          ["seq", "effect", "kind", "state", "attempts", "last error", "next attempt", "frozen", "completed"],
          receipt.effects.map((effect) => [
            String(effect.seq),
            effect.id,
            effect.kind,
            effect.state,
            String(effect.attempt),
            effect.lastError ?? "-",
            effect.state === "pending" ? time(effect.nextAttemptAt) : "-",
            effect.kind === "notify" ? (effect.frozen ? "yes" : "no") : "-",
            effect.completedAt === null ? "-" : time(effect.completedAt)
          ])
        )
      ]))
    )
  })).pipe(Command.withDescription("A receipt's effects in order, with their states (no contact details, no bodies)"))

export const receipts = group("receipts", "Receipts: each receipt's effects and their states", [get])
