import { Console, Context, Effect, Schema } from "effect"

/** The global `--json` flag: exactly one JSON document on stdout, errors as JSON objects on stderr. */
export class JsonOutput extends Context.Reference<JsonOutput>()("@delivery/client/cli/JsonOutput", {
  defaultValue: () => false
}) {}

/**
 * Prints a command's answer: with `--json` the value encoded by `schema` (the one the server encodes it with,
 * so dates are ISO strings and an issued token is its text), otherwise the short lines `human` makes of it.
 */
export const show = <A, I>(schema: Schema.Schema<A, I>, value: A, human: (value: A) => ReadonlyArray<string>) =>
  Effect.gen(function* () {
    if (yield* JsonOutput) return yield* Console.log(JSON.stringify(yield* Schema.encode(schema)(value)))
    for (const line of human(value)) yield* Console.log(line)
  })

/** A small table with aligned columns; `(none)` under the header when there are no rows. */
export const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): ReadonlyArray<string> => {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? "").length)))
  const format = (row: ReadonlyArray<string>) =>
    row.map((cell, column) => (column === row.length - 1 ? cell : cell.padEnd(widths[column]!))).join("  ")
  return [format(header), ...(rows.length === 0 ? ["(none)"] : rows.map(format))]
}

export const time = (date: Date | null): string => (date === null ? "-" : date.toISOString())

/** The line that tells how to ask for the next page, when there is one. */
export const nextPage = (option: string, next: string | null): ReadonlyArray<string> =>
  next === null ? [] : [`more: ${option} ${next}`]
