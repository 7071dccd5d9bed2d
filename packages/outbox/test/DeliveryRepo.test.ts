import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
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
})
