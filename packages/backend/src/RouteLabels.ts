import { HttpApi } from "@effect/platform"
import * as FindMyWay from "find-my-way-ts"

/** The label of a request that matches no route: its path is whatever the client sent, so it is not kept. */
export const UNMATCHED = "unmatched"

const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])

/** A method label from a closed set: Bun accepts any token as a method. */
export const methodLabel = (method: string) => (METHODS.has(method) ? method : "OTHER")

/** A path the backend serves outside its HttpApi (documents, the scrape, the console), under a label of its own. */
export interface ServedPath {
  readonly method: string | "*"
  readonly path: `/${string}`
  readonly label: string
}

/** What the backend's role serves besides its API; paths of a role that does not serve them never match anything served. */
export const SERVED_PATHS: ReadonlyArray<ServedPath> = [
  { method: "GET", path: "/docs", label: "/docs" },
  { method: "GET", path: "/openapi.json", label: "/openapi.json" },
  { method: "GET", path: "/metrics", label: "/metrics" },
  { method: "*", path: "/console", label: "/console/*" },
  { method: "*", path: "/console/*", label: "/console/*" }
]

export interface RouteLabels {
  /** The route template of `method` and `url` (a path and query, or an absolute URL), or `unmatched`. */
  readonly of: (method: string, url: string) => string
}

/**
 * Route labels for metrics and span names: the endpoint's path template (`/operator/outbox/dead-letters/:tenant/:project`),
 * never the path itself. Built once from the API's own endpoints with the router library the platform routes with,
 * so a path gets the template of the route that serves it, whoever answers it (the route, the gate, the edge).
 */
export const routeLabels = (api: HttpApi.HttpApi.Any, served: ReadonlyArray<ServedPath> = SERVED_PATHS): RouteLabels => {
  const router = FindMyWay.make<string>()
  HttpApi.reflect(api as HttpApi.HttpApi<string, any, any, any>, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => router.on(endpoint.method, endpoint.path as `/${string}`, endpoint.path)
  })
  for (const { label, method, path } of served) {
    try {
      if (method === "*") router.all(path, label)
      else router.on(method, path, label)
    } catch {
      // An API endpoint has this method and path already: its template is the label.
    }
  }
  const pathOf = (url: string) => {
    if (url.startsWith("/")) return url
    const start = url.indexOf("/", url.indexOf("//") + 2)
    return start === -1 ? "/" : url.slice(start)
  }
  return {
    of: (method, url) => {
      const path = pathOf(url)
      // The router answers HEAD with the GET route.
      const found = router.find(method, path) ?? (method === "HEAD" ? router.find("GET", path) : undefined)
      return found?.handler ?? UNMATCHED
    }
  }
}
