import { describe, expect, it } from "@effect/vitest"
import { Args, CliConfig, HelpDoc, Options } from "@effect/cli"
import { maxExpiresInSeconds } from "@delivery/identity"
import { BunContext } from "@effect/platform-bun"
import { Effect, HashMap, Option } from "effect"
import { accountArg, accountOption, expiresIn, keyId, messageId, page, producer, project, tenant } from "../src/cli/Arguments.ts"

// The command line's arguments are checked with the schemas the API applies, so a bad one is a usage error
// (exit 2) before any request (docs/operations.md, "Command line").

const config = CliConfig.defaultConfig

/** The argument's value, or "refused" when it fails its schema. */
const arg = <A>(self: Args.Args<A>, value: string) =>
  Args.validate(self, [value], config).pipe(
    Effect.match({ onFailure: () => "refused" as const, onSuccess: ([, parsed]) => parsed }),
    Effect.provide(BunContext.layer)
  )

/** The option's value from `--name value` (absent when `value` is undefined), or "refused". */
const option = <A>(self: Options.Options<A>, name: string, value?: string) =>
  Options.parse(self, value === undefined ? HashMap.empty() : HashMap.make([name, [value]]), config).pipe(
    Effect.match({ onFailure: () => "refused" as const, onSuccess: (parsed) => parsed }),
    Effect.provide(BunContext.layer)
  )

describe("arguments checked before any request", () => {
  it.effect("ids are taken when the API's schema takes them and refused otherwise: tenant, project, producer, key id, account, message id", () =>
    Effect.gen(function* () {
      for (const self of [tenant, project, producer, keyId, accountArg] as ReadonlyArray<Args.Args<string>>) {
        expect(yield* arg(self, "acme-1")).toBe("acme-1")
        expect(yield* arg(self, "not an id!")).toBe("refused")
      }
      expect(yield* arg(messageId, "0b8f5d5e-3c1a-4f4e-9a63-2f1d6c0b7e21")).toBe("0b8f5d5e-3c1a-4f4e-9a63-2f1d6c0b7e21")
      expect(yield* arg(messageId, "acme-1")).toBe("refused")
      expect(yield* option(accountOption, "--account", "acct-1")).toBe("acct-1")
      expect(yield* option(accountOption, "--account", "a b")).toBe("refused")
    }))

  it.effect("--limit is 1 to 100 and optional; --after is an id; --expires-in is 1 second to the API's maximum", () =>
    Effect.gen(function* () {
      expect(yield* option(page.limit, "--limit", "1")).toEqual(Option.some(1))
      expect(yield* option(page.limit, "--limit", "100")).toEqual(Option.some(100))
      expect(yield* option(page.limit, "--limit")).toEqual(Option.none())
      for (const bad of ["0", "101", "1.5", "ten"]) expect(yield* option(page.limit, "--limit", bad)).toBe("refused")
      expect(yield* option(page.after, "--after", "acme-1")).toEqual(Option.some("acme-1"))
      expect(yield* option(page.after, "--after", "not an id!")).toBe("refused")
      expect(yield* option(page.after, "--after")).toEqual(Option.none())
      expect(yield* option(expiresIn, "--expires-in", "1")).toEqual(Option.some(1))
      expect(yield* option(expiresIn, "--expires-in", String(maxExpiresInSeconds))).toEqual(Option.some(maxExpiresInSeconds))
      for (const bad of ["0", String(maxExpiresInSeconds + 1), "2.5"]) expect(yield* option(expiresIn, "--expires-in", bad)).toBe("refused")
      expect(yield* option(expiresIn, "--expires-in")).toEqual(Option.none())
    }))

  it("--help names each argument and says what it takes", () => {
    const arg = (self: Args.Args<unknown>) => Args.getHelp(self)
    const option = (self: Options.Options<unknown>) => Options.getHelp(self)
    const described: ReadonlyArray<readonly [HelpDoc.HelpDoc, string, string]> = [
      [arg(tenant), "<tenant>", "tenant id"],
      [arg(project), "<project>", "project id"],
      [arg(producer), "<producer>", "producer id"],
      [arg(keyId), "<keyId>", "signing key id"],
      [arg(messageId), "<id>", "outbox message id (a UUID)"],
      [arg(accountArg), "<account>", "account id"],
      [option(accountOption), "--account", "account id"],
      [option(page.limit), "--limit", "1 to 100 (default 100)"],
      [option(page.after), "--after", "the id printed after `more:` by the previous page"],
      [option(expiresIn), "--expires-in", "seconds until the credential expires (absent: until revoked)"]
    ]
    for (const [doc, name, description] of described) {
      const text = HelpDoc.toAnsiText(doc).replace(/\u001b\[[0-9;]*m/g, "")
      expect(text).toContain(name)
      expect(text).toContain(description)
    }
  })
})
