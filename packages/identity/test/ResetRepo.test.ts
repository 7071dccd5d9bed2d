import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { TestDatabaseLive } from "@delivery/testing/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Option, Schema } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { Email, Identity, TenantId } from "../src/index.ts"
import { ResetRepo } from "../src/ResetRepo.ts"

const TestLayer = Layer.mergeAll(Identity.Default, ResetRepo.Default).pipe(Layer.provideMerge(TestDatabaseLive))

layer(TestLayer, { excludeTestServices: true })("password-reset verifications (real PostgreSQL)", (it) => {
  it.effect("A reset is one event: two completions with two tokens of one account serialize on the account, never deadlock; the second sees its token consumed", () =>
    Effect.gen(function*() {
      const identity = yield* Identity
      const repo = yield* ResetRepo
      const sql = yield* SqlClient.SqlClient
      const tenant = TenantId.make(`t-${randomBytes(5).toString("hex")}`)
      yield* identity.createTenant(tenant)
      const account = yield* identity.createAccount({ tenant, email: Schema.decodeSync(Email)(`ops@${tenant}.example`) })
      const at = new Date()
      const lookups = [randomBytes(32), randomBytes(32)] as const
      for (const lookup of lookups) {
        yield* repo.insert({ id: randomUUID(), tenant, account, lookup, sealed: randomBytes(48), expiresAt: new Date(at.getTime() + 3_600_000), at })
      }

      const firstLocked = yield* Deferred.make<void>()
      const firstMayComplete = yield* Deferred.make<void>()
      const first = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
        const row = yield* repo.lockByLookup(lookups[0])
        yield* Deferred.succeed(firstLocked, undefined)
        yield* Deferred.await(firstMayComplete)
        yield* repo.complete({ tenant, account, passwordHash: "$argon2id$v=19$m=65536,t=2,p=1$c2FsdA$aGFzaA", at })
        return row
      })))
      yield* Deferred.await(firstLocked)
      // The second completion starts while the first holds its locks, and waits.
      const second = yield* Effect.fork(sql.withTransaction(repo.lockByLookup(lookups[1])))
      yield* Effect.sleep("300 millis")
      yield* Deferred.succeed(firstMayComplete, undefined)

      const firstRow = yield* Fiber.join(first)
      expect(Option.map(firstRow, (row) => row.consumed_at)).toEqual(Option.some(null))
      const secondExit = yield* Fiber.await(second)
      // Locking its own token before the account, the second would hold what the first's completion must update:
      // PostgreSQL breaks the deadlock by failing one of them (storage unavailable).
      expect(Exit.isSuccess(secondExit)).toBe(true)
      const secondRow = Exit.isSuccess(secondExit) ? secondExit.value : Option.none()
      expect(Option.map(secondRow, (row) => row.consumed_at !== null)).toEqual(Option.some(true))
    }))
})
