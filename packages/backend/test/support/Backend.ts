import { ApiKeyName, DeviceId, Email, Identity, Permission, TenantId } from "@delivery/identity"
import { ENQUEUE_PERMISSION } from "@delivery/outbox"
import { Effect, Redacted, Schema } from "effect"

export { OPERATOR_TOKEN, startBackend } from "@delivery/testing"

/** A tenant with one account, an API key allowed to enqueue, and a device credential (device `d-1`). */
export const tenantWithCredentials = (name: string) =>
  Effect.gen(function* () {
    const identity = yield* Identity
    const tenant = TenantId.make(name)
    yield* identity.createTenant(tenant)
    const account = yield* identity.createAccount({ tenant, email: Schema.decodeSync(Email)(`ops@${name}.example`) })
    const apiKey = yield* identity.issueApiKey({
      tenant,
      account,
      kind: "agent",
      name: ApiKeyName.make("scheduler"),
      permissions: [Permission.make(ENQUEUE_PERMISSION)]
    })
    const device = yield* identity.issueDeviceCredential({ tenant, account, device: DeviceId.make("d-1") })
    return { tenant, account, apiKey: Redacted.value(apiKey.token), device: Redacted.value(device.token) }
  }).pipe(Effect.provide(Identity.Default))

/** The backend's log, one string per entry: the logger writes a header line, then one line per annotation. */
export const logEntries = (output: string): Array<string> => output.split(/\n(?=\[\d\d:\d\d:\d\d\.\d{3}\] )/)

/** The value of one annotation of a log entry (`  name: value`). */
export const annotation = (entry: string, name: string) => new RegExp(`\\n  ${name}: (.*)`).exec(entry)?.[1]
