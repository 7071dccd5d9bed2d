import { connect } from "@delivery/testing"
import type { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { TENANT } from "./Fixtures.ts"

// Read-only SQL, for what no HTTP route shows (claims held at the kill, each reset row's state, inbox identities).
// Every read runs in a READ ONLY transaction, so the proof cannot write an outcome with SQL even by mistake:
// recovery stays unattended.

export interface ResetRow {
  readonly id: string
  readonly state: string
  readonly reason: string | null
}

export interface ClaimRow {
  readonly id: string
  readonly state: string
}

export interface InboxRow {
  readonly producer: string
  readonly sequence: number
  readonly event_id: string
  readonly event_identity: string
  readonly payloads: number
}

/** What each family's durable state held at one moment (at the kill: which claims were held). */
export interface Snapshot {
  readonly resets: ReadonlyArray<ResetRow>
  /** Receipt notify effects only (pending, running, done). */
  readonly receiptNotifies: ReadonlyArray<ClaimRow>
  readonly messages: ReadonlyArray<ClaimRow>
  /** Team-application notifications: processing while an attempt holds an unexpired lease at that moment. */
  readonly notifications: ReadonlyArray<ClaimRow>
}

export const makeReads = (databaseUrl: string) =>
  Effect.gen(function* () {
    const sql: SqlClient.SqlClient = yield* connect(databaseUrl, { maxConnections: 2 })

    const readOnly = <A, E, R>(query: Effect.Effect<A, E, R>) =>
      sql.withTransaction(Effect.zipRight(sql`SET TRANSACTION READ ONLY`.withoutTransform, query))

    /** Whether the session really refuses writes (`transaction_read_only` inside the wrapper). */
    const isReadOnly = readOnly(sql<{ readonly transaction_read_only: string }>`SHOW transaction_read_only`.withoutTransform).pipe(
      Effect.map((rows) => rows[0]?.transaction_read_only === "on")
    )

    const resets = readOnly(sql<ResetRow>`
      SELECT id::text AS id, state, reason FROM reset_mail_outbox WHERE tenant_id = ${TENANT} ORDER BY id`.withoutTransform)

    /** Each family's claims as the database holds them, a lease counted as held when it runs past `at`. */
    const snapshot = (at: Date) => readOnly(Effect.all({
      resets: sql<ResetRow>`
        SELECT id::text AS id, state, reason FROM reset_mail_outbox WHERE tenant_id = ${TENANT} ORDER BY id`.withoutTransform,
      receiptNotifies: sql<ClaimRow>`
        SELECT id::text AS id, state FROM receipt_effects WHERE tenant_id = ${TENANT} AND kind = 'notify' ORDER BY id`.withoutTransform,
      messages: sql<ClaimRow>`
        SELECT id::text AS id, state FROM outbox_messages WHERE tenant = ${TENANT} ORDER BY id`.withoutTransform,
      notifications: sql<ClaimRow>`
        SELECT o.effect_id::text AS id,
               CASE WHEN o.outcome IS NOT NULL THEN o.outcome
                    WHEN q.acquired_by IS NOT NULL AND NOT q.completed AND q.lease_expires_at > ${at} THEN 'processing'
                    ELSE 'waiting' END AS state
        FROM team_application_outbox o LEFT JOIN effect_queue q ON q.id = o.effect_id::text
        WHERE o.tenant_id = ${TENANT} ORDER BY o.effect_id`.withoutTransform
    })) as Effect.Effect<Snapshot, unknown>

    const inbox = readOnly(sql<InboxRow>`
      SELECT s.producer, i.sequence::int AS sequence, i.event_id, i.event_identity,
             (SELECT count(*)::int FROM inbox_payloads p WHERE p.stream_id = i.stream_id AND p.sequence = i.sequence) AS payloads
      FROM inbox_identities i JOIN inbox_streams s ON s.stream_id = i.stream_id
      WHERE s.tenant = ${TENANT}
      ORDER BY s.producer, i.sequence`.withoutTransform)

    /** Operator redrives of outbox dead letters ever recorded (each is audited in its own transaction). */
    const redrives = readOnly(sql<{ readonly n: number }>`
      SELECT count(*)::int AS n FROM outbox_audit WHERE tenant = ${TENANT} AND action = 'redrive'`.withoutTransform).pipe(
      Effect.map((rows) => rows[0]?.n ?? 0)
    )

    return { isReadOnly, resets, snapshot, inbox, redrives } as const
  })

export type Reads = Effect.Effect.Success<ReturnType<typeof makeReads>>
