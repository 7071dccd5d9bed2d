import { Effect } from "effect"
import { connect } from "node:net"
import { parseRaw } from "@delivery/testing"

export interface Answer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly text: string
  /** The body as JSON, or undefined when it is empty or not JSON. */
  readonly json: any
}

const jsonOf = (text: string): unknown => {
  try {
    return text === "" ? undefined : JSON.parse(text)
  } catch {
    return undefined
  }
}

export interface CallOptions {
  readonly headers?: Readonly<Record<string, string>>
  readonly token?: string
  /** A value is sent as JSON; a string or bytes as they are; a stream chunked (no Content-Length). */
  readonly body?: unknown
}

/** One request on a fresh connection (`Connection: close`), so no pooled connection hides what the server does. */
export const call = (port: number, method: string, path: string, options: CallOptions = {}) =>
  Effect.promise(async (): Promise<Answer> => {
    const headers: Record<string, string> = { connection: "close", ...options.headers }
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
    let body: RequestInit["body"]
    if (options.body instanceof ReadableStream || typeof options.body === "string" || options.body instanceof Uint8Array) {
      body = options.body as RequestInit["body"]
      headers["content-type"] ??= "application/json"
    } else if (options.body !== undefined) {
      body = JSON.stringify(options.body)
      headers["content-type"] ??= "application/json"
    }
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      method,
      headers,
      body,
      ...(options.body instanceof ReadableStream ? { duplex: "half" } : {})
    } as RequestInit)
    const text = await response.text()
    return { status: response.status, headers: Object.fromEntries(response.headers), text, json: jsonOf(text) }
  })

/** What one keep-alive client saw for one request. */
export type LoadOutcome =
  | { readonly _tag: "Answer"; readonly status: number; readonly connection: string | undefined; readonly correlationId: string | undefined; readonly retryAfter: string | undefined; readonly body: string }
  /** The connection broke before a whole answer arrived: `reused` when earlier answers came on it. */
  | { readonly _tag: "Broken"; readonly code: string; readonly reused: boolean }

/**
 * One HTTP/1.1 client on raw sockets that sends `GET path` continuously, one request at a time, reusing its
 * connection until an answer says `Connection: close` or the connection breaks, then opening a new one. It
 * stops when a new connection is refused or `until` passes. Raw sockets, so that nothing is retried or hidden.
 */
export const keepAliveClient = (port: number, path: string, until: number) =>
  Effect.promise(async () => {
    const outcomes: Array<LoadOutcome> = []
    while (Date.now() < until) {
      const socket = connect({ host: "127.0.0.1", port })
      const opened = await new Promise<boolean>((resolve) => {
        socket.once("connect", () => resolve(true))
        socket.once("error", () => resolve(false))
      })
      if (!opened) break
      let buffer = ""
      let pending: ((outcome: LoadOutcome) => void) | undefined
      let answered = 0
      let closed = false
      const settle = (outcome: LoadOutcome) => {
        const resolve = pending
        pending = undefined
        resolve?.(outcome)
      }
      socket.on("data", (chunk) => {
        buffer += chunk.toString("latin1")
        const end = buffer.indexOf("\r\n\r\n")
        if (end < 0) return
        const answer = parseRaw(buffer)
        const length = Number(answer.headers["content-length"] ?? 0)
        if (buffer.length < end + 4 + length) return
        buffer = buffer.slice(end + 4 + length)
        answered++
        settle({
          _tag: "Answer",
          status: answer.status!,
          connection: answer.headers.connection,
          correlationId: answer.headers["x-correlation-id"],
          retryAfter: answer.headers["retry-after"],
          body: answer.body.slice(0, length)
        })
      })
      const broken = (code: string) => {
        closed = true
        settle({ _tag: "Broken", code, reused: answered > 0 })
      }
      socket.on("error", (error: NodeJS.ErrnoException) => broken(error.code ?? "error"))
      socket.on("close", () => broken("closed"))
      // A connection the server closed while it was idle lost nothing: the client just opens another.
      for (; !closed;) {
        const outcome = await new Promise<LoadOutcome>((resolve) => {
          pending = resolve
          socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)
        })
        outcomes.push(outcome)
        if (outcome._tag === "Broken" || outcome.connection === "close" || Date.now() >= until) break
      }
      socket.destroy()
    }
    return outcomes
  })
