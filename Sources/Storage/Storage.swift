// Storage module: PostgreSQL over libpq (see Package.swift for its place in the layering).
//
//   PostgresConnection   one libpq session, owned by one thread at a time; parameterised queries only
//   PostgresRows/Row     copied result rows with typed accessors
//   PostgresError        typed errors: category (connection / query / ...), SQLSTATE, message, SQL first line
//   PostgresPool         thread-safe fixed-size pool with health checks and reconnect backoff
//   Migration/Migrator   versioned SQL files, applied once under an advisory lock, recorded in a MigrationTable
//   WorkersSchema        the runtime's own migrations (WorkersMigrations/, workers_migrations), a public API;
//                        BundledSchema: those, then the app's (Migrations/, schema_migrations)
//   JobLedger            a job's effects + its ledger row (keyed by jid) in one transaction
