import { Command, Options } from "@effect/cli"
import { MaxAttempts } from "@delivery/outbox"
import { Effect, Option, Schema } from "effect"
import { answer } from "./Answers.ts"
import { messageId, project, tenant } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { group } from "./Group.ts"
import { messageLines } from "./Messages.ts"
import { nextPage, table, time } from "./Output.ts"

const limit = Options.integer("limit").pipe(
  Options.withSchema(Schema.Int.pipe(Schema.positive())),
  Options.withDescription("at most this many (the server gives at most 100)"),
  Options.optional
)
const cursor = Options.text("cursor").pipe(
  Options.withSchema(Schema.String.pipe(Schema.maxLength(128))),
  Options.withDescription("the cursor printed after `more:` by the previous page"),
  Options.optional
)
const maxAttempts = Options.integer("max-attempts").pipe(
  Options.withSchema(MaxAttempts),
  Options.withDescription("new attempts to give it (1 to 100; default: the message's own)"),
  Options.optional
)

const list = Command.make("list", { tenant, project, limit, cursor }, ({ cursor, limit, project, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.outboxOperator.deadLetters({
      path: { tenant, project },
      urlParams: { limit: Option.getOrUndefined(limit), cursor: Option.getOrUndefined(cursor) }
    }).pipe(
      Effect.flatMap(answer("outboxOperator", "deadLetters", (page) => [
        ...table(
          ["id", "idempotency key", "attempts", "dead reason", "last error", "dead"],
          page.items.map((m) => [m.id, m.idempotencyKey, `${m.attempt}/${m.maxAttempts}`, m.deadReason ?? "-", m.lastError ?? "-", time(m.deadAt)])
        ),
        ...nextPage("--cursor", page.nextCursor)
      ]))
    )
  })).pipe(Command.withDescription("Dead letters of a tenant/project, oldest first"))

const redrive = Command.make("redrive", { tenant, project, id: messageId, maxAttempts }, ({ id, maxAttempts, project, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.outboxOperator.redrive({
      path: { tenant, project, id },
      payload: Option.match(maxAttempts, { onNone: () => ({}), onSome: (n) => ({ maxAttempts: n }) })
    }).pipe(
      Effect.flatMap(answer("outboxOperator", "redrive", (message) => [`message ${message.id} redriven`, ...messageLines(message)]))
    )
  })).pipe(Command.withDescription("Give a dead letter new attempts: same identity and envelope"))

export const deadLetters = group("dead-letters", "List and redrive dead letters", [list, redrive])
