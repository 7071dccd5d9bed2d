import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Option, Schedule, Stream } from "effect"
import { type StackState } from "./CloudDomain.ts"
import { CloudStacksRepo, type RouteRow } from "./CloudStacksRepo.ts"

// The wake proxy's routing table: host → stack, state and upstream, in this process's memory so that a request to an
// awake stack is forwarded without a query. It is a cache of the database, never the authority: every change of a
// stack or host notifies at commit (migration 0022's triggers) and the affected stack's routes are read again; a full
// read every REFRESH_INTERVAL covers a missed notification (a dropped listener connection). Anything but a
// forwardable state is decided on a fresh read from the database, never from this table.

const REFRESH_INTERVAL = Duration.seconds(5)
const CHANNEL = "idle_wake_cloud_routes"

export interface Route {
  readonly host: string
  readonly stack: string
  readonly state: StackState
  readonly upstream: string | null
}

/**
 * Whether a request may go straight to the compute: the stack is awake, or a sleep cycle is still reading it (the
 * tenant is up; if it holds, its own 503 with Retry-After is the truthful answer). Every other state waits or wakes.
 */
export const isForwardable = <R extends { readonly state: string; readonly upstream: string | null }>(
  route: R
): route is R & { readonly upstream: string } => route.upstream !== null && (route.state === "awake" || route.state === "draining")

const toRoute = (row: RouteRow): Route => ({
  host: row.host,
  stack: row.stack_id,
  state: row.state as StackState,
  upstream: row.upstream
})

export class Routing extends Effect.Service<Routing>()("@delivery/idle-wake/Routing", {
  scoped: Effect.gen(function* () {
    const repo = yield* CloudStacksRepo
    const pg = yield* PgClient.PgClient
    let byHost = new Map<string, Route>()

    const replaceAll = (rows: ReadonlyArray<RouteRow>) => {
      byHost = new Map(rows.map((row) => [row.host, toRoute(row)]))
    }

    const replaceStack = (stack: string, rows: ReadonlyArray<RouteRow>) => {
      for (const [host, route] of byHost) if (route.stack === stack) byHost.delete(host)
      for (const row of rows) byHost.set(row.host, toRoute(row))
    }

    const reloadStack = (stack: string) =>
      Effect.map(repo.routes({ stack }), (rows) => replaceStack(stack, rows))

    const reloadAll = Effect.map(repo.routes({}), replaceAll)

    // The first read must succeed: a proxy without its table would refuse every host.
    yield* reloadAll
    yield* pg.listen(CHANNEL).pipe(
      Stream.runForEach((stack) => Effect.ignore(reloadStack(stack))),
      Effect.catchAll((error) => Effect.logWarning("routing notifications lost; listening again", error)),
      Effect.repeat(Schedule.spaced(Duration.seconds(1))),
      Effect.forkScoped
    )
    yield* reloadAll.pipe(
      Effect.catchAll((error) => Effect.logWarning("routing refresh failed", error)),
      Effect.repeat(Schedule.spaced(REFRESH_INTERVAL)),
      Effect.delay(REFRESH_INTERVAL),
      Effect.forkScoped
    )

    /** The cached route of a host (already lower-case, without port). */
    const lookup = (host: string): Route | undefined => byHost.get(host)

    /** A fresh read of one host's route from the database; the cache follows it. */
    const fresh = (host: string) =>
      Effect.map(repo.routes({ host }), (rows) => {
        const row = rows[0]
        if (row === undefined) {
          byHost.delete(host)
          return Option.none<Route>()
        }
        const route = toRoute(row)
        byHost.set(host, route)
        return Option.some(route)
      })

    /** After this process changed a stack: its routes now, without waiting for the notification. */
    const changed = (stack: string) => Effect.ignore(reloadStack(stack))

    const size = () => byHost.size

    return { lookup, fresh, changed, size } as const
  })
}) {}
