import { Effect } from "effect"
import { connect } from "node:net"

/** A response as raw bytes arrived on the socket: status, lower-cased headers, body. */
export interface RawAnswer {
  readonly raw: string
  readonly status: number | undefined
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
}

export const parseRaw = (raw: string): RawAnswer => {
  const end = raw.indexOf("\r\n\r\n")
  const head = end < 0 ? raw : raw.slice(0, end)
  const [statusLine, ...lines] = head.split("\r\n")
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? "")?.[1]
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(":")
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  return { raw, status: status === undefined ? undefined : Number(status), headers, body: end < 0 ? "" : raw.slice(end + 4) }
}

/**
 * Writes `request` exactly as given on a new TCP connection and collects what comes back until the server
 * closes the connection or `waitMs` passes: for requests a normal client library would refuse to send.
 */
export const rawExchange = (port: number, request: string | Uint8Array, waitMs = 2_000) =>
  Effect.async<RawAnswer>((resume) => {
    const socket = connect({ host: "127.0.0.1", port })
    let data = ""
    let done = false
    const finish = () => {
      if (done) return
      done = true
      clearTimeout(timer)
      socket.destroy()
      resume(Effect.succeed(parseRaw(data)))
    }
    const timer = setTimeout(finish, waitMs)
    socket.on("data", (chunk) => (data += chunk.toString("latin1")))
    socket.on("error", finish)
    socket.on("close", finish)
    socket.write(request)
  })
