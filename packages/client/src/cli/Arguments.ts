import { Args, Options } from "@effect/cli"
import { AccountId, IdPattern, maxExpiresInSeconds, TenantId } from "@delivery/identity"
import { MessageId, ProjectId } from "@delivery/outbox"
import { KeyId, ProducerId } from "@delivery/signer"
import { Schema } from "effect"

// Arguments are checked with the schemas the API applies, so a bad one is a usage error (exit 2) before any
// request: the typed client would otherwise refuse to encode it, which could not be told from a bad answer.

export const tenant = Args.text({ name: "tenant" }).pipe(Args.withSchema(TenantId), Args.withDescription("tenant id"))
export const project = Args.text({ name: "project" }).pipe(Args.withSchema(ProjectId), Args.withDescription("project id"))
export const producer = Args.text({ name: "producer" }).pipe(Args.withSchema(ProducerId), Args.withDescription("producer id"))
export const keyId = Args.text({ name: "keyId" }).pipe(Args.withSchema(KeyId), Args.withDescription("signing key id"))
export const messageId = Args.text({ name: "id" }).pipe(Args.withSchema(MessageId), Args.withDescription("outbox message id (a UUID)"))

export const accountArg = Args.text({ name: "account" }).pipe(Args.withSchema(AccountId), Args.withDescription("account id"))
export const accountOption = Options.text("account").pipe(Options.withSchema(AccountId), Options.withDescription("account id"))

const PageLimit = Schema.Int.pipe(Schema.between(1, 100))

/** `--limit` and `--after` of the provisioning lists (pages by id, at most 100). */
export const page = {
  limit: Options.integer("limit").pipe(Options.withSchema(PageLimit), Options.withDescription("1 to 100 (default 100)"), Options.optional),
  after: Options.text("after").pipe(
    Options.withSchema(Schema.String.pipe(Schema.pattern(IdPattern))),
    Options.withDescription("the id printed after `more:` by the previous page"),
    Options.optional
  )
}

/** `--expires-in`: seconds from now; the API takes 1 to ten years. */
export const expiresIn = Options.integer("expires-in").pipe(
  Options.withSchema(Schema.Int.pipe(Schema.between(1, maxExpiresInSeconds))),
  Options.withDescription("seconds until the credential expires (absent: until revoked)"),
  Options.optional
)
