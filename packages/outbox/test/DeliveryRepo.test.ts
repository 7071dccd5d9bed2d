import { expect, layer } from "@effect/vitest"
import { SqlClient, Statement } from "@effect/sql"
import { PREPARED_MARKER } from "@delivery/core"
import { connect, TestDatabase } from "@delivery/testing"
import { Effect } from "effect"
import { DeliveryRepo } from "../src/DeliveryRepo.ts"
import { OutboxStorageUnavailable } from "../src/index.ts"
import { SuiteLayer } from "./support/OutboxTest.ts"

layer(SuiteLayer, { excludeTestServices: true })("Outbox delivery statements (spec 000, real PostgreSQL)", (it) => {
  it.effect("a database that cannot be reached is a typed OutboxStorageUnavailable naming the statement (peek, claim, each fenced transition), never a defect", () =>
    Effect.gen(function*() {
      // A pool of the suite's database, closed before it is used: every statement fails to connect.
      const closed = yield* Effect.scoped(connect((yield* TestDatabase).url))
      const repo = yield* DeliveryRepo.pipe(Effect.provide(DeliveryRepo.Default), Effect.provideService(SqlClient.SqlClient, closed))
      const now = new Date()
      const fence = { ids: ["00000000-0000-0000-0000-000000000001"], attempts: [1] }
      const failures = yield* Effect.all([
        Effect.flip(repo.peekDue({ now, blocked: [], limit: 100 })),
        Effect.flip(repo.claim({ tenant: "acme", limit: 100, now, leaseUntil: now, owner: "w1" })),
        Effect.flip(repo.markDelivered({ ...fence, now })),
        Effect.flip(repo.markRetry({ ...fence, dueAts: [now], codes: ["provider-5xx"] })),
        Effect.flip(repo.markDead({ ...fence, reasons: ["rejected"], codes: ["provider-4xx"], now }))
      ])
      expect(failures).toEqual(["peekDue", "claim", "markDelivered", "markRetry", "markDead"].map((operation) => new OutboxStorageUnavailable({ operation })))
    }))

  it.effect("the peek and the claim, whose texts never change, ask to be named prepared statements (`/* prepared */`); a fenced transition only when its fence is one group (one attempt number), so a connection never collects one per group count", () =>
    Effect.gen(function*() {
      const repo = yield* DeliveryRepo.pipe(Effect.provide(DeliveryRepo.Default))
      const texts: Array<string> = []
      const captured = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
        Statement.withTransformer(effect, (statement) =>
          Effect.sync(() => {
            texts.push(statement.compile()[0])
            return statement
          }))
      const now = new Date()
      const fence = { ids: ["00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"], attempts: [1, 2] }
      const oneAttempt = { ids: fence.ids, attempts: [3, 3] }
      yield* captured(Effect.all([
        repo.peekDue({ now, blocked: ["other"], limit: 100 }),
        repo.claim({ tenant: "acme", limit: 100, now, leaseUntil: now, owner: "w1" }),
        repo.claim({ tenant: "globex", limit: 7, now, leaseUntil: now, owner: "w2" }),
        repo.markDelivered({ ...fence, now }),
        repo.markRetry({ ...fence, dueAts: [now, now], codes: ["provider-5xx", "provider-5xx"] }),
        repo.markDead({ ...fence, reasons: ["rejected", "rejected"], codes: ["provider-4xx", "provider-4xx"], now }),
        repo.markDelivered({ ...oneAttempt, now }),
        repo.markRetry({ ...oneAttempt, dueAts: [now, now], codes: ["provider-5xx", "provider-5xx"] }),
        repo.markDead({ ...oneAttempt, reasons: ["rejected", "rejected"], codes: ["provider-4xx", "provider-4xx"], now }),
        repo.markDelivered({ ids: [fence.ids[0]!], attempts: [7], now })
      ]))
      const prepared = texts.map((text) => text.endsWith(PREPARED_MARKER))
      expect(prepared).toEqual([true, true, true, false, false, false, true, true, true, true])
      // Prepared transitions of one group share their text whatever the attempt number and the batch's size.
      expect(texts[9]).toBe(texts[6])
      // One text per statement whatever its values: two claims for other tenants and limits share theirs.
      expect(texts[1]).toBe(texts[2])
    }))
})
