#!/usr/bin/env -S bun --no-env-file
import { Command, Options } from "@effect/cli"
import { BunContext, BunRuntime } from "@effect/platform-bun"
import { Effect, Exit, Layer } from "effect"
import { accounts } from "./Accounts.ts"
import { apiKeys } from "./ApiKeys.ts"
import { cloud } from "./Cloud.ts"
import { deadLetters } from "./DeadLetters.ts"
import { devices } from "./Devices.ts"
import { envelopes } from "./Envelopes.ts"
import { ExitCode, settle, UsageError } from "./Failure.ts"
import { messages } from "./Messages.ts"
import { JsonOutput } from "./Output.ts"
import { receipts } from "./Receipts.ts"
import { resetMail } from "./ResetMail.ts"
import { signingKeys } from "./SigningKeys.ts"
import { streams } from "./Streams.ts"
import { targets } from "./Targets.ts"
import { teamApplications } from "./TeamApplications.ts"
import { tenants } from "./Tenants.ts"
import { TransportLive } from "./Transport.ts"

// delivery-admin: the operator's command line over the typed client (docs/operations.md, "Command line").

const json = Options.boolean("json").pipe(
  Options.withDescription("exactly one JSON document on stdout; errors as a JSON object on stderr (accepted anywhere)")
)

const admin = Command.make("delivery-admin", { json }, () => Effect.fail(new UsageError({ message: "a command is required (see --help)" }))).pipe(
  Command.withDescription("Operate a delivery backend: tenants, credentials, signing keys, targets, envelopes, dead letters, streams, reset mail, and the idle-wake cloud's stacks"),
  Command.withSubcommands([tenants, accounts, apiKeys, devices, signingKeys, targets, envelopes, deadLetters, messages, streams, resetMail, receipts, teamApplications, cloud])
)

const cli = Command.run(admin, { name: "delivery-admin", version: "1.0.0" })

/**
 * `--json` is global, but the parser only reads it reliably right after the program name (between an option and
 * its argument it is taken for a value): it is moved there from wherever it was given, up to a `--`.
 */
const withGlobalJson = (argv: ReadonlyArray<string>) => {
  const [runtime = "bun", script = "delivery-admin", ...rest] = argv
  const end = rest.indexOf("--")
  const options = end < 0 ? rest : rest.slice(0, end)
  const json = options.includes("--json")
  const args = [...options.filter((arg) => arg !== "--json"), ...(end < 0 ? [] : rest.slice(end))]
  return { json, argv: [runtime, script, ...(json ? ["--json"] : []), ...args] }
}

const { argv, json: jsonOutput } = withGlobalJson(process.argv)

const program = cli(argv).pipe(
  Effect.as<ExitCode>(ExitCode.success),
  Effect.catchAllCause(settle),
  Effect.provideService(JsonOutput, jsonOutput),
  Effect.provide(Layer.merge(BunContext.layer, TransportLive))
)

BunRuntime.runMain(program, {
  disableErrorReporting: true,
  teardown: (exit, onExit) => onExit(Exit.isSuccess(exit) ? Number(exit.value) : ExitCode.unexpected)
})
