import { describe, expect, it } from "@effect/vitest"
import { Api } from "../src/Api.ts"
import { CloudApi } from "../src/CloudRuntime.ts"
import { methodLabel, routeLabels, UNMATCHED } from "../src/RouteLabels.ts"

// Metrics and span names label a request by its route template: a bounded set whatever clients send.

describe("route labels", () => {
  const labels = routeLabels(Api)

  it("a request gets its endpoint's path template, never its path; the query is not part of it", () => {
    expect(labels.of("GET", "/operator/outbox/dead-letters/acme/web?limit=5&cursor=abc")).toBe("/operator/outbox/dead-letters/:tenant/:project")
    expect(labels.of("POST", "http://127.0.0.1:3000/operator/outbox/dead-letters/acme/web/0190aa/redrive")).toBe(
      "/operator/outbox/dead-letters/:tenant/:project/:id/redrive"
    )
    expect(labels.of("POST", "/controlplane/v1/envelopes")).toBe("/controlplane/v1/envelopes")
    expect(labels.of("HEAD", "/health")).toBe("/health")
  })

  it("no route for the method and path: `unmatched`, so a scan of random paths adds one series, not one per path", () => {
    expect(labels.of("GET", "/wp-admin/setup.php")).toBe(UNMATCHED)
    expect(labels.of("DELETE", "/health")).toBe(UNMATCHED)
    expect(labels.of("OTHER", "/health")).toBe(UNMATCHED)
    expect(labels.of("GET", "/")).toBe(UNMATCHED)
  })

  it("what the backend serves besides its API has a label of its own: documents, the scrape, the console (one label)", () => {
    expect(labels.of("GET", "/docs")).toBe("/docs")
    expect(labels.of("GET", "/openapi.json")).toBe("/openapi.json")
    expect(labels.of("GET", "/metrics")).toBe("/metrics")
    expect(labels.of("GET", "/console")).toBe("/console/*")
    expect(labels.of("POST", "/console/outbox/acme/web/0190aa/redrive")).toBe("/console/*")
    expect(routeLabels(CloudApi).of("GET", "/operator/cloud/stacks/stack-1")).toBe("/operator/cloud/stacks/:stack")
  })

  it("a method outside the usual set is one label, OTHER", () => {
    expect(methodLabel("GET")).toBe("GET")
    expect(methodLabel("BREW")).toBe("OTHER")
    expect(methodLabel("get")).toBe("OTHER")
  })
})
