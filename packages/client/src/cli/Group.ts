import { Command } from "@effect/cli"
import { Effect } from "effect"
import { UsageError } from "./Failure.ts"

type AnyCommand = Command.Command<any, any, any, any>

/** A command group (`tenants`, `accounts`, …): on its own, without one of its commands, a usage error. */
export const group = <const Subcommands extends readonly [AnyCommand, ...Array<AnyCommand>]>(
  name: string,
  description: string,
  subcommands: Subcommands
) => {
  const names = subcommands.flatMap((command) => Array.from(Command.getNames(command))).join(", ")
  return Command.make(name, {}, () => Effect.fail(new UsageError({ message: `${name} needs a command: ${names} (see --help)` }))).pipe(
    Command.withDescription(description),
    Command.withSubcommands(subcommands)
  )
}
