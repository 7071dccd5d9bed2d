import { Args, Command, Options } from "@effect/cli"
import { ApiKeyId, ApiKeyName, Permission } from "@delivery/identity"
import { Effect, Option, Redacted, Schema } from "effect"
import { answer } from "./Answers.ts"
import { accountOption, expiresIn, page, tenant } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { group } from "./Group.ts"
import { nextPage, table, time } from "./Output.ts"

const kind = Options.choice("kind", ["board", "agent"]).pipe(Options.withDescription("board or agent"))
const name = Options.text("name").pipe(Options.withSchema(ApiKeyName), Options.withDescription("a name for people (1 to 100 characters)"))
const permissions = Options.text("permission").pipe(
  Options.repeated,
  Options.withSchema(Schema.mutable(Schema.Array(Permission))),
  Options.withDescription("a permission such as outbox:enqueue (repeat for several)")
)
const id = Args.text({ name: "id" }).pipe(Args.withSchema(ApiKeyId), Args.withDescription("API key id"))

const issue = Command.make(
  "issue",
  { tenant, account: accountOption, kind, name, permissions, expiresIn },
  ({ account, expiresIn, kind, name, permissions, tenant }) =>
    Effect.gen(function* () {
      const client = yield* operatorClient
      const seconds = Option.getOrUndefined(expiresIn)
      yield* client.provisioning.issueApiKey({
        path: { tenant },
        payload: { account, kind, name, permissions, ...(seconds === undefined ? {} : { expiresInSeconds: seconds }) }
      }).pipe(
        Effect.flatMap(answer("provisioning", "issueApiKey", ({ apiKey, token }) => [
          `api key ${apiKey.id} issued to account ${apiKey.account} (${apiKey.kind}, permissions: ${apiKey.permissions.join(" ") || "none"}, expires: ${time(apiKey.expiresAt)})`,
          // The one place a secret is printed: the token exists only in this answer.
          `token (shown once, store it now): ${Redacted.value(token)}`
        ]))
      )
    })
).pipe(Command.withDescription("Issue a board or agent API key; its token is printed once"))

const list = Command.make("list", { tenant, account: Options.optional(accountOption), ...page }, ({ account, after, limit, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.provisioning.listApiKeys({
      path: { tenant },
      urlParams: { account: Option.getOrUndefined(account), limit: Option.getOrUndefined(limit), after: Option.getOrUndefined(after) }
    }).pipe(
      Effect.flatMap(answer("provisioning", "listApiKeys", (keys) => [
        ...table(
          ["id", "account", "kind", "name", "state", "permissions", "expires", "created"],
          keys.items.map((k) => [k.id, k.account, k.kind, k.name, k.state, k.permissions.join(" ") || "-", time(k.expiresAt), time(k.createdAt)])
        ),
        ...nextPage("--after", keys.next)
      ]))
    )
  })).pipe(Command.withDescription("List the tenant's API keys (states and times, never a token)"))

const revoke = Command.make("revoke", { tenant, id }, ({ id, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.provisioning.revokeApiKey({ path: { tenant, id } }).pipe(
      Effect.flatMap(answer("provisioning", "revokeApiKey", ({ apiKey, outcome }) => [`api key ${apiKey.id}: ${outcome}`]))
    )
  })).pipe(Command.withDescription("Revoke an API key: refused from the next request"))

export const apiKeys = group("api-keys", "Issue, list and revoke API keys", [issue, list, revoke])
