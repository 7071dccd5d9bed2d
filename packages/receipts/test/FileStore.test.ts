import { FileSystem } from "@effect/platform"
import { SystemError } from "@effect/platform/Error"
import { BunContext } from "@effect/platform-bun"
import { expect, layer } from "@effect/vitest"
import { Cause, Effect, Either, Exit, Fiber, Layer, Option, ParseResult, Schedule, Schema, Stream } from "effect"
import { createHash, randomBytes, randomUUID } from "node:crypto"
import * as NFS from "node:fs"
import * as NodePath from "node:path"
import { checkRoots, FileStore, FileStoreLive, ReceiptFileId, RootInvalid, Sha256Hex } from "../src/FileStore.ts"
import { makeUnwritable, names, tempRoots } from "./support/TempRoots.ts"

// The private file storage of receipts (spec 002, "Receipt work") on real files in /tmp/rfs-* roots: staging
// within limits, promotion and deletion that stay correct when replayed after a crash or a lost lease, audit
// checks, and the start-up check of RECEIPT_STAGING_ROOT and RECEIPT_STORAGE_ROOT.

const sha256Of = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex")

type Roots = { readonly base: string; readonly staging: string; readonly storage: string }

/** The store over fresh roots (removed after the test). */
const storeIn = (roots: Roots) => Effect.provide(FileStore, FileStoreLive(roots))

const freshStore = Effect.flatMap(tempRoots, (roots) => Effect.map(storeIn(roots), (store) => ({ roots, store })))

/** A body delivered in several chunks, as an HTTP request body arrives. */
const chunked = (bytes: Uint8Array, chunkSize = 1000) =>
  Stream.fromIterable(Array.from({ length: Math.ceil(bytes.length / chunkSize) }, (_, i) =>
    bytes.subarray(i * chunkSize, (i + 1) * chunkSize)))

/** A body that counts how often it was read (0: never read). */
const countedBody = (content: Stream.Stream<Uint8Array>) => {
  let pulled = 0
  const body = Stream.suspend(() => {
    pulled++
    return content
  })
  return { body, pulled: () => pulled }
}

const stageBytes = (store: FileStore["Type"], bytes: Uint8Array) =>
  Effect.gen(function* () {
    const fileId = randomUUID()
    const staged = yield* store.stage(fileId, chunked(bytes), { maxBytes: 1024 * 1024 })
    return { fileId, ...staged }
  })

const modeOf = (path: string) => NFS.statSync(path).mode & 0o777

const defectMessage = <A, E>(exit: Exit.Exit<A, E>) =>
  Exit.isFailure(exit) && Cause.isDie(exit.cause) ? String((Cause.squash(exit.cause) as Error).message) : undefined

/** The platform's file system, where opening `dir` itself (a directory sync) fails as the operating system would. */
const directorySyncFailsIn = (dir: string) =>
  Layer.effect(
    FileSystem.FileSystem,
    Effect.map(FileSystem.FileSystem, (fs) => ({
      ...fs,
      open: (path: string, options?: FileSystem.OpenFileOptions) =>
        path === dir
          ? Effect.fail(new SystemError({ reason: "Unknown", module: "FileSystem", method: "open", pathOrDescriptor: path, description: "EIO" }))
          : fs.open(path, options)
    }))
  )

layer(BunContext.layer, { excludeTestServices: true })("receipt file storage", (it) => {
  it.scoped("stage streams the body into staging/<fileId> (mode 0600), computing its SHA-256 and size while streaming; no temporary file remains", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const bytes = randomBytes(200_000)
      const fileId = randomUUID()
      const staged = yield* store.stage(fileId, chunked(bytes, 7_777), { maxBytes: 200_000, declaredLength: 200_000 })
      expect(staged).toEqual({ sha256: sha256Of(bytes), size: 200_000 })
      expect(yield* names(roots.staging)).toEqual([fileId])
      expect(NFS.readFileSync(NodePath.join(roots.staging, fileId)).equals(bytes)).toBe(true)
      expect(modeOf(NodePath.join(roots.staging, fileId))).toBe(0o600)
      expect(yield* names(roots.storage)).toEqual([])
    }))

  it.scoped("a declared length over the limit is refused file-too-large before the body is read, and nothing is left behind", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const { body, pulled } = countedBody(Stream.make(new Uint8Array(10)))
      const refused = yield* Effect.flip(store.stage(randomUUID(), body, { maxBytes: 100, declaredLength: 101 }))
      expect(refused).toMatchObject({ _tag: "UploadRefused", reason: "file-too-large" })
      expect(pulled()).toBe(0)
      expect(yield* names(roots.staging)).toEqual([])
    }))

  it.scoped("an undeclared body over the limit is refused file-too-large, reading stops at the first chunk past the limit, and nothing is left behind", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      let pulled = 0
      // An endless body: only the limit can stop it.
      const body = Stream.repeatEffect(Effect.sync(() => {
        pulled++
        return new Uint8Array(1024)
      }))
      const refused = yield* Effect.flip(store.stage(randomUUID(), body, { maxBytes: 10 * 1024 }))
      expect(refused).toMatchObject({ _tag: "UploadRefused", reason: "file-too-large" })
      expect(pulled).toBe(11)
      expect(yield* names(roots.staging)).toEqual([])
      // Exactly the limit is allowed.
      const staged = yield* store.stage(randomUUID(), chunked(new Uint8Array(10 * 1024), 1024), { maxBytes: 10 * 1024 })
      expect(staged.size).toBe(10 * 1024)
    }))

  it.scoped("a body longer than its declared length (still under the limit) is refused file-too-large, and nothing is left behind", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const refused = yield* Effect.flip(store.stage(randomUUID(), chunked(randomBytes(5_000)), { maxBytes: 10_000, declaredLength: 4_000 }))
      expect(refused).toMatchObject({ _tag: "UploadRefused", reason: "file-too-large" })
      expect(yield* names(roots.staging)).toEqual([])
    }))

  it.scoped("a truncated upload (the body stream fails midway) is upload-truncated, and nothing is left behind", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const body = Stream.concat(chunked(randomBytes(50_000)), Stream.fail("connection reset by peer"))
      const refused = yield* Effect.flip(store.stage(randomUUID(), body, { maxBytes: 100_000, declaredLength: 80_000 }))
      expect(refused).toMatchObject({ _tag: "UploadRefused", reason: "upload-truncated" })
      expect(yield* names(roots.staging)).toEqual([])
      const undeclared = yield* Effect.flip(store.stage(randomUUID(), body, { maxBytes: 100_000 }))
      expect(undeclared).toMatchObject({ _tag: "UploadRefused", reason: "upload-truncated" })
      expect(yield* names(roots.staging)).toEqual([])
    }))

  it.scoped("a truncated upload (the body ends before its declared length) is upload-truncated, and nothing is left behind", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const refused = yield* Effect.flip(store.stage(randomUUID(), chunked(randomBytes(3_999)), { maxBytes: 10_000, declaredLength: 4_000 }))
      expect(refused).toMatchObject({ _tag: "UploadRefused", reason: "upload-truncated" })
      expect(yield* names(roots.staging)).toEqual([])
    }))

  it.scoped("an empty upload is upload-empty (declared 0 without reading, or a body with no bytes), and nothing is left behind", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const { body, pulled } = countedBody(Stream.empty)
      const declared = yield* Effect.flip(store.stage(randomUUID(), body, { maxBytes: 100, declaredLength: 0 }))
      expect(declared).toMatchObject({ _tag: "UploadRefused", reason: "upload-empty" })
      expect(pulled()).toBe(0)
      const undeclared = yield* Effect.flip(store.stage(randomUUID(), Stream.make(new Uint8Array(0)), { maxBytes: 100 }))
      expect(undeclared).toMatchObject({ _tag: "UploadRefused", reason: "upload-empty" })
      expect(yield* names(roots.staging)).toEqual([])
    }))

  it.scoped("an upload interrupted mid-body (client gone, server shutting down) removes its temporary file", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const body = Stream.concat(Stream.make(randomBytes(4096)), Stream.never)
      const fiber = yield* Effect.fork(store.stage(randomUUID(), body, { maxBytes: 100_000 }))
      // Wait until the first chunk is on disk under its temporary name.
      const onDisk = Effect.map(names(roots.staging), (list) =>
        list.filter((name) => NFS.statSync(NodePath.join(roots.staging, name)).size === 4096))
      yield* Effect.repeat(onDisk, { until: (list) => list.length === 1, schedule: Schedule.spaced("5 millis") })
      const [temporary] = yield* onDisk
      expect(temporary).toMatch(/^\.tmp-/)
      yield* Fiber.interrupt(fiber)
      expect(yield* names(roots.staging)).toEqual([])
    }))

  it.scoped("temporary names are unpredictable (random suffix) and every file is created with mode 0600", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const fileId = randomUUID()
      const seen = new Set<string>()
      for (let i = 0; i < 3; i++) {
        const body = Stream.concat(Stream.make(new Uint8Array(16)), Stream.never)
        const fiber = yield* Effect.fork(store.stage(fileId, body, { maxBytes: 100 }))
        yield* Effect.repeat(names(roots.staging), { until: (list) => list.length === 1, schedule: Schedule.spaced("5 millis") })
        const [temporary] = yield* names(roots.staging)
        expect(temporary).toMatch(new RegExp(`^\\.tmp-${fileId}-[0-9a-f]{32}$`))
        expect(modeOf(NodePath.join(roots.staging, temporary!))).toBe(0o600)
        seen.add(temporary!)
        yield* Fiber.interrupt(fiber)
      }
      expect(seen.size).toBe(3)
      const staged = yield* stageBytes(store, randomBytes(100))
      yield* store.promote(staged.fileId, staged.sha256)
      expect(modeOf(NodePath.join(roots.storage, staged.sha256))).toBe(0o600)
    }))

  it.scoped("a staged file is never overwritten: staging an id that is already staged is a defect and leaves the first file intact", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const bytes = randomBytes(1_000)
      const staged = yield* stageBytes(store, bytes)
      const exit = yield* Effect.exit(store.stage(staged.fileId, chunked(randomBytes(1_000)), { maxBytes: 10_000 }))
      expect(defectMessage(exit)).toBe("FileStore.stage: file id already staged")
      expect(yield* names(roots.staging)).toEqual([staged.fileId])
      expect(NFS.readFileSync(NodePath.join(roots.staging, staged.fileId)).equals(bytes)).toBe(true)
    }))

  it.scoped("a client-chosen path or a malformed id never touches the file system: stage, promote, deleteStaged and auditCheck die before any path is built", () =>
    Effect.gen(function* () {
      const roots = yield* tempRoots
      // Every FileSystem call the store makes is recorded.
      const calls: Array<string> = []
      const SpyFileSystem = Layer.effect(
        FileSystem.FileSystem,
        Effect.map(FileSystem.FileSystem, (fs) =>
          new Proxy(fs, {
            get(target, key, receiver) {
              const value = Reflect.get(target, key, receiver)
              return typeof value === "function"
                ? (...args: Array<unknown>) => {
                  calls.push(String(key))
                  return (value as (...a: Array<unknown>) => unknown).apply(target, args)
                }
                : value
            }
          }))
      )
      const store = yield* Effect.provide(FileStore, FileStoreLive(roots).pipe(Layer.provide(SpyFileSystem)))
      expect(calls.length).toBeGreaterThan(0) // the spy sees the start-up check
      calls.length = 0
      const good = randomUUID()
      const digest = "a".repeat(64)
      const badIds = [
        "../storage/" + digest,
        "/etc/passwd",
        "..",
        "",
        good.toUpperCase(),
        `${good}/x`,
        `${good}\0`,
        ` ${good}`
      ]
      const badDigests = ["../" + "a".repeat(61), "../" + "a".repeat(64), "A".repeat(64), "a".repeat(63), `${"a".repeat(64)}/`, `../staging/${good}`]
      const { body, pulled } = countedBody(Stream.make(new Uint8Array(1)))
      const operations: Array<Effect.Effect<unknown, unknown>> = [
        ...badIds.map((id) => store.stage(id, body, { maxBytes: 10 })),
        ...badIds.map((id) => store.promote(id, digest)),
        ...badIds.map((id) => store.deleteStaged(id, digest)),
        ...badDigests.map((sha) => store.promote(good, sha)),
        ...badDigests.map((sha) => store.deleteStaged(good, sha)),
        ...badDigests.map((sha) => store.auditCheck(sha))
      ]
      for (const operation of operations) {
        const exit = yield* Effect.exit(operation)
        const message = defectMessage(exit)
        expect(message).toMatch(/^FileStore: (file id is not a lower-case UUID|sha256 is not 64 lower-case hex digits)$/)
      }
      expect(calls).toEqual([])
      expect(pulled()).toBe(0)
      expect(yield* names(roots.base)).toEqual(["staging", "storage"])
      expect(yield* names(roots.staging)).toEqual([])
      expect(yield* names(roots.storage)).toEqual([])
    }))

  it.scoped("client input is decoded with ReceiptFileId and Sha256Hex, whose refusals say what is expected and never quote the value", () =>
    Effect.sync(() => {
      const refusal = <A>(schema: Schema.Schema<A, string>, value: string) =>
        Either.match(Schema.decodeUnknownEither(schema)(value), {
          onLeft: (error) => ParseResult.TreeFormatter.formatErrorSync(error),
          onRight: () => "accepted"
        })
      const id = randomUUID()
      expect(refusal(ReceiptFileId, id)).toBe("accepted")
      expect(refusal(ReceiptFileId, `../${id}`)).toBe("Expected a lower-case UUID")
      expect(refusal(ReceiptFileId, id.toUpperCase())).toBe("Expected a lower-case UUID")
      expect(refusal(Sha256Hex, "a".repeat(64))).toBe("accepted")
      expect(refusal(Sha256Hex, `../${"a".repeat(64)}`)).toBe("Expected 64 lower-case hex digits")
      expect(refusal(Sha256Hex, "A".repeat(64))).toBe("Expected 64 lower-case hex digits")
    }))

  it.scoped("stage's limits must be whole numbers (maxBytes above 0, a declared length 0 or more): anything else is a defect, before the body is read or a file made", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const { body, pulled } = countedBody(Stream.make(new Uint8Array(1)))
      for (const maxBytes of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
        const exit = yield* Effect.exit(store.stage(randomUUID(), body, { maxBytes }))
        expect(defectMessage(exit)).toBe("FileStore.stage: maxBytes must be a positive integer")
      }
      for (const declaredLength of [-1, 0.5, Number.NaN]) {
        const exit = yield* Effect.exit(store.stage(randomUUID(), body, { maxBytes: 10, declaredLength }))
        expect(defectMessage(exit)).toBe("FileStore.stage: declaredLength must be a non-negative integer")
      }
      expect(pulled()).toBe(0)
      expect(yield* names(roots.staging)).toEqual([])
      // The smallest limits that are allowed.
      expect(yield* store.stage(randomUUID(), body, { maxBytes: 1 })).toMatchObject({ size: 1 })
      expect(yield* Effect.flip(store.stage(randomUUID(), body, { maxBytes: 1, declaredLength: 0 }))).toMatchObject({ reason: "upload-empty" })
    }))

  it.scoped("a staged file whose directory cannot be synced is not published: stage fails io-error and the staged name is taken back", () =>
    Effect.gen(function* () {
      const roots = yield* tempRoots
      const store = yield* Effect.provide(FileStore, FileStoreLive(roots).pipe(Layer.provide(directorySyncFailsIn(roots.staging))))
      const failure = yield* Effect.flip(store.stage(randomUUID(), chunked(randomBytes(5_000)), { maxBytes: 10_000 }))
      expect(failure).toMatchObject({ _tag: "ReceiptStorageError", operation: "stage", code: "io-error" })
      expect(yield* names(roots.staging)).toEqual([])
    }))

  it.scoped("promote is idempotent by digest: promoted, then already-promoted; storage/<sha256> holds the exact bytes", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const bytes = randomBytes(300_000)
      const staged = yield* stageBytes(store, bytes)
      expect(yield* store.promote(staged.fileId, staged.sha256)).toBe("promoted")
      expect(yield* store.promote(staged.fileId, staged.sha256)).toBe("already-promoted")
      expect(yield* names(roots.storage)).toEqual([staged.sha256])
      expect(NFS.readFileSync(NodePath.join(roots.storage, staged.sha256)).equals(bytes)).toBe(true)
      // Promotion copies; the staged copy stays until deleteStaged.
      expect(yield* names(roots.staging)).toEqual([staged.fileId])
    }))

  it.scoped("a promotion replayed after the staged copy was deleted (the lease ran out after the copy) is already-promoted", () =>
    Effect.gen(function* () {
      const { store } = yield* freshStore
      const staged = yield* stageBytes(store, randomBytes(10_000))
      expect(yield* store.promote(staged.fileId, staged.sha256)).toBe("promoted")
      expect(yield* store.deleteStaged(staged.fileId, staged.sha256)).toBe("deleted")
      expect(yield* store.promote(staged.fileId, staged.sha256)).toBe("already-promoted")
    }))

  it.scoped("a partially written temporary file from a crashed earlier attempt does not count as promoted, nor does a damaged copy under the final name", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const bytes = randomBytes(100_000)
      const staged = yield* stageBytes(store, bytes)
      // A crash mid-copy leaves a temporary file with part of the content.
      const leftover = NodePath.join(roots.storage, `.tmp-${staged.sha256}-${"0".repeat(32)}`)
      NFS.writeFileSync(leftover, bytes.subarray(0, 40_000), { mode: 0o600 })
      // A damaged copy under the final name (a bad disk, an old non-atomic writer).
      const final = NodePath.join(roots.storage, staged.sha256)
      NFS.writeFileSync(final, bytes.subarray(0, 60_000), { mode: 0o600 })
      expect(yield* store.promote(staged.fileId, staged.sha256)).toBe("promoted")
      expect(NFS.readFileSync(final).equals(bytes)).toBe(true)
      // And with the staged copy gone, a leftover temporary file alone is no promotion.
      const other = yield* stageBytes(store, randomBytes(1_000))
      NFS.writeFileSync(NodePath.join(roots.storage, `.tmp-${other.sha256}-${"1".repeat(32)}`), new Uint8Array(500))
      NFS.rmSync(NodePath.join(roots.staging, other.fileId))
      const missing = yield* Effect.flip(store.promote(other.fileId, other.sha256))
      expect(missing).toMatchObject({ _tag: "ReceiptStorageError", operation: "promote", code: "missing" })
      expect(NFS.existsSync(NodePath.join(roots.storage, other.sha256))).toBe(false)
    }))

  it.scoped("promotion is never skipped: a missing staged copy with no permanent copy fails missing, and the retry promotes once the copy is back", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const staged = yield* stageBytes(store, randomBytes(20_000))
      const stagedPath = NodePath.join(roots.staging, staged.fileId)
      const aside = NodePath.join(roots.base, "aside")
      NFS.renameSync(stagedPath, aside)
      const failure = yield* Effect.flip(store.promote(staged.fileId, staged.sha256))
      expect(failure).toMatchObject({ _tag: "ReceiptStorageError", operation: "promote", code: "missing" })
      expect(yield* names(roots.storage)).toEqual([])
      NFS.renameSync(aside, stagedPath)
      expect(yield* store.promote(staged.fileId, staged.sha256)).toBe("promoted")
    }))

  it.scoped("a corrupted staged file is digest-mismatch: nothing promoted, no temporary file left, the staged copy kept", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const staged = yield* stageBytes(store, randomBytes(150_000))
      const stagedPath = NodePath.join(roots.staging, staged.fileId)
      const corrupted = NFS.readFileSync(stagedPath)
      corrupted[100_000] = corrupted[100_000]! ^ 0xff
      NFS.writeFileSync(stagedPath, corrupted)
      const failure = yield* Effect.flip(store.promote(staged.fileId, staged.sha256))
      expect(failure).toMatchObject({ _tag: "ReceiptStorageError", operation: "promote", code: "digest-mismatch" })
      expect(yield* names(roots.storage)).toEqual([])
      expect(NFS.readFileSync(stagedPath).equals(corrupted)).toBe(true)
    }))

  it.scoped("an interrupted promotion leaves no temporary file in the storage root", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const big = randomBytes(8 * 1024 * 1024)
      const fileId = randomUUID()
      const staged = yield* store.stage(fileId, chunked(big, 64 * 1024), { maxBytes: big.length })
      const fiber = yield* Effect.fork(store.promote(fileId, staged.sha256))
      yield* Effect.repeat(names(roots.storage), { until: (list) => list.length > 0, schedule: Schedule.spaced("1 millis") })
      yield* Fiber.interrupt(fiber)
      const left = yield* names(roots.storage)
      expect(left.filter((name) => name.startsWith(".tmp-"))).toEqual([])
      // Whatever moment the interruption hit, the replay ends with the right file.
      expect(yield* store.promote(fileId, staged.sha256)).toMatch(/^(already-)?promoted$/)
      yield* store.auditCheck(staged.sha256)
    }))

  it.scoped("deleteStaged deletes the staged copy only after verifying the permanent copy; a replay is already-deleted", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const staged = yield* stageBytes(store, randomBytes(30_000))
      yield* store.promote(staged.fileId, staged.sha256)
      expect(yield* store.deleteStaged(staged.fileId, staged.sha256)).toBe("deleted")
      expect(yield* names(roots.staging)).toEqual([])
      expect(yield* store.deleteStaged(staged.fileId, staged.sha256)).toBe("already-deleted")
      expect(yield* names(roots.storage)).toEqual([staged.sha256])
    }))

  it.scoped("deleteStaged refuses when the permanent copy is missing or corrupted, and deletes nothing (a replay never deletes the only copy)", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const staged = yield* stageBytes(store, randomBytes(30_000))
      const missing = yield* Effect.flip(store.deleteStaged(staged.fileId, staged.sha256))
      expect(missing).toMatchObject({ _tag: "ReceiptStorageError", operation: "delete-staged", code: "missing" })
      expect(yield* names(roots.staging)).toEqual([staged.fileId])
      yield* store.promote(staged.fileId, staged.sha256)
      NFS.appendFileSync(NodePath.join(roots.storage, staged.sha256), "x")
      const corrupted = yield* Effect.flip(store.deleteStaged(staged.fileId, staged.sha256))
      expect(corrupted).toMatchObject({ _tag: "ReceiptStorageError", operation: "delete-staged", code: "digest-mismatch" })
      expect(yield* names(roots.staging)).toEqual([staged.fileId])
      // Promotion repairs the permanent copy from the staged one; then deletion goes through.
      expect(yield* store.promote(staged.fileId, staged.sha256)).toBe("promoted")
      expect(yield* store.deleteStaged(staged.fileId, staged.sha256)).toBe("deleted")
    }))

  it.scoped("auditCheck re-hashes storage/<sha256>: intact passes; a modified, truncated or missing file is detected", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const bytes = randomBytes(200_000)
      const staged = yield* stageBytes(store, bytes)
      yield* store.promote(staged.fileId, staged.sha256)
      yield* store.auditCheck(staged.sha256)
      const stored = NodePath.join(roots.storage, staged.sha256)
      const modified = Buffer.from(bytes)
      modified[123_456] = modified[123_456]! ^ 1
      NFS.writeFileSync(stored, modified)
      expect(yield* Effect.flip(store.auditCheck(staged.sha256))).toMatchObject({
        _tag: "ReceiptStorageError",
        operation: "audit-check",
        code: "digest-mismatch"
      })
      NFS.truncateSync(stored, 100)
      expect(yield* Effect.flip(store.auditCheck(staged.sha256))).toMatchObject({ code: "digest-mismatch" })
      NFS.rmSync(stored)
      expect(yield* Effect.flip(store.auditCheck(staged.sha256))).toMatchObject({ operation: "audit-check", code: "missing" })
    }))

  it.scoped("an operating-system failure is io-error with a stable code and its operation only, never a path or an OS message", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const staged = yield* stageBytes(store, randomBytes(1_000))
      // A directory where the permanent file should be: reading it fails with EISDIR.
      NFS.mkdirSync(NodePath.join(roots.storage, staged.sha256), { mode: 0o700 })
      const failure = yield* Effect.flip(store.auditCheck(staged.sha256))
      expect(failure).toMatchObject({ _tag: "ReceiptStorageError", operation: "audit-check", code: "io-error" })
      expect(JSON.stringify(failure)).not.toContain(roots.base)
      expect(Object.keys(failure).sort()).toEqual(["_tag", "code", "operation"])
      // Each operation names itself.
      expect(yield* Effect.flip(store.promote(staged.fileId, staged.sha256))).toMatchObject({ operation: "promote", code: "io-error" })
      expect(yield* Effect.flip(store.deleteStaged(staged.fileId, staged.sha256))).toMatchObject({ operation: "delete-staged", code: "io-error" })
      expect(yield* names(roots.staging)).toEqual([staged.fileId])
      // The staging root gone: the temporary file cannot be created.
      NFS.rmSync(roots.staging, { recursive: true })
      const stage = yield* Effect.flip(store.stage(randomUUID(), chunked(randomBytes(1_000)), { maxBytes: 10_000 }))
      expect(stage).toMatchObject({ _tag: "ReceiptStorageError", operation: "stage", code: "io-error" })
    }))

  it.scoped("memory stays bounded: a 50 MiB body is staged, promoted and audited in 64 KiB steps, each chunk on disk before the next is read", () =>
    Effect.gen(function* () {
      const { roots, store } = yield* freshStore
      const CHUNK = 64 * 1024
      const COUNT = 800 // 50 MiB
      const fileId = randomUUID()
      const hash = createHash("sha256")
      let produced = 0
      let maxAhead = 0
      let temporary: string | undefined
      const body = Stream.repeatEffectOption(Effect.suspend(() => {
        if (produced === COUNT * CHUNK) return Effect.fail(Option.none())
        return Effect.sync(() => {
          // Streaming means what was read so far is already written: at most the chunk in hand is in memory.
          temporary ??= NFS.readdirSync(roots.staging).find((name) => name.startsWith(".tmp-"))
          const onDisk = temporary === undefined ? 0 : NFS.statSync(NodePath.join(roots.staging, temporary)).size
          maxAhead = Math.max(maxAhead, produced - onDisk)
          const chunk = randomBytes(CHUNK)
          hash.update(chunk)
          produced += CHUNK
          return new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength)
        })
      }))
      Bun.gc(true)
      const baseline = process.memoryUsage().rss
      let peak = baseline
      // Garbage is collected every few milliseconds so the peak measures what the store keeps alive, not
      // what the collector has not yet reclaimed (without this, the peak varies with the collector's mood).
      const sampler = yield* Effect.fork(Effect.repeat(
        Effect.sync(() => {
          Bun.gc(false)
          peak = Math.max(peak, process.memoryUsage().rss)
        }),
        Schedule.spaced("10 millis")
      ))
      const started = Date.now()
      const staged = yield* store.stage(fileId, body, { maxBytes: COUNT * CHUNK, declaredLength: COUNT * CHUNK })
      expect(staged).toEqual({ sha256: hash.digest("hex"), size: COUNT * CHUNK })
      expect(maxAhead).toBeLessThanOrEqual(CHUNK)
      expect(yield* store.promote(fileId, staged.sha256)).toBe("promoted")
      yield* store.auditCheck(staged.sha256)
      yield* Fiber.interrupt(sampler)
      const growth = peak - baseline
      yield* Effect.logInfo("50 MiB stage + promote + audit").pipe(
        Effect.annotateLogs({ rssGrowthMiB: (growth / 1024 / 1024).toFixed(1), ms: Date.now() - started })
      )
      // Buffering the upload (or reading a file whole) would grow the process by at least 50 MiB.
      expect(growth).toBeLessThan(16 * 1024 * 1024)
    }), { timeout: 120_000 })
})

layer(BunContext.layer, { excludeTestServices: true })("checkRoots: RECEIPT_STAGING_ROOT and RECEIPT_STORAGE_ROOT at start-up", (it) => {
  const refusal = (roots: { readonly staging: string; readonly storage: string }) =>
    Effect.flip(checkRoots(roots)).pipe(Effect.tap((error) => {
      expect(error).toBeInstanceOf(RootInvalid)
      expect(error._tag).toBe("RootInvalid")
      // The message names the variables, never the paths.
      expect(error.message).not.toContain("/tmp")
    }))

  it.scoped("private, writable, distinct directories pass and the writability probe leaves nothing behind", () =>
    Effect.gen(function* () {
      const roots = yield* tempRoots
      yield* checkRoots(roots)
      expect(yield* names(roots.staging)).toEqual([])
      expect(yield* names(roots.storage)).toEqual([])
    }))

  it.scoped("a relative root is refused not-absolute, naming the variable", () =>
    Effect.gen(function* () {
      const roots = yield* tempRoots
      const error = yield* refusal({ staging: "staging", storage: roots.storage })
      expect(error.problems).toEqual([{ variable: "RECEIPT_STAGING_ROOT", problem: "not-absolute" }])
      expect(error.message).toBe("RECEIPT_STAGING_ROOT: not-absolute")
      const empty = yield* refusal({ staging: roots.staging, storage: "" })
      expect(empty.problems).toEqual([{ variable: "RECEIPT_STORAGE_ROOT", problem: "not-absolute" }])
    }))

  it.scoped("a missing root is refused missing, a file not-a-directory, and a root that cannot be looked at inaccessible, naming the variable", () =>
    Effect.gen(function* () {
      const roots = yield* tempRoots
      const missing = yield* refusal({ staging: roots.staging, storage: NodePath.join(roots.base, "nowhere") })
      expect(missing.problems).toEqual([{ variable: "RECEIPT_STORAGE_ROOT", problem: "missing" }])
      const file = NodePath.join(roots.base, "file")
      NFS.writeFileSync(file, "", { mode: 0o600 })
      const notDirectory = yield* refusal({ staging: file, storage: roots.storage })
      expect(notDirectory.problems).toEqual([{ variable: "RECEIPT_STAGING_ROOT", problem: "not-a-directory" }])
      const belowFile = yield* refusal({ staging: roots.staging, storage: NodePath.join(file, "sub") })
      expect(belowFile.problems).toEqual([{ variable: "RECEIPT_STORAGE_ROOT", problem: "not-a-directory" }])
      // Any other reason the root cannot be looked at (here a name longer than the file system allows).
      const unreadable = yield* refusal({ staging: NodePath.join(roots.base, "a".repeat(300)), storage: roots.storage })
      expect(unreadable.problems).toEqual([{ variable: "RECEIPT_STAGING_ROOT", problem: "inaccessible" }])
    }))

  it.scoped("a root readable, writable or searchable by group or others (mode & 0o077) is refused, naming the variable", () =>
    Effect.gen(function* () {
      const roots = yield* tempRoots
      for (const mode of [0o750, 0o705, 0o701, 0o710, 0o777]) {
        NFS.chmodSync(roots.storage, mode)
        const error = yield* refusal(roots)
        expect(error.problems).toEqual([{ variable: "RECEIPT_STORAGE_ROOT", problem: "group-or-world-accessible" }])
      }
      NFS.chmodSync(roots.storage, 0o700)
      NFS.chmodSync(roots.staging, 0o755)
      const staging = yield* refusal(roots)
      expect(staging.problems).toEqual([{ variable: "RECEIPT_STAGING_ROOT", problem: "group-or-world-accessible" }])
    }))

  it.scoped("the same root twice, one root inside the other, or the same directory through a symbolic link is refused, naming the variable", () =>
    Effect.gen(function* () {
      const roots = yield* tempRoots
      const same = yield* refusal({ staging: roots.staging, storage: `${roots.staging}/` })
      expect(same.problems).toEqual([
        { variable: "RECEIPT_STAGING_ROOT", problem: "same-as-other-root" },
        { variable: "RECEIPT_STORAGE_ROOT", problem: "same-as-other-root" }
      ])
      const inner = NodePath.join(roots.staging, "permanent")
      NFS.mkdirSync(inner, { mode: 0o700 })
      const nested = yield* refusal({ staging: roots.staging, storage: inner })
      expect(nested.problems).toEqual([{ variable: "RECEIPT_STORAGE_ROOT", problem: "inside-other-root" }])
      const nestedOther = yield* refusal({ staging: inner, storage: roots.staging })
      expect(nestedOther.problems).toEqual([{ variable: "RECEIPT_STAGING_ROOT", problem: "inside-other-root" }])
      const alias = NodePath.join(roots.base, "alias")
      NFS.symlinkSync(roots.storage, alias)
      const linked = yield* refusal({ staging: alias, storage: roots.storage })
      expect(linked.problems.map((p) => p.problem)).toEqual(["same-as-other-root", "same-as-other-root"])
      // A directory whose name starts with two dots is still inside.
      const dotted = NodePath.join(roots.storage, "..data")
      NFS.mkdirSync(dotted, { mode: 0o700 })
      const insideDotted = yield* refusal({ staging: dotted, storage: roots.storage })
      expect(insideDotted.problems).toEqual([{ variable: "RECEIPT_STAGING_ROOT", problem: "inside-other-root" }])
      // A sibling whose name merely starts with the other root's name is distinct.
      const sibling = `${roots.staging}-2`
      NFS.mkdirSync(sibling, { mode: 0o700 })
      yield* checkRoots({ staging: roots.staging, storage: sibling })
    }))

  it.scoped("an unwritable root (creating a probe file fails) is refused not-writable, naming the variable", () =>
    Effect.gen(function* () {
      const roots = yield* tempRoots
      yield* makeUnwritable(roots.staging)
      const error = yield* refusal(roots)
      expect(error.problems).toEqual([{ variable: "RECEIPT_STAGING_ROOT", problem: "not-writable" }])
      expect(error.message).toBe("RECEIPT_STAGING_ROOT: not-writable")
    }))

  it.scoped("both roots bad: one refusal names every bad variable, and FileStoreLive refuses to build", () =>
    Effect.gen(function* () {
      const roots = yield* tempRoots
      NFS.chmodSync(roots.staging, 0o770)
      const bad = { staging: roots.staging, storage: "relative/storage" }
      const error = yield* refusal(bad)
      expect(error.message).toBe("RECEIPT_STAGING_ROOT: group-or-world-accessible; RECEIPT_STORAGE_ROOT: not-absolute")
      const build = yield* Effect.flip(Layer.build(FileStoreLive(bad)))
      expect(build).toBeInstanceOf(RootInvalid)
    }))
})
