import { TRANSPORTS } from "./Ingress.ts"
import type { BlockerCode } from "./Protocol.ts"

type OtherCode = Exclude<BlockerCode, `ingress-${string}` | "legacy-alarm-with-ingress">

/** Why each code that is not a transport's blocks sleep (docs/idle-wake.md, "Blockers"). */
const OTHER_REASONS: Record<OtherCode, string> = {
  "api-key-projection-overflow": "more than 1,000 active board and agent keys: the projection fails closed rather than leave keys out",
  "api-key-projection-unknown": "a key row of a kind other than board or agent: unknown inputs fail closed",
  "api-key-projection-malformed": "a key row whose lookup id, stored hash or expiry is not of the documented shape",
  "api-key-projection-duplicate": "two keys with one fingerprint: a wake could not tell them apart",
  "incoming-proof-changed": "the final read's proof differs from the initial read's of the same idle hold (a credential or binding changed)",
  "github-connector-missing": "connector state without an enrolled connector instance to bind the proof to",
  "github-binding-missing": "an endpoint whose connection, registration or channel connection does not exist (or the connection was removed)",
  "github-binding-foreign": "a binding through another connector instance, tenant, connection or owner than its endpoint's",
  "github-binding-unsettled": "setup not finished: a pending registration, no installation, a disabled or archived channel, a connection without endpoint",
  "github-binding-unsupported": "an endpoint, connection or channel of a kind or transport the profile does not cover",
  "github-binding-overflow": "more connector rows than one proof covers (1,000 bindings)",
  "github-endpoint-leased": "an endpoint lease is live: an event is being handled",
  "github-removal-incomplete": "a removed endpoint that the removal writer did not finish archiving (lease, credential reference, channel, generation or registration left)",
  "archived-transport-retained": "an archived endpoint of a transport other than GitHub: only GitHub history is exempt",
  "github-personal-mcp": "personal GitHub MCP connections owe credential continuity work; their connection ids are listed",
  "runtime-initializing": "a runtime (or delivery worker) has not finished starting",
  "runtime-retiring": "a runtime (or delivery worker) is being retired",
  "runtime-retirement-failed": "a runtime's retirement failed; reported, though hidden from get and list, until its owner's retry succeeds",
  "runtime-failed": "a delivery worker failed while running",
  "service-shutdown-failed": "a full shutdown of a runtime registry failed: blocked for the rest of the process",
  "local-api-activity": "a board or agent key was used successfully within the last ten minutes",
  "requests-in-flight": "requests are being answered (`count`)",
  "work-pending": "a delivery family still has accepted work to do (the families are the ids)"
}

export interface BlockerRow {
  readonly code: BlockerCode
  readonly transport: string
  readonly reason: string
}

/** Every blocker code with its transport (if any) and why it blocks, transports first in registry order. */
export const BLOCKER_ROWS: ReadonlyArray<BlockerRow> = [
  ...TRANSPORTS.flatMap((transport) =>
    transport.blocker === null ? [] : [{ code: transport.blocker, transport: transport.name, reason: transport.reason }]
  ),
  ...(Object.entries(OTHER_REASONS) as Array<[OtherCode, string]>).map(([code, reason]) => ({ code, transport: "", reason }))
]
