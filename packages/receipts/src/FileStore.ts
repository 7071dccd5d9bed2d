import { FileSystem } from "@effect/platform"
import type { PlatformError } from "@effect/platform/Error"
import { Context, Effect, Either, Exit, Layer, Option, Schema, Stream } from "effect"
import { createHash, type Hash, randomBytes } from "node:crypto"
import * as NodePath from "node:path"

// Private file storage of receipts (spec 002, "Receipt work"): uploads land in RECEIPT_STAGING_ROOT under
// their file id, the worker's file promotion copies them to RECEIPT_STORAGE_ROOT under their SHA-256, and the
// file deletion removes the staged copy. Storage operations can outlast a lease, so every operation is a
// replay-safe check of digests on disk, never a trust in what an earlier attempt claimed to have done.

/** Files are read and hashed in chunks of this size: memory stays bounded whatever the file size. */
const CHUNK_BYTES = 64 * 1024

const FILE_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const SHA256_HEX = /^[0-9a-f]{64}$/

/** A staged file's id: a lower-case UUID. Decode client input with it before it reaches `FileStore`. */
export const ReceiptFileId = Schema.String.pipe(Schema.pattern(FILE_ID, { message: () => "Expected a lower-case UUID" }))

/** A stored file's name: its SHA-256 as 64 lower-case hex digits. */
export const Sha256Hex = Schema.String.pipe(Schema.pattern(SHA256_HEX, { message: () => "Expected 64 lower-case hex digits" }))

export class ReceiptStorageError extends Schema.TaggedError<ReceiptStorageError>()("ReceiptStorageError", {
  operation: Schema.Literal("stage", "promote", "delete-staged", "audit-check"),
  // Stable codes only: never a path or an operating-system message.
  code: Schema.Literal("io-error", "missing", "digest-mismatch")
}) {}

export class UploadRefused extends Schema.TaggedError<UploadRefused>()("UploadRefused", {
  reason: Schema.Literal("file-too-large", "upload-truncated", "upload-empty")
}) {}

export const RootVariable = Schema.Literal("RECEIPT_STAGING_ROOT", "RECEIPT_STORAGE_ROOT")
export type RootVariable = typeof RootVariable.Type

export const RootProblem = Schema.Literal(
  "not-absolute",
  "missing",
  "not-a-directory",
  "inaccessible",
  "group-or-world-accessible",
  "not-writable",
  "same-as-other-root",
  "inside-other-root"
)
export type RootProblem = typeof RootProblem.Type

/** Start-up refusal of the storage roots: every bad variable with its problem, never the path itself. */
export class RootInvalid extends Schema.TaggedError<RootInvalid>()("RootInvalid", {
  // Stryker disable next-line ObjectLiteral: only this module builds the refusal, always from these literals; its message reads the fields
  problems: Schema.NonEmptyArray(Schema.Struct({ variable: RootVariable, problem: RootProblem }))
}) {
  override get message(): string {
    return this.problems.map(({ problem, variable }) => `${variable}: ${problem}`).join("; ")
  }
}

export interface StagedFile {
  /** Lower-case hex. */
  readonly sha256: string
  readonly size: number
}

export interface StoreRoots {
  readonly staging: string
  readonly storage: string
}

export interface StageOptions {
  readonly maxBytes: number
  /** The request's Content-Length when it had one. */
  readonly declaredLength?: number | undefined
}

export class FileStore extends Context.Tag("@delivery/receipts/FileStore")<FileStore, {
  /**
   * Streams `body` into staging/<fileId> within `maxBytes`, hashing while streaming: written to a temporary
   * name in the staging root, fsynced, and renamed into place only when complete. A declared length over the
   * limit is refused before reading; a body that fails is `upload-truncated`, as is one shorter than
   * declared; a body longer than declared is `file-too-large`; an empty one `upload-empty`. Whatever fails
   * (or interrupts) leaves nothing behind.
   */
  readonly stage: <E>(
    fileId: string,
    body: Stream.Stream<Uint8Array, E>,
    options: StageOptions
  ) => Effect.Effect<StagedFile, UploadRefused | ReceiptStorageError>
  /**
   * Idempotent by digest: a valid storage/<sha256> is "already-promoted"; otherwise staging/<fileId> is
   * copied to a temporary file in the storage root, its digest checked while copying, fsynced and renamed to
   * storage/<sha256> ("promoted"). No staged copy and no valid permanent copy: `missing`; a staged copy with
   * another digest: `digest-mismatch` (the staged copy is kept, nothing is promoted).
   */
  readonly promote: (fileId: string, sha256: string) => Effect.Effect<"promoted" | "already-promoted", ReceiptStorageError>
  /**
   * Removes staging/<fileId> only once storage/<sha256> is there with the right digest ("deleted", or
   * "already-deleted" on a replay). A missing or wrong permanent copy fails (`missing` / `digest-mismatch`)
   * and deletes nothing: a replay never deletes the only copy.
   */
  readonly deleteStaged: (fileId: string, sha256: string) => Effect.Effect<"deleted" | "already-deleted", ReceiptStorageError>
  /** Re-hashes storage/<sha256>: `missing` / `digest-mismatch`. */
  readonly auditCheck: (sha256: string) => Effect.Effect<void, ReceiptStorageError>
  /**
   * Removes staging/<fileId> that no row refers to (its upload's row could not be written), best effort: a file
   * left behind is named by an id nothing knows and is never promoted.
   */
  readonly discardStaged: (fileId: string) => Effect.Effect<void>
}>() {}

// A malformed id is a defect, not a typed refusal: ids come from the server (a generated upload id) or from
// durable rows, and a durable row that does not decode stops the worker (spec 002). Callers decode client
// input with `ReceiptFileId` / `Sha256Hex` first. The message never quotes the value: it may be a path.
const requireFileId = (fileId: string) =>
  FILE_ID.test(fileId) ? Effect.void : Effect.dieMessage("FileStore: file id is not a lower-case UUID")

const requireSha256 = (sha256: string) =>
  SHA256_HEX.test(sha256) ? Effect.void : Effect.dieMessage("FileStore: sha256 is not 64 lower-case hex digits")

/** The platform's stable word for why a call failed: a SystemError's reason, else the error's tag. */
const reasonOf = (error: PlatformError): string =>
  // Stryker disable next-line ConditionalExpression: the calls here, with their fixed arguments, fail only as SystemError; BadArgument is caught to fail closed
  error._tag === "SystemError" ? error.reason : error._tag

const isNotFound = (error: PlatformError) => reasonOf(error) === "NotFound"

/** Temporary names are unpredictable: another process cannot pre-create or guess them. */
const temporaryName = (purpose: string) => `.tmp-${purpose}-${randomBytes(16).toString("hex")}`

const storageFailure = (operation: ReceiptStorageError["operation"]) =>
<A, E, R>(effect: Effect.Effect<A, E | PlatformError, R>): Effect.Effect<A, Exclude<E, PlatformError> | ReceiptStorageError, R> =>
  Effect.catchIf(
    effect,
    (error): error is PlatformError =>
      typeof error === "object" && error !== null && "_tag" in error &&
      (error._tag === "SystemError" || error._tag === "BadArgument"),
    (error) =>
      // The platform's reason is a stable word; its message and path are not logged.
      Effect.logWarning("receipt file storage failed").pipe(
        Effect.annotateLogs({ operation, reason: reasonOf(error) }),
        Effect.zipRight(Effect.fail(new ReceiptStorageError({ operation, code: "io-error" })))
      )
  ) as Effect.Effect<A, Exclude<E, PlatformError> | ReceiptStorageError, R>

export const make = (roots: StoreRoots) =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const stagingRoot = NodePath.resolve(roots.staging)
    const storageRoot = NodePath.resolve(roots.storage)

    /** A temporary file path, removed when its scope closes unless the work succeeded (it was renamed). */
    const temporaryFile = (dir: string, purpose: string) =>
      Effect.acquireRelease(
        Effect.sync(() => NodePath.join(dir, temporaryName(purpose))),
        (path, exit) => Exit.isSuccess(exit) ? Effect.void : Effect.ignore(fs.remove(path))
      ).pipe(Effect.flatMap((path) =>
        // "wx": created here and now, never an existing file; 0600: private to the service's user.
        Effect.map(fs.open(path, { flag: "wx", mode: 0o600 }), (file) => ({ path, file }))
      ))

    /** A rename is durable only once its directory is fsynced. */
    const syncDirectory = (dir: string) =>
      // Stryker disable next-line ObjectLiteral: "r" is the platform's default flag, spelled out for the reader
      Effect.scoped(Effect.flatMap(fs.open(dir, { flag: "r" }), (d) => d.sync))

    /** Feeds every chunk of an open file to `use`, through one reused buffer. */
    const eachChunk = <E>(file: FileSystem.File, use: (chunk: Uint8Array) => Effect.Effect<void, E>) =>
      Effect.suspend(() => {
        const buffer = new Uint8Array(CHUNK_BYTES)
        const loop: Effect.Effect<void, E | PlatformError> = Effect.flatMap(file.read(buffer), (read) =>
          Number(read) === 0 ? Effect.void : Effect.zipRight(use(buffer.subarray(0, Number(read))), loop))
        return loop
      })

    /** The SHA-256 of a file, or none when it does not exist. */
    const digestOf = (path: string) =>
      Effect.scoped(Effect.gen(function* () {
        // Stryker disable next-line ObjectLiteral: "r" is the platform's default flag, spelled out for the reader
        const file = yield* fs.open(path, { flag: "r" })
        const hash = createHash("sha256")
        yield* eachChunk(file, (chunk) => Effect.sync(() => hash.update(chunk)))
        return Option.some(hash.digest("hex"))
      })).pipe(Effect.catchIf(isNotFound, () => Effect.succeedNone))

    /** The permanent copy exactly as named, or the failure code that says why not. */
    const verifyPermanent = (operation: ReceiptStorageError["operation"], sha256: string) =>
      Effect.flatMap(digestOf(NodePath.join(storageRoot, sha256)), (digest) =>
        Option.isNone(digest)
          ? Effect.fail(new ReceiptStorageError({ operation, code: "missing" }))
          : digest.value !== sha256
          ? Effect.fail(new ReceiptStorageError({ operation, code: "digest-mismatch" }))
          : Effect.void)

    const stage = <E>(
      fileId: string,
      body: Stream.Stream<Uint8Array, E>,
      options: StageOptions
    ): Effect.Effect<StagedFile, UploadRefused | ReceiptStorageError> =>
      Effect.gen(function* () {
        yield* requireFileId(fileId)
        const { declaredLength, maxBytes } = options
        if (!Number.isSafeInteger(maxBytes) || maxBytes <= 0) {
          return yield* Effect.dieMessage("FileStore.stage: maxBytes must be a positive integer")
        }
        if (declaredLength !== undefined && (!Number.isSafeInteger(declaredLength) || declaredLength < 0)) {
          return yield* Effect.dieMessage("FileStore.stage: declaredLength must be a non-negative integer")
        }
        // Refused before the first byte is read.
        // Stryker disable next-line ConditionalExpression: `undefined > maxBytes` is false as well
        if (declaredLength !== undefined && declaredLength > maxBytes) {
          return yield* new UploadRefused({ reason: "file-too-large" })
        }
        if (declaredLength === 0) return yield* new UploadRefused({ reason: "upload-empty" })
        const limit = declaredLength ?? maxBytes

        const target = NodePath.join(stagingRoot, fileId)
        // Upload ids are generated per upload: finding one already staged is a bug, never an overwrite.
        if (yield* fs.exists(target)) return yield* Effect.dieMessage("FileStore.stage: file id already staged")

        return yield* Effect.scoped(Effect.gen(function* () {
          const temporary = yield* temporaryFile(stagingRoot, fileId)
          const hash: Hash = createHash("sha256")
          let size = 0
          yield* body.pipe(
            // A body that fails is a client that went away or a connection that broke: the upload is incomplete.
            Stream.mapError(() => new UploadRefused({ reason: "upload-truncated" })),
            Stream.runForEach((chunk): Effect.Effect<void, UploadRefused | PlatformError> => {
              size += chunk.byteLength
              // Checked before the chunk is written, so reading stops at the first chunk past the limit.
              if (size > limit) return Effect.fail(new UploadRefused({ reason: "file-too-large" }))
              if (chunk.byteLength === 0) return Effect.void
              hash.update(chunk)
              return temporary.file.writeAll(chunk)
            })
          )
          if (size === 0) return yield* new UploadRefused({ reason: "upload-empty" })
          // Stryker disable next-line ConditionalExpression: `size < undefined` is false as well
          if (declaredLength !== undefined && size < declaredLength) {
            return yield* new UploadRefused({ reason: "upload-truncated" })
          }
          yield* temporary.file.sync
          // Published whole or not at all: if the directory cannot be synced, the staged name is taken back.
          yield* Effect.uninterruptible(
            Effect.zipRight(
              fs.rename(temporary.path, target),
              Effect.tapError(syncDirectory(stagingRoot), () => Effect.ignore(fs.remove(target)))
            )
          )
          return { sha256: hash.digest("hex"), size } satisfies StagedFile
        }))
      }).pipe(storageFailure("stage"), Effect.withSpan("FileStore.stage"))

    const promote = Effect.fn("FileStore.promote")(function* (fileId: string, sha256: string) {
      yield* requireFileId(fileId)
      yield* requireSha256(sha256)
      const target = NodePath.join(storageRoot, sha256)
      // Only the final name counts, and only with the right content: a temporary file of a crashed attempt,
      // or a damaged copy under the final name, is no promotion.
      const existing = yield* digestOf(target)
      if (Option.isSome(existing) && existing.value === sha256) {
        // The earlier attempt may have crashed between its rename and its directory sync.
        yield* syncDirectory(storageRoot)
        return "already-promoted" as const
      }
      return yield* Effect.scoped(Effect.gen(function* () {
        // Stryker disable next-line ObjectLiteral: "r" is the platform's default flag, spelled out for the reader
        const source = yield* fs.open(NodePath.join(stagingRoot, fileId), { flag: "r" }).pipe(
          Effect.catchIf(isNotFound, () => new ReceiptStorageError({ operation: "promote", code: "missing" }))
        )
        const temporary = yield* temporaryFile(storageRoot, sha256)
        const hash = createHash("sha256")
        yield* eachChunk(source, (chunk) => {
          hash.update(chunk)
          return temporary.file.writeAll(chunk)
        })
        if (hash.digest("hex") !== sha256) {
          return yield* new ReceiptStorageError({ operation: "promote", code: "digest-mismatch" })
        }
        yield* temporary.file.sync
        // The rename replaces a damaged copy atomically; a concurrent replay renames identical bytes.
        yield* Effect.uninterruptible(Effect.zipRight(fs.rename(temporary.path, target), syncDirectory(storageRoot)))
        return "promoted" as const
      }))
    }, storageFailure("promote"))

    const deleteStaged = Effect.fn("FileStore.deleteStaged")(function* (fileId: string, sha256: string) {
      yield* requireFileId(fileId)
      yield* requireSha256(sha256)
      // The staged copy may be the only copy: it goes only once the permanent copy is verified.
      yield* verifyPermanent("delete-staged", sha256)
      return yield* fs.remove(NodePath.join(stagingRoot, fileId)).pipe(
        Effect.as("deleted" as const),
        Effect.catchIf(isNotFound, () => Effect.succeed("already-deleted" as const))
      )
    }, storageFailure("delete-staged"))

    const auditCheck = Effect.fn("FileStore.auditCheck")(function* (sha256: string) {
      yield* requireSha256(sha256)
      yield* verifyPermanent("audit-check", sha256)
    }, storageFailure("audit-check"))

    const discardStaged = (fileId: string) =>
      Effect.zipRight(requireFileId(fileId), Effect.ignore(fs.remove(NodePath.join(stagingRoot, fileId))))

    return FileStore.of({ stage, promote, deleteStaged, auditCheck, discardStaged })
  })

const checkRoot = (fs: FileSystem.FileSystem, root: string) =>
  Effect.gen(function* () {
    if (!NodePath.isAbsolute(root)) return Either.left("not-absolute" as const)
    const info = yield* Effect.either(fs.stat(root))
    if (Either.isLeft(info)) {
      const reason = reasonOf(info.left)
      return Either.left(reason === "NotFound" ? "missing" as const : reason === "BadResource" ? "not-a-directory" as const : "inaccessible" as const)
    }
    if (info.right.type !== "Directory") return Either.left("not-a-directory" as const)
    if ((info.right.mode & 0o077) !== 0) return Either.left("group-or-world-accessible" as const)
    // Writable means a file can really be created and removed there (a read-only mount or an immutable
    // directory refuses even root, whatever the mode bits say).
    // Stryker disable next-line StringLiteral: the purpose only names a file an operator might find left behind
    const probe = NodePath.join(root, temporaryName("probe"))
    const writable = yield* Effect.scoped(fs.open(probe, { flag: "wx", mode: 0o600 })).pipe(
      Effect.zipRight(fs.remove(probe)),
      Effect.isSuccess
    )
    if (!writable) {
      yield* Effect.ignore(fs.remove(probe))
      return Either.left("not-writable" as const)
    }
    const real = yield* Effect.either(fs.realPath(root))
    return Either.isLeft(real) ? Either.left("inaccessible" as const) : Either.right(real.right)
  })

/** True when `inner` lies below `outer` (or is `outer` itself, which `checkRoots` tells apart before). */
const within = (outer: string, inner: string) => {
  const relative = NodePath.relative(outer, inner)
  // A step up is ".." itself or "../…"; a directory may well be named "..data".
  return relative !== ".." && !relative.startsWith(`..${NodePath.sep}`) && !NodePath.isAbsolute(relative)
}

/**
 * Start-up check of both roots: absolute, existing directories, writable (a probe file created and
 * removed), closed to group and others (`mode & 0o077 === 0`), and distinct once symbolic links are
 * resolved (neither inside the other). Every problem is reported with the variable it belongs to.
 */
export const checkRoots = (roots: StoreRoots): Effect.Effect<void, RootInvalid, FileSystem.FileSystem> =>
  Effect.gen(function* () {
    const fs = yield* FileSystem.FileSystem
    const staging = yield* checkRoot(fs, roots.staging)
    const storage = yield* checkRoot(fs, roots.storage)
    const problems: Array<{ readonly variable: RootVariable; readonly problem: RootProblem }> = []
    if (Either.isLeft(staging)) problems.push({ variable: "RECEIPT_STAGING_ROOT", problem: staging.left })
    if (Either.isLeft(storage)) problems.push({ variable: "RECEIPT_STORAGE_ROOT", problem: storage.left })
    if (Either.isRight(staging) && Either.isRight(storage)) {
      if (staging.right === storage.right) {
        problems.push({ variable: "RECEIPT_STAGING_ROOT", problem: "same-as-other-root" })
        problems.push({ variable: "RECEIPT_STORAGE_ROOT", problem: "same-as-other-root" })
      } else if (within(storage.right, staging.right)) {
        problems.push({ variable: "RECEIPT_STAGING_ROOT", problem: "inside-other-root" })
      } else if (within(staging.right, storage.right)) {
        problems.push({ variable: "RECEIPT_STORAGE_ROOT", problem: "inside-other-root" })
      }
    }
    const [first, ...rest] = problems
    if (first !== undefined) return yield* new RootInvalid({ problems: [first, ...rest] })
  })

/** The store on the platform's `FileSystem` (`BunContext.layer`); refuses to build when `checkRoots` fails. */
export const FileStoreLive = (roots: StoreRoots): Layer.Layer<FileStore, RootInvalid, FileSystem.FileSystem> =>
  Layer.effect(FileStore, Effect.zipRight(checkRoots(roots), make(roots)))
