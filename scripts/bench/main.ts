import { Effect } from "effect"
import { runInboxBench } from "./inbox.ts"
import { runOutboxBench } from "./outbox.ts"
import { runQueueBench } from "./queue.ts"
import { runWakeBench } from "./wake.ts"

// `bun run bench <name> [--json] [--seconds N] [--fsync]`. With --json, progress goes to stderr and the
// last line on stdout is exactly one JSON object with the figures. --seconds: inbox, the length of each measured run
// (default 8); queue, the length each timed run is sized for (default 3).
const args = process.argv.slice(2)
const json = args.includes("--json")
const secondsAt = args.indexOf("--seconds")
const seconds = secondsAt >= 0 ? Number(args[secondsAt + 1]) : 8
const names = args.filter((arg, i) => !arg.startsWith("--") && args[i - 1] !== "--seconds")
const log = (line: string) => (json ? console.error(line) : console.log(line))

const benches: Record<string, () => Effect.Effect<object, unknown>> = {
  inbox: () => runInboxBench({ seconds, fsync: args.includes("--fsync"), log }),
  outbox: () => runOutboxBench({ fsync: args.includes("--fsync"), log }),
  queue: () => runQueueBench({ seconds: secondsAt >= 0 ? seconds : 3, fsync: args.includes("--fsync"), log }),
  wake: () => runWakeBench({ log })
}

const name = names[0]
const bench = name === undefined ? undefined : benches[name]
if (bench === undefined || !(seconds > 0 && seconds <= 60)) {
  console.error(`usage: bun run bench <${Object.keys(benches).join("|")}> [--json] [--seconds 1..60] [--fsync]`)
  process.exit(2)
}
const result = await Effect.runPromise(bench())
if (json) console.log(JSON.stringify(result))
