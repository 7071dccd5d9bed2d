export * from "./PgCluster.ts"
export * from "./TestDatabase.ts"
