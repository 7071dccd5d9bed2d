// Regenerates the configuration table in docs/operations.md from the backend's CONFIG list.
import { withConfigTable } from "@delivery/backend/ConfigTable"
import { readFileSync, writeFileSync } from "node:fs"

const page = new URL("../docs/operations.md", import.meta.url).pathname
writeFileSync(page, withConfigTable(readFileSync(page, "utf8")))
console.log(`updated ${page}`)
