import Foundation
import Logging

/// Applies versioned migrations once and in order.
///
/// `migrate` takes a session-level `pg_advisory_lock` (key `advisoryLockKey`), so any number of processes
/// may call it at the same moment: one applies the pending files, the others wait, then find nothing to do.
/// Each migration runs in its own transaction together with its `schema_migrations` row, so a failing file
/// leaves neither partial schema nor a record. The lock is released at the end (or by the server if the
/// session dies).
///
/// A value type; each call uses only the connection it is given (or one checked out of the pool).
public struct Migrator: Sendable {
    /// Advisory lock key shared by every process of this system ("SWKRMIGR" in ASCII).
    public static let advisoryLockKey: Int64 = 0x5357_4B52_4D49_4752

    /// The migrations this migrator knows, sorted by version.
    public let migrations: [Migration]
    /// Versions withdrawn on purpose, with the reason: an applied one is reported `retired`, not `unknown`.
    public let retired: [Int: String]
    private let logger: Logger

    /// Throws `.migration` when two migrations share a version, or one reuses a retired version.
    public init(migrations: [Migration], retired: [Int: String] = [:],
                logger: Logger = Logger(label: "storage.migrator")) throws {
        self.migrations = try Migration.validated(migrations, retired: retired)
        self.retired = retired
        self.logger = logger
    }

    /// A migrator for the SQL files shipped in `Sources/Storage/Migrations/` (and `Migration.retired`).
    public static func bundled(logger: Logger = Logger(label: "storage.migrator")) throws -> Migrator {
        try Migrator(migrations: Migration.bundled(), retired: Migration.retired, logger: logger)
    }

    // MARK: - Migrate

    /// Applies every pending migration, in version order, and returns the ones this call applied.
    /// Throws `.migration` (and applies nothing) if an applied migration's file was modified.
    @discardableResult
    public func migrate(on connection: PostgresConnection) throws -> [Migration] {
        try connection.query("SELECT pg_advisory_lock($1)", [Migrator.advisoryLockKey])
        defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", [Migrator.advisoryLockKey]) }

        try connection.executeScript(Migrator.createTableSQL)
        let status = try readStatus(on: connection)
        if !status.modified.isEmpty {
            throw PostgresError(category: .migration,
                                message: "applied migration(s) \(status.modified.map(Migration.pad).joined(separator: ", ")) differ from the shipped files (checksum mismatch); refusing to migrate")
        }
        var applied: [Migration] = []
        for migration in status.pending {
            let started = ContinuousClock.now
            do {
                try connection.transaction { conn in
                    try conn.executeScript(migration.sql)
                    try conn.execute("""
                        INSERT INTO schema_migrations (version, name, checksum, applied_at, execution_ms)
                        VALUES ($1, $2, $3, clock_timestamp(), $4)
                        """, [migration.version, migration.name, migration.checksum, Int((ContinuousClock.now - started).seconds * 1000)])
                }
            } catch var error as PostgresError {
                if error.category == .query { error.message = "migration \(migration) failed: \(error.message)" }
                throw error
            }
            logger.info("applied migration", metadata: ["migration": "\(migration)"])
            applied.append(migration)
        }
        return applied
    }

    /// `migrate(on:)` with a connection checked out of `pool`.
    @discardableResult
    public func migrate(pool: PostgresPool) throws -> [Migration] {
        try pool.withConnection { try migrate(on: $0) }
    }

    // MARK: - Status

    /// Compares `schema_migrations` with the shipped migrations. Read-only; takes no lock.
    public func status(on connection: PostgresConnection) throws -> MigrationStatus {
        try readStatus(on: connection)
    }

    public func status(pool: PostgresPool) throws -> MigrationStatus {
        try pool.withConnection { try status(on: $0) }
    }

    /// True when the schema has every shipped migration, unmodified (`workerctl worker` refuses to start otherwise).
    public func isUpToDate(on connection: PostgresConnection) throws -> Bool {
        try status(on: connection).isUpToDate
    }

    public func isUpToDate(pool: PostgresPool) throws -> Bool {
        try status(pool: pool).isUpToDate
    }

    /// Throws a `.migration` error naming the pending or modified migrations unless the schema is up to
    /// date — what a worker calls before it starts taking jobs.
    public func requireUpToDate(pool: PostgresPool) throws {
        try pool.withConnection { try requireUpToDate(on: $0) }
    }

    public func requireUpToDate(on connection: PostgresConnection) throws {
        let status = try status(on: connection)
        guard !status.isUpToDate else { return }
        var problems: [String] = []
        if !status.pending.isEmpty {
            problems.append("pending: \(status.pending.map(\.description).joined(separator: ", "))")
        }
        if !status.modified.isEmpty {
            problems.append("modified after being applied: \(status.modified.map(Migration.pad).joined(separator: ", "))")
        }
        throw PostgresError(category: .migration,
                            message: "the database schema is behind this binary (\(problems.joined(separator: "; "))); run `workerctl migrate`")
    }

    private func readStatus(on connection: PostgresConnection) throws -> MigrationStatus {
        let exists = try connection.queryFirst("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")?.bool("present") ?? false
        var applied: [MigrationStatus.Applied] = []
        if exists {
            for row in try connection.query("SELECT version, name, checksum, applied_at FROM schema_migrations ORDER BY version") {
                applied.append(MigrationStatus.Applied(version: try row.int("version"), name: try row.string("name"),
                                                       checksum: try row.string("checksum"), appliedAt: try row.date("applied_at")))
            }
        }
        let appliedByVersion = Dictionary(applied.map { ($0.version, $0) }, uniquingKeysWith: { first, _ in first })
        let shipped = Set(migrations.map(\.version))
        return MigrationStatus(
            applied: applied,
            pending: migrations.filter { appliedByVersion[$0.version] == nil },
            modified: migrations.compactMap { migration in
                guard let row = appliedByVersion[migration.version], row.checksum != migration.checksum else { return nil }
                return migration.version
            },
            unknown: applied.map(\.version).filter { !shipped.contains($0) && retired[$0] == nil },
            retired: applied.map(\.version).filter { !shipped.contains($0) && retired[$0] != nil })
    }

    static let createTableSQL = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version      bigint PRIMARY KEY,
            name         text NOT NULL,
            checksum     text NOT NULL,
            applied_at   timestamptz NOT NULL DEFAULT now(),
            execution_ms integer NOT NULL DEFAULT 0
        )
        """
}
