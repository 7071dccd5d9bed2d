export * from "./PgCluster.ts"
export * from "./TestDatabase.ts"
export * from "./LoopbackProvider.ts"
