import { Args, Command, Options } from "@effect/cli"
import { DeviceCredentialId, DeviceId } from "@delivery/identity"
import { Effect, Option, Redacted } from "effect"
import { answer } from "./Answers.ts"
import { accountOption, expiresIn, page, tenant } from "./Arguments.ts"
import { operatorClient } from "./Environment.ts"
import { group } from "./Group.ts"
import { nextPage, table, time } from "./Output.ts"

const device = Options.text("device").pipe(Options.withSchema(DeviceId), Options.withDescription("the producer's device id (its producer id in envelope routes)"))
const id = Args.text({ name: "id" }).pipe(Args.withSchema(DeviceCredentialId), Args.withDescription("device credential id"))

const issue = Command.make("issue", { tenant, account: accountOption, device, expiresIn }, ({ account, device, expiresIn, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    const seconds = Option.getOrUndefined(expiresIn)
    yield* client.provisioning.issueDeviceCredential({
      path: { tenant },
      payload: { account, device, ...(seconds === undefined ? {} : { expiresInSeconds: seconds }) }
    }).pipe(
      Effect.flatMap(answer("provisioning", "issueDeviceCredential", ({ deviceCredential, token }) => [
        `device credential ${deviceCredential.id} issued to device ${deviceCredential.device} of account ${deviceCredential.account} (expires: ${time(deviceCredential.expiresAt)})`,
        // The one place a secret is printed: the token exists only in this answer.
        `token (shown once, store it now): ${Redacted.value(token)}`
      ]))
    )
  })).pipe(Command.withDescription("Issue a producer's device credential; its token is printed once"))

const list = Command.make("list", { tenant, account: Options.optional(accountOption), ...page }, ({ account, after, limit, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.provisioning.listDeviceCredentials({
      path: { tenant },
      urlParams: { account: Option.getOrUndefined(account), limit: Option.getOrUndefined(limit), after: Option.getOrUndefined(after) }
    }).pipe(
      Effect.flatMap(answer("provisioning", "listDeviceCredentials", (credentials) => [
        ...table(
          ["id", "account", "device", "state", "expires", "created"],
          credentials.items.map((c) => [c.id, c.account, c.device, c.state, time(c.expiresAt), time(c.createdAt)])
        ),
        ...nextPage("--after", credentials.next)
      ]))
    )
  })).pipe(Command.withDescription("List the tenant's device credentials (states and times, never a token)"))

const revoke = Command.make("revoke", { tenant, id }, ({ id, tenant }) =>
  Effect.gen(function* () {
    const client = yield* operatorClient
    yield* client.provisioning.revokeDeviceCredential({ path: { tenant, id } }).pipe(
      Effect.flatMap(answer("provisioning", "revokeDeviceCredential", ({ deviceCredential, outcome }) => [
        `device credential ${deviceCredential.id}: ${outcome}`
      ]))
    )
  })).pipe(Command.withDescription("Revoke a device credential: refused from the next request"))

export const devices = group("devices", "Issue, list and revoke device credentials", [issue, list, revoke])
