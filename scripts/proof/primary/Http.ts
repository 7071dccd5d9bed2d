import { Effect } from "effect"

// The primary scenario talks to the backends the way any client does: plain HTTP on a fresh connection, bounded in
// time. A transport failure (a killed process, a refused connection, a timeout) is an answer too, status 0 with
// its code, never an exception: the scenario records it as a check instead of stopping.

export interface Answer {
  /** 0 when no HTTP answer arrived. */
  readonly status: number
  readonly json: any
  /** The transport failure's code when status is 0. */
  readonly failure?: string
}

export interface CallOptions {
  readonly token?: string
  /** A value is sent as JSON; bytes as they are (with `contentType`). */
  readonly body?: unknown
  readonly contentType?: string
  readonly timeoutMs?: number
}

const jsonOf = (text: string): unknown => {
  try {
    return text === "" ? undefined : JSON.parse(text)
  } catch {
    return undefined
  }
}

const failureCode = (error: unknown): string => {
  const e = error as { readonly name?: string; readonly code?: string; readonly cause?: { readonly code?: string } }
  return e?.code ?? e?.cause?.code ?? e?.name ?? "error"
}

/** One line per request the scenario made: the route, when it was sent, and its status (0: it reached nothing). */
export interface JournalEntry {
  readonly method: string
  readonly path: string
  readonly at: number
  readonly status: number
}

const journal: Array<JournalEntry> = []

/** The requests sent between `from` and `until` (times in milliseconds). */
export const journalBetween = (from: number, until: number) => journal.filter((entry) => entry.at >= from && entry.at <= until)

export const call = (baseUrl: string, method: string, path: string, options: CallOptions = {}) =>
  Effect.promise(async (): Promise<Answer> => {
    const at = Date.now()
    const answered = (answer: Answer) => (journal.push({ method, path, at, status: answer.status }), answer)
    const headers: Record<string, string> = { connection: "close" }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    let body: string | Uint8Array | undefined
    if (options.body instanceof Uint8Array) {
      body = options.body
      headers["content-type"] = options.contentType ?? "application/octet-stream"
    } else if (options.body !== undefined) {
      body = JSON.stringify(options.body)
      headers["content-type"] = "application/json"
    }
    try {
      const response = await fetch(`${baseUrl}${path}`, {
        method,
        headers,
        body,
        signal: AbortSignal.timeout(options.timeoutMs ?? 15_000)
      })
      const text = await response.text()
      return answered({ status: response.status, json: jsonOf(text) })
    } catch (error) {
      return answered({ status: 0, json: undefined, failure: failureCode(error) })
    }
  })

/**
 * Polls `probe` every `everyMs` until `done` holds or `timeoutMs` passes: the last value and whether it held, so a
 * wait that runs out becomes a failing check rather than a hang.
 */
export const pollUntil = <A, E, R>(
  probe: Effect.Effect<A, E, R>,
  done: (value: A) => boolean,
  options: { readonly timeoutMs: number; readonly everyMs?: number }
) =>
  Effect.gen(function* () {
    const deadline = Date.now() + options.timeoutMs
    for (;;) {
      const value = yield* probe
      if (done(value)) return { ok: true as const, value, at: Date.now() }
      if (Date.now() >= deadline) return { ok: false as const, value, at: Date.now() }
      yield* Effect.sleep(options.everyMs ?? 100)
    }
  })
