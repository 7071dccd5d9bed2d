import { Args, Command } from "@effect/cli"
import { FileSystem } from "@effect/platform"
import { EnqueueRequest, type OutboxMessage } from "@delivery/outbox"
import { Effect, ParseResult, Schema } from "effect"
import { answer } from "./Answers.ts"
import { messageId, project, tenant } from "./Arguments.ts"
import { operatorClient, tenantClient } from "./Environment.ts"
import { UsageError } from "./Failure.ts"
import { group } from "./Group.ts"
import { time } from "./Output.ts"

/** An outbox message as aligned `name: value` lines (identities, state and codes: never the payload). */
export const messageLines = (message: OutboxMessage): ReadonlyArray<string> => {
  const fields: ReadonlyArray<readonly [string, string]> = [
    ["id", message.id],
    ["tenant", message.tenant],
    ["project", message.project],
    ["idempotency key", message.idempotencyKey],
    ["event identity", message.eventIdentity],
    ["state", message.state],
    ["attempt", `${message.attempt} of ${message.maxAttempts} (ceiling ${message.attemptCeiling})`],
    ["due", time(message.dueAt)],
    ["last error", message.lastError ?? "-"],
    ["dead reason", message.deadReason ?? "-"],
    ["created", time(message.createdAt)],
    ["delivered", time(message.deliveredAt)],
    ["dead", time(message.deadAt)]
  ]
  const width = Math.max(...fields.map(([name]) => name.length)) + 1
  return fields.map(([name, value]) => `${`${name}:`.padEnd(width)} ${value}`)
}

const get = Command.make("get", { tenant, project, id: messageId }, ({ id, project, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.outboxOperator.message({ path: { tenant, project, id } }).pipe(
      Effect.flatMap(answer("outboxOperator", "message", messageLines))
    )
  })).pipe(Command.withDescription("One outbox message's state"))

const file = Args.file({ name: "file", exists: "yes" }).pipe(
  Args.withDescription("the enqueue request: {\"envelope\": {…without keyId and signature}, \"maxAttempts\"?}")
)
const decodeRequest = Schema.decodeUnknown(Schema.parseJson(EnqueueRequest), { onExcessProperty: "error", errors: "first" })

// The backend signs with the tenant's active key; the same idempotency key with the same content is the
// original message again (`replayed`), with other content a 409 refusal.
const enqueue = Command.make("enqueue", { file }, ({ file }) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const text = yield* Effect.mapError(fs.readFileString(file), () => new UsageError({ message: `cannot read ${file}` }))
    const request = yield* Effect.mapError(
      decodeRequest(text),
      (error) => new UsageError({ message: `${file} is not an enqueue request: ${ParseResult.TreeFormatter.formatErrorSync(error).split("\n")[0]}` })
    )
    const client = yield* tenantClient
    yield* client.outbox.enqueue({ payload: request }).pipe(
      Effect.flatMap(answer("outbox", "enqueue", ({ message, replayed }) => [
        `message ${message.id} ${replayed ? "already enqueued (same idempotency key and content)" : "enqueued"}`,
        ...messageLines(message)
      ]))
    )
  })).pipe(Command.withDescription("Enqueue an outbound envelope with the tenant API key in DELIVERY_API_KEY (permission outbox:enqueue)"))

export const messages = group("messages", "Enqueue and read outbox messages", [enqueue, get])
