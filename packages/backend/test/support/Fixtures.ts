import { repoRoot } from "@delivery/testing"
import { join } from "node:path"

/** A backend entry point under packages/backend/test/fixtures (the real runtime plus test-only workers). */
export const fixturePath = (name: string) => join(repoRoot, "packages/backend/test/fixtures", name)
