/**
 * What `bun run mutate <package>` mutates and which tests judge each mutant.
 *
 * Only the rule-bearing modules are mutated: the places where a wrong comparison, a dropped condition or a
 * swapped branch breaks a rule of DESIGN.md. Wiring (HTTP routes, API declarations, domain schemas, config
 * tables, index files) is left out; the HTTP edge is exercised by the backend's process tests.
 *
 * Each run's test command is that package's own tests only: a mutant that only another package's tests can
 * kill shows up as a survivor here, which is the point (the package's own tests should pin its rules).
 *
 * Not mutated at all: SQL. Stryker mutates TypeScript, so the text of a query can only be emptied as a whole
 * (StringLiteral on the `sql` template), and the PL/pgSQL functions in `migrations/*.sql` (for example
 * `inbox_ingest`, which carries the inbox's ordering rules) are out of its reach.
 */
export interface MutatePackage {
  /** Globs (or `file:line-line` ranges) of the modules to mutate, relative to the repository root. */
  readonly mutate: ReadonlyArray<string>
  /** Test paths given to `vitest run`. */
  readonly tests: ReadonlyArray<string>
}

const modules = (pkg: string, names: ReadonlyArray<string>): ReadonlyArray<string> =>
  names.map((name) => `packages/${pkg}/src/${name}.ts`)

export const PACKAGES: Readonly<Record<string, MutatePackage>> = {
  core: {
    mutate: modules("core", ["Lease", "Backoff", "Canonical", "ProviderHttp", "ProviderOutcome", "Spans", "ProviderEndpoint", "Migrations", "BoundedJson", "ConfigValues", "Correlation", "Batcher"]),
    tests: ["packages/core"]
  },
  signer: {
    mutate: modules("signer", ["Envelope", "EnvelopeSignature", "Signer", "KeyManagement", "Ed25519", "KeyList", "KeySource"]),
    tests: ["packages/signer"]
  },
  identity: {
    mutate: modules("identity", [
      "Token",
      "BearerHeader",
      "ResetToken",
      "KeyMaterial",
      "Password",
      "Identity",
      "Peer",
      "PeerLimit",
      "SignInLimit",
      "PasswordResets",
      "AuthenticationLive",
      "OperatorAuthenticationLive"
    ]),
    tests: ["packages/identity"]
  },
  client: {
    mutate: [
      ...modules("client", ["Producer", "Verifier"]),
      ...["KeyFile", "Failure", "Environment", "Arguments"].map((name) => `packages/client/src/cli/${name}.ts`)
    ],
    tests: ["packages/client"]
  },
  "envelope-inbox": {
    mutate: modules("envelope-inbox", ["EnvelopeInbox", "EnvelopeStages", "SyncLimiter", "InboxRetention", "InboxRepo", "RefusalAudit", "StreamRules"]),
    tests: ["packages/envelope-inbox"]
  },
  outbox: {
    mutate: modules("outbox", ["Outbox", "Delivery", "DeliveryRepo", "OutboxWorker", "Lanes", "OutboxConfig", "WebhookSignature", "Sender", "DeliveryRate", "Recorder"]),
    tests: ["packages/outbox"]
  },
  mail: {
    mutate: modules("mail", ["Mail"]),
    tests: ["packages/mail"]
  },
  "reset-mail": {
    mutate: modules("reset-mail", ["ResetMailWorker", "ResetMailRepo", "ResetRequests", "Template"]),
    tests: ["packages/reset-mail"]
  },
  receipts: {
    mutate: modules("receipts", ["ReceiptWork", "Receipts", "ReceiptsRepo", "Notification", "FileStore"]),
    tests: ["packages/receipts"]
  },
  "team-applications": {
    mutate: modules("team-applications", ["EffectQueueStore", "Delivery", "TeamApplications", "Notifications", "TeamApplicationsConfig"]),
    tests: ["packages/team-applications"]
  },
  "idle-wake": {
    mutate: modules("idle-wake", [
      "TenantDrain",
      "Protocol",
      "Fingerprint",
      "KeyProjection",
      "Ingress",
      "Blockers",
      "ConnectorBindings",
      "Connectors",
      "ApiActivity",
      "DrainGate",
      "Gate",
      "Runtimes",
      "LocalWork",
      "IdleWakeConfig",
      "DrainRequests"
    ]),
    tests: ["packages/idle-wake"]
  }
}
