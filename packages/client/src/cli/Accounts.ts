import { Args, Command, Options } from "@effect/cli"
import { Email } from "@delivery/identity"
import { Effect, Option } from "effect"
import { answer } from "./Answers.ts"
import { accountArg, page, tenant } from "./Arguments.ts"
import { operatorClient, passwordFrom } from "./Environment.ts"
import { group } from "./Group.ts"
import { nextPage, table, time } from "./Output.ts"

const email = Args.text({ name: "email" }).pipe(Args.withSchema(Email), Args.withDescription("e-mail address, unique in the tenant"))

const passwordEnv = Options.text("password-env").pipe(
  Options.withDescription("name of the environment variable that holds the password (never the password itself)"),
  Options.optional
)

const create = Command.make("create", { tenant, email, passwordEnv }, ({ email, passwordEnv, tenant }) =>
  Effect.gen(function* () {
    const password = yield* Option.match(passwordEnv, { onNone: () => Effect.succeed(undefined), onSome: passwordFrom })
    const client = yield* operatorClient
    yield* client.provisioning.createAccount({ path: { tenant }, payload: password === undefined ? { email } : { email, password } }).pipe(
      // The id alone, so a script can take it: `ACCOUNT=$(bun run admin -- accounts create acme ops@acme.example)`.
      Effect.flatMap(answer("provisioning", "createAccount", ({ account }) => [account.id]))
    )
  })).pipe(Command.withDescription("Create an account (optionally with a password read from --password-env)"))

const list = Command.make("list", { tenant, ...page }, ({ after, limit, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.provisioning.listAccounts({
      path: { tenant },
      urlParams: { limit: Option.getOrUndefined(limit), after: Option.getOrUndefined(after) }
    }).pipe(
      Effect.flatMap(answer("provisioning", "listAccounts", (accounts) => [
        ...table(
          ["account", "email", "enabled", "password", "created"],
          accounts.items.map((a) => [a.id, a.email, a.enabled ? "yes" : "no", a.hasPassword ? "yes" : "no", time(a.createdAt)])
        ),
        ...nextPage("--after", accounts.next)
      ]))
    )
  })).pipe(Command.withDescription("List the tenant's accounts, by id"))

const change = (name: "disable" | "enable") =>
  Command.make(name, { tenant, account: accountArg }, ({ account, tenant }) =>
    Effect.gen(function* () {
      const client = yield* operatorClient
      const request = { path: { tenant, account } }
      const answered = name === "disable" ? client.provisioning.disableAccount(request) : client.provisioning.enableAccount(request)
      yield* answered.pipe(
        Effect.flatMap(answer("provisioning", `${name}Account`, (changed) => [`account ${changed.account.id}: ${changed.outcome}`]))
      )
    })).pipe(
      Command.withDescription(
        name === "disable" ? "Disable an account: its keys and credentials are refused from the next request" : "Enable an account again"
      )
    )

export const accounts = group("accounts", "Create, list, disable and enable accounts", [create, list, change("disable"), change("enable")])
