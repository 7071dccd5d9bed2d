import { Command, Options } from "@effect/cli"
import { TenantId } from "@delivery/identity"
import { Effect, Option, Schema } from "effect"
import { answer } from "./Answers.ts"
import { page } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { group } from "./Group.ts"
import { nextPage, table, time } from "./Output.ts"

// The reset-mail operator view (spec 002, docs/reset-mail.md): counts by state and reason, and the rows that ended
// without delivery. The API never answers with an address, a token or a message body, so neither can print one.
// The options are checked with the rules of the route's query (EndedQuery in packages/reset-mail/src/Api.ts).

const endedStates = ["rejected", "quarantined", "stopped"] as const

const state = Options.choice("state", endedStates).pipe(Options.withDescription("rejected, quarantined or stopped"))
const reason = Options.text("reason").pipe(
  Options.withSchema(Schema.String.pipe(
    Schema.pattern(/^[a-z0-9-]{1,64}$/, { message: () => "a reason is a stable code: 1 to 64 of a-z, 0-9 and -" })
  )),
  Options.withDescription("only rows ended with this reason (a stable code, e.g. fingerprint-unknown)"),
  Options.optional
)
const tenant = Options.text("tenant").pipe(Options.withSchema(TenantId), Options.withDescription("only this tenant's rows"), Options.optional)
const after = Options.text("after").pipe(
  Options.withSchema(Schema.String.pipe(
    Schema.pattern(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, {
      message: () => "--after takes a row id (a lower-case UUID), as printed after `more:`"
    })
  )),
  Options.withDescription("the row id printed after `more:` by the previous page"),
  Options.optional
)

const summary = Command.make("summary", {}, () =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.resetMailOperator.summary().pipe(
      Effect.flatMap(answer("resetMailOperator", "summary", ({ counts }) =>
        table(["state", "reason", "count"], counts.map((row) => [row.state, row.reason ?? "-", String(row.count)]))))
    )
  })).pipe(Command.withDescription("Reset-mail rows counted by state and reason"))

const ended = Command.make("ended", { state, reason, tenant, after, limit: page.limit }, ({ after, limit, reason, state, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.resetMailOperator.ended({
      urlParams: {
        state,
        reason: Option.getOrUndefined(reason),
        tenant: Option.getOrUndefined(tenant),
        after: Option.getOrUndefined(after),
        limit: Option.getOrUndefined(limit)
      }
    }).pipe(
      Effect.flatMap(answer("resetMailOperator", "ended", (ended) => [
        ...table(
          ["id", "tenant", "state", "reason", "attempts", "provider status", "created", "updated"],
          ended.rows.map((row) => [
            row.id,
            row.tenant,
            row.state,
            row.reason,
            String(row.attempt),
            row.providerStatus === null ? "-" : String(row.providerStatus),
            time(row.createdAt),
            time(row.updatedAt)
          ])
        ),
        ...nextPage("--after", ended.next)
      ]))
    )
  })).pipe(Command.withDescription("Reset-mail rows that ended without delivery (rejected, quarantined, stopped), by id, at most 100 per page"))

export const resetMail = group("reset-mail", "What happened to password-reset mail: counts and the rows that ended without delivery", [summary, ended])
