import { databaseOutage } from "./faults/DatabaseOutage.ts"
import { leaseTakeover } from "./faults/LeaseTakeover.ts"
import { rootFailure } from "./faults/RootFailure.ts"

// Spec 002's fault scenarios ("Local proof": "Separate fault scenarios suspend a real owner or rename a private
// table to test stale ownership and root failure"), and PostgreSQL stopped under load. One module each, in faults/.
export { databaseOutage, leaseTakeover, rootFailure }
