import { Effect } from "effect"
import { runInboxBench } from "./inbox.ts"
import { runOutboxBench } from "./outbox.ts"
import { runQueueBench } from "./queue.ts"
import { runSenderBench } from "./sender.ts"
import { runWakeBench } from "./wake.ts"

// `bun run bench <name> [--json] [--seconds N] [--fsync] [--processes N]`. With --json, progress goes to stderr and the
// last line on stdout is exactly one JSON object with the figures. --seconds: inbox, the length of each measured run
// (default 8); queue, the length each timed run is sized for (default 3). --processes: inbox, backend processes
// (default 1; above 1 the backend runs with WORKERS=N).
const args = process.argv.slice(2)
const json = args.includes("--json")
const secondsAt = args.indexOf("--seconds")
const seconds = secondsAt >= 0 ? Number(args[secondsAt + 1]) : 8
const processesAt = args.indexOf("--processes")
const processes = processesAt >= 0 ? Number(args[processesAt + 1]) : 1
const names = args.filter((arg, i) => !arg.startsWith("--") && args[i - 1] !== "--seconds" && args[i - 1] !== "--processes")
const log = (line: string) => (json ? console.error(line) : console.log(line))

const benches: Record<string, () => Effect.Effect<object, unknown>> = {
  inbox: () => runInboxBench({ seconds, fsync: args.includes("--fsync"), processes, log }),
  outbox: () => runOutboxBench({ fsync: args.includes("--fsync"), log }),
  queue: () => runQueueBench({ seconds: secondsAt >= 0 ? seconds : 3, fsync: args.includes("--fsync"), log }),
  sender: () => runSenderBench({ log }),
  wake: () => runWakeBench({ log })
}

const name = names[0]
const bench = name === undefined ? undefined : benches[name]
if (bench === undefined || !(seconds > 0 && seconds <= 60) || !(Number.isInteger(processes) && processes >= 1 && processes <= 8)) {
  console.error(`usage: bun run bench <${Object.keys(benches).join("|")}> [--json] [--seconds 1..60] [--fsync] [--processes 1..8]`)
  process.exit(2)
}
const result = await Effect.runPromise(bench())
if (json) console.log(JSON.stringify(result))
