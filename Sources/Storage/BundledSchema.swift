import Logging

/// This repository's whole schema: the runtime's line (`WorkersSchema`, `workers_migrations`), then the app's
/// (`Migrator.bundled()`, `schema_migrations`), in that order (the app's migrations may use the runtime's objects,
/// never the reverse). What `workerctl migrate` applies and `workerctl worker` requires; the tests migrate with it.
///
/// Stateless; any thread. Each migrator takes the advisory lock in turn.
public enum BundledSchema {
    /// The runtime's migrator (default schema), then the app's.
    public static func migrators(logger: Logger = Logger(label: "storage.migrator")) throws -> [Migrator] {
        [try WorkersSchema.migrator(logger: logger), try Migrator.bundled(logger: logger)]
    }

    /// Applies both lines, the runtime's first; returns what this call applied, in that order.
    @discardableResult
    public static func migrate(on connection: PostgresConnection, logger: Logger = Logger(label: "storage.migrator")) throws -> [Migration] {
        try migrators(logger: logger).flatMap { try $0.migrate(on: connection) }
    }

    @discardableResult
    public static func migrate(pool: PostgresPool, logger: Logger = Logger(label: "storage.migrator")) throws -> [Migration] {
        try pool.withConnection { try migrate(on: $0, logger: logger) }
    }

    /// Each line's status, the runtime's first. Read-only.
    public static func status(pool: PostgresPool) throws -> [(table: MigrationTable, status: MigrationStatus)] {
        let migrators = try migrators()
        return try pool.withConnection { connection in
            try migrators.map { ($0.table, try $0.status(on: connection)) }
        }
    }
}
