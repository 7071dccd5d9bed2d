import { spawnSync } from "node:child_process"
import { existsSync, readdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"

/** pgbench from the newest installed PostgreSQL (the same packages that provide initdb), or PG_BIN. */
export const pgBin = (tool: string): string => {
  const candidates = [process.env.PG_BIN, ...(existsSync("/usr/lib/postgresql")
    ? readdirSync("/usr/lib/postgresql").sort((a, b) => Number(b) - Number(a)).map((v) => `/usr/lib/postgresql/${v}/bin`)
    : [])]
  for (const dir of candidates) if (dir !== undefined && existsSync(join(dir, tool))) return join(dir, tool)
  return tool
}

export interface Target {
  readonly port: number
  readonly database: string
}

// psql takes the database as -d; pgbench as its last argument (its -d means debug).
const server = (target: Target) => ["-h", "127.0.0.1", "-p", String(target.port), "-U", "postgres"]

/** One SQL text through psql (setup only; never timed). */
export const psql = (target: Target, sql: string): string => {
  const run = spawnSync(pgBin("psql"), [...server(target), "-d", target.database, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql], { encoding: "utf8" })
  if (run.status !== 0) throw new Error(`psql failed: ${run.stderr}`)
  return run.stdout.trim()
}

/**
 * The reference transaction: the same rows, indexes and reads as one accepted envelope of ours, as
 * plain SQL. Upsert-and-lock the client's stream row; probe the three retained identities it could
 * collide with (event id, idempotency key, sequence: the three unique indexes of inbox_identities);
 * insert the permanent identity, the expiring payload (an envelope-sized text) and the audit row;
 * advance the cursor (the second version of the stream row, as ours writes); commit. No HTTP, no
 * authentication, no key lookup, no signature, no JSON: what PostgreSQL costs by itself. pgbench would
 * read `:name` inside a JSON text as its own variables, hence `repeat('e', n)` for the payload.
 */
export const referenceScript = (envelopeText: string) => `
BEGIN;
INSERT INTO inbox_streams (tenant, project, producer, created_at, last_received_at)
  VALUES ('bench-pgbench', 'website', 'client-' || :client_id, now(), now())
  ON CONFLICT (tenant, project, producer) DO UPDATE SET last_received_at = EXCLUDED.last_received_at
  RETURNING stream_id, nextval('bench_sequence') AS seq \\gset
SELECT 1 FROM inbox_identities WHERE stream_id = :stream_id AND event_id = 'bench-event-' || lpad(:seq::text, 12, '0');
SELECT 1 FROM inbox_identities WHERE stream_id = :stream_id AND idempotency_key = 'op-' || :seq;
SELECT 1 FROM inbox_identities WHERE stream_id = :stream_id AND sequence = :seq;
INSERT INTO inbox_identities (stream_id, sequence, event_id, idempotency_key, event_identity, accepted_at)
  VALUES (:stream_id, :seq, 'bench-event-' || lpad(:seq::text, 12, '0'), 'op-' || :seq, md5(:seq::text) || md5(:client_id::text), now());
INSERT INTO inbox_payloads (stream_id, sequence, envelope, expires_at)
  VALUES (:stream_id, :seq, repeat('e', ${envelopeText.length}), now() + interval '90 days');
INSERT INTO inbox_audit (recorded_at, tenant, project, producer, account, device, event_identity, outcome, reason, correlation_id)
  VALUES (now(), 'bench-pgbench', 'website', 'client-' || :client_id, 'account', 'device', md5(:seq::text) || md5('x'),
          'accepted', 'accepted', md5(random()::text));
UPDATE inbox_streams SET contiguous_cursor = :seq, high_sequence = GREATEST(high_sequence, :seq) WHERE stream_id = :stream_id;
COMMIT;
`

export type PgbenchMode = "prepared" | "extended" | "simple"

/**
 * Runs pgbench for `seconds` with `clients` clients and returns its tps. `prepared` (the default, and the
 * figure of the JSON line): named statements, planned once per connection. `extended`: an unnamed
 * statement parsed and planned on every execution, which is what our driver (node-postgres through
 * @effect/sql-pg) sends.
 */
export const runPgbench = (target: Target, scriptDir: string, envelopeText: string, clients: number, seconds: number, mode: PgbenchMode = "prepared"): number => {
  const script = join(scriptDir, "inbox-reference.sql")
  writeFileSync(script, referenceScript(envelopeText))
  psql(target, "CREATE SEQUENCE IF NOT EXISTS bench_sequence")
  const run = spawnSync(
    pgBin("pgbench"),
    [...server(target), "-n", "-M", mode, "-f", script, "-c", String(clients), "-j", String(Math.min(clients, 2)), "-T", String(seconds), target.database],
    { encoding: "utf8" }
  )
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(run.stdout)
  if (run.status !== 0 || tps === null) throw new Error(`pgbench failed: ${run.stderr.slice(-2000)}${run.stdout.slice(-2000)}`)
  return Number(tps[1])
}
