import { Effect } from "effect"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"

// A real HTTP provider on 127.0.0.1 for tests and the recovery proof. node:http
// (rather than Bun.serve) because it can destroy a socket after reading a
// request and report when a client goes away mid-request.

export type LoopbackReply =
  | {
    readonly _tag: "Respond"
    readonly status: number
    readonly retryAfter?: string
    readonly headers?: Readonly<Record<string, string>>
    readonly body?: string
    /** Answers this long after the request was read (a receiver doing some work). */
    readonly delayMs?: number
  }
  /** Holds the response until `release` or until the client aborts. */
  | { readonly _tag: "Hang"; readonly accept: boolean }
  /** Destroys the socket after reading the request. */
  | { readonly _tag: "Drop"; readonly accept: boolean }

export type LoopbackRespond = Extract<LoopbackReply, { readonly _tag: "Respond" }>

export interface LoopbackRespondOptions {
  readonly retryAfter?: string
  readonly headers?: Readonly<Record<string, string>>
  readonly body?: string
  readonly delayMs?: number
}

export const LoopbackReply = {
  status: (status: number, options: LoopbackRespondOptions = {}): LoopbackRespond => ({
    _tag: "Respond",
    status,
    ...options
  }),
  /** `accept: true` records a delivery before hanging: the acknowledgement is what gets lost. */
  hang: (options: { readonly accept?: boolean } = {}): LoopbackReply => ({
    _tag: "Hang",
    accept: options.accept ?? false
  }),
  /** `accept: true` records a delivery before dropping: the acknowledgement is what gets lost. */
  drop: (options: { readonly accept?: boolean } = {}): LoopbackReply => ({
    _tag: "Drop",
    accept: options.accept ?? false
  })
} as const

/**
 * A scripted answer. Rules naming a `key` win over rules naming a `path`,
 * which win over rules naming neither; within each kind the earliest scripted
 * rule wins. `times` limits a rule to the next N matching requests; without
 * it the rule holds until `reset`. Unmatched requests get 200.
 */
export interface LoopbackRule {
  readonly key?: string
  readonly path?: string
  readonly times?: number
  readonly reply: LoopbackReply
}

export type LoopbackHandling = "pending" | "responded" | "replayed" | "hung" | "dropped"

export interface RecordedRequest {
  readonly seq: number
  readonly method: string
  readonly path: string
  /** Lower-case names, as node:http reports them. */
  readonly headers: Readonly<Record<string, string>>
  readonly idempotencyKey: string | undefined
  readonly body: Uint8Array
  readonly bodyText: string
  readonly receivedAt: Date
  readonly handling: LoopbackHandling
  readonly status: number | undefined
  /** When the answer was written; undefined while pending, hung, dropped or aborted. */
  readonly answeredAt: Date | undefined
  /** The client closed the connection before getting an answer. */
  readonly clientAborted: boolean
}

/** A request the provider accepted for the first time under its key. */
export interface LoopbackDelivery {
  readonly idempotencyKey: string | undefined
  readonly path: string
  readonly body: Uint8Array
  readonly status: number
  readonly requestSeq: number
  readonly deliveredAt: Date
}

interface StoredAnswer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

interface Live {
  record: RecordedRequest
  readonly res: Http.ServerResponse
}

const answerOf = (reply: LoopbackRespond): StoredAnswer => ({
  status: reply.status,
  headers: { ...reply.headers, ...(reply.retryAfter !== undefined ? { "retry-after": reply.retryAfter } : {}) },
  body: reply.body ?? ""
})

const headersOf = (req: Http.IncomingMessage): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) out[name] = Array.isArray(value) ? value.join(", ") : value
  }
  return out
}

export const makeLoopbackProvider = Effect.gen(function*() {
  const clock = yield* Effect.clock
  const now = () => new Date(clock.unsafeCurrentTimeMillis())

  let rules: Array<{ rule: LoopbackRule; left: number }> = []
  let requests: Array<Live> = []
  let deliveries: Array<LoopbackDelivery> = []
  // The provider's idempotency store: the first 2xx answer given per key.
  let answered = new Map<string, StoredAnswer>()
  let hung = new Set<Live>()
  let delayed = new Set<ReturnType<typeof setTimeout>>()
  const listeners = new Set<() => void>()
  const changed = () => listeners.forEach((notify) => notify())

  const update = (live: Live, patch: Partial<RecordedRequest>) => {
    live.record = { ...live.record, ...patch }
    changed()
  }

  const pick = (path: string, key: string | undefined): LoopbackReply | undefined => {
    const kinds = [
      (r: LoopbackRule) => r.key !== undefined && r.key === key && (r.path === undefined || r.path === path),
      (r: LoopbackRule) => r.key === undefined && r.path === path,
      (r: LoopbackRule) => r.key === undefined && r.path === undefined
    ]
    for (const matches of kinds) {
      const entry = rules.find((e) => e.left > 0 && matches(e.rule))
      if (entry) {
        entry.left -= 1
        return entry.rule.reply
      }
    }
    return undefined
  }

  const accept = (live: Live, answer: StoredAnswer) => {
    const { idempotencyKey: key, path, body, seq } = live.record
    if (key !== undefined) answered.set(key, answer)
    deliveries.push({ idempotencyKey: key, path, body, status: answer.status, requestSeq: seq, deliveredAt: now() })
  }

  const respond = (live: Live, reply: LoopbackRespond) => {
    const key = live.record.idempotencyKey
    let answer = answerOf(reply)
    let handling: LoopbackHandling = "responded"
    if (answer.status >= 200 && answer.status < 300) {
      const previous = key !== undefined ? answered.get(key) : undefined
      if (previous) {
        // A retry of an accepted key gets the original answer and is not a new delivery.
        answer = previous
        handling = "replayed"
      } else {
        accept(live, answer)
      }
    }
    live.res.writeHead(answer.status, { ...answer.headers })
    live.res.end(answer.body)
    update(live, { handling, status: answer.status, answeredAt: now() })
  }

  const respondLater = (live: Live, reply: LoopbackRespond) => {
    if (reply.delayMs === undefined || reply.delayMs <= 0) return respond(live, reply)
    const timer = setTimeout(() => {
      delayed.delete(timer)
      // A client that went away meanwhile gets nothing, and nothing is accepted for it.
      if (!live.res.destroyed) respond(live, reply)
    }, reply.delayMs)
    delayed.add(timer)
  }

  const acceptOnce = (live: Live) => {
    const key = live.record.idempotencyKey
    if (key === undefined || !answered.has(key)) accept(live, { status: 200, headers: {}, body: "" })
  }

  const handle = (live: Live) => {
    const reply = pick(live.record.path, live.record.idempotencyKey) ?? LoopbackReply.status(200)
    switch (reply._tag) {
      case "Respond":
        return respondLater(live, reply)
      case "Hang":
        if (reply.accept) acceptOnce(live)
        hung.add(live)
        return update(live, { handling: "hung" })
      case "Drop":
        if (reply.accept) acceptOnce(live)
        update(live, { handling: "dropped" })
        return live.res.socket?.destroy()
    }
  }

  const server = Http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const bytes = Buffer.concat(chunks)
      const headers = headersOf(req)
      const live: Live = {
        res,
        record: {
          seq: requests.length + 1,
          method: req.method ?? "",
          path: (req.url ?? "/").split("?")[0]!,
          headers,
          idempotencyKey: headers["idempotency-key"],
          body: new Uint8Array(bytes),
          bodyText: bytes.toString("utf8"),
          receivedAt: now(),
          handling: "pending",
          status: undefined,
          answeredAt: undefined,
          clientAborted: false
        }
      }
      requests.push(live)
      res.on("close", () => {
        hung.delete(live)
        if (!res.writableEnded && live.record.handling !== "dropped") update(live, { clientAborted: true })
      })
      handle(live)
      // A delayed answer changes nothing yet: waiters for the request itself are told here.
      changed()
    })
  })

  const port = yield* Effect.acquireRelease(
    Effect.async<number>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
    }),
    () =>
      Effect.async<void>((resume) => {
        for (const live of hung) live.res.socket?.destroy()
        for (const timer of delayed) clearTimeout(timer)
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )

  const waitFor = <A>(ready: () => A | undefined): Effect.Effect<A> =>
    Effect.async<A>((resume) => {
      const check = () => {
        const value = ready()
        if (value === undefined) return false
        listeners.delete(check)
        resume(Effect.succeed(value))
        return true
      }
      if (check()) return
      listeners.add(check)
      return Effect.sync(() => listeners.delete(check))
    })

  const snapshot = () => requests.map((live) => live.record)
  const url = `http://127.0.0.1:${port}`

  return {
    port,
    url,
    urlFor: (path: string) => url + path,
    script: (...scripted: ReadonlyArray<LoopbackRule>) =>
      Effect.sync(() => {
        for (const rule of scripted) rules.push({ rule, left: rule.times ?? Number.POSITIVE_INFINITY })
      }),
    /** Every request, in arrival order, retries and replays included. */
    requests: Effect.sync(snapshot),
    /** Distinct accepted keys (each key once, however often it was retried). */
    deliveries: Effect.sync(() => deliveries.slice()),
    /** Answers every hung request with `reply` (default 200), subject to the idempotency store. */
    release: (reply: LoopbackRespond = LoopbackReply.status(200)) =>
      Effect.sync(() => {
        const released = [...hung]
        hung = new Set()
        released.forEach((live) => respond(live, reply))
        return released.length
      }),
    /** Forgets rules, requests, deliveries and the idempotency store; hung connections are dropped. */
    reset: Effect.sync(() => {
      for (const live of hung) live.res.socket?.destroy()
      for (const timer of delayed) clearTimeout(timer)
      delayed = new Set()
      rules = []
      requests = []
      deliveries = []
      answered = new Map()
      hung = new Set()
    }),
    awaitRequests: (n: number) => waitFor(() => (requests.length >= n ? snapshot() : undefined)),
    awaitAborts: (n: number) =>
      waitFor(() => {
        const aborted = snapshot().filter((r) => r.clientAborted)
        return aborted.length >= n ? aborted : undefined
      })
  }
})

export class LoopbackProvider extends Effect.Service<LoopbackProvider>()("@delivery/testing/LoopbackProvider", {
  scoped: makeLoopbackProvider
}) {}
