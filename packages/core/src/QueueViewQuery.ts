import type { SqlClient, Statement } from "@effect/sql"
import { Schema } from "effect"
import { COMPLETED_WINDOW_SECONDS, COMPLETED_WINDOWS, type QueueSnapshot } from "./QueueView.ts"

// The one statement shape every family's QueueView reads with. Time is the database's `now()`, not Effect's Clock:
// every process of a deployment, whatever its clock, must report the same numbers for the same rows.

const HOUR_SECONDS = COMPLETED_WINDOWS * COMPLETED_WINDOW_SECONDS

/** The start of the oldest five-minute window: `now()` minus an hour. */
export const windowsStart = (sql: SqlClient.SqlClient): Statement.Fragment =>
  sql.literal(`(now() - interval '${HOUR_SECONDS} seconds')`)

/**
 * The window (0 oldest … 11 newest) a completion time falls in, NULL before the last hour. A time after `now()` (a
 * row written by a process whose clock runs ahead of the database's) is counted in the newest window, not lost.
 */
export const completionBucket = (sql: SqlClient.SqlClient, at: Statement.Fragment): Statement.Fragment => {
  const start = windowsStart(sql)
  return sql`CASE WHEN ${at} > ${start} THEN least(${sql.literal(String(COMPLETED_WINDOWS - 1))},
    floor(extract(epoch FROM ${at} - ${start}) / ${sql.literal(String(COMPLETED_WINDOW_SECONDS))}))::int END`
}

/**
 * One row: `groups` (what `groups` selected, as JSON) and the age of the oldest due item. `groups` must select the
 * columns `state` (text, NULL for a row that only counts completions), `bucket` (`completionBucket`, NULL for a row
 * that completed nothing in the last hour) and `count` (int), typically one aggregate pass grouped by the first two.
 * `dueSince` is a scalar subquery: when the oldest due item became due (at or before `now()`), NULL when nothing is due.
 */
export const queueViewQuery = (
  sql: SqlClient.SqlClient,
  parts: { readonly groups: Statement.Fragment; readonly dueSince: Statement.Fragment }
) =>
  sql`
    SELECT coalesce((SELECT json_agg(g) FROM (${parts.groups}) g), '[]'::json) AS groups,
           extract(epoch FROM now() - (${parts.dueSince}))::float8 AS oldest_due_age_seconds`

export const QueueViewRow = Schema.Struct({
  groups: Schema.Array(Schema.Struct({
    state: Schema.NullOr(Schema.String),
    bucket: Schema.NullOr(Schema.Int.pipe(Schema.between(0, COMPLETED_WINDOWS - 1))),
    count: Schema.Int
  })),
  oldest_due_age_seconds: Schema.NullOr(Schema.Number)
})
export type QueueViewRow = typeof QueueViewRow.Type

/**
 * The snapshot of a `queueViewQuery` row: every state of `states` in that order, zeros included (a state the list
 * lacks is appended rather than dropped, so the totals stay true), and the twelve windows.
 */
export const queueSnapshotOf = (family: string, states: ReadonlyArray<string>) => (row: QueueViewRow): QueueSnapshot => {
  const counts = new Map<string, number>(states.map((state) => [state, 0]))
  const completed = Array.from({ length: COMPLETED_WINDOWS }, () => 0)
  for (const group of row.groups) {
    if (group.state !== null) counts.set(group.state, (counts.get(group.state) ?? 0) + group.count)
    if (group.bucket !== null) completed[group.bucket] = (completed[group.bucket] ?? 0) + group.count
  }
  return {
    family,
    states: [...counts].map(([state, count]) => ({ state, count })),
    oldestDueAgeSeconds: row.oldest_due_age_seconds,
    completedLastHour: completed
  }
}
