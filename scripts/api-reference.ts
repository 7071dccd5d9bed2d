// Regenerates docs/api.md from the backend's HttpApi definition.
import { apiReference } from "@delivery/backend/ApiReference"
import { writeFileSync } from "node:fs"

const page = new URL("../docs/api.md", import.meta.url).pathname
writeFileSync(page, apiReference())
console.log(`updated ${page}`)
