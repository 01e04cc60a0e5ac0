import Foundation
import Logging

/// Applies versioned migrations once and in order, recording each in its `table` (`MigrationTable`).
///
/// `migrate` takes a session-level `pg_advisory_lock` (key `advisoryLockKey`, one for every line), so any number
/// of processes may call it at the same moment: one applies the pending files, the others wait, then find nothing
/// to do. Each migration runs in its own transaction together with its row, so a failing file leaves neither partial
/// schema nor a record. The lock is released at the end (or by the server if the session dies).
///
/// Adoption (`adopting`): versions that an older build recorded in the same schema's `schema_migrations` (ours: a
/// `bigint` version, `name`, `checksum`, `applied_at`), under the same number and name, count as applied: `status`
/// reads them, and `migrate` copies them into `table` (checksum and time kept, nothing run again). A table of that
/// name with another shape (Rails', Ecto's, golang-migrate's) is never read, never written.
///
/// A value type; each call uses only the connection it is given (or one checked out of the pool).
public struct Migrator: Sendable {
    /// Advisory lock key shared by every process of this system ("SWKRMIGR" in ASCII).
    public static let advisoryLockKey: Int64 = 0x5357_4B52_4D49_4752

    /// The migrations this migrator knows, sorted by version.
    public let migrations: [Migration]
    /// Versions withdrawn on purpose, with the reason: an applied one is reported `retired`, not `unknown`.
    public let retired: [Int: String]
    /// Where the applied migrations are recorded (and, with a schema, where they create their objects).
    public let table: MigrationTable
    /// Versions (with their names) an older build may have recorded in `schema_migrations`: adopted, not run again.
    public let adopting: [Int: String]
    private let logger: Logger

    /// Throws `.migration` when two migrations share a version, or one reuses a retired version.
    public init(migrations: [Migration], retired: [Int: String] = [:], table: MigrationTable = .app,
                adopting: [Int: String] = [:], logger: Logger = Logger(label: "storage.migrator")) throws {
        self.migrations = try Migration.validated(migrations, retired: retired)
        self.retired = retired
        self.table = table
        self.adopting = table.line == nil ? [:] : adopting  // `.app` is schema_migrations itself
        self.logger = logger
    }

    /// The app's migrator: the SQL files shipped in `Sources/Storage/Migrations/` (and `Migration.retired`),
    /// recorded in `schema_migrations`. The runtime's own is `WorkersSchema.migrator(schema:)`; both together,
    /// runtime first: `BundledSchema`.
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

        try connection.executeScript(table.createSQL)
        try adoptLegacyRows(on: connection)
        let status = try readStatus(on: connection)
        if !status.modified.isEmpty {
            throw PostgresError(category: .migration,
                                message: "applied migration(s) \(status.modified.map(Migration.pad).joined(separator: ", ")) in \(table) differ from the shipped files (checksum mismatch); refusing to migrate")
        }
        var applied: [Migration] = []
        for migration in status.pending {
            let started = ContinuousClock.now
            do {
                try connection.transaction { conn in
                    if let schema = table.schema {
                        // Objects land in the named schema; pg_catalog stays searched implicitly.
                        try conn.executeScript("SET LOCAL search_path TO \"\(schema)\"")
                    }
                    try conn.executeScript(renderedSQL(migration))
                    try recordApplied(migration, milliseconds: Int((ContinuousClock.now - started).seconds * 1000), on: conn)
                }
            } catch var error as PostgresError {
                if error.category == .query { error.message = "migration \(migration) failed: \(error.message)" }
                throw error
            }
            logger.info("applied migration", metadata: ["migration": "\(migration)", "table": "\(table)"])
            applied.append(migration)
        }
        return applied
    }

    /// The migration's SQL for this table's schema: a function pinned to `search_path = public, pg_temp` (SECURITY
    /// DEFINER) is pinned to the named schema instead. The checksum stays the file's.
    func renderedSQL(_ migration: Migration) -> String {
        guard let schema = table.schema else { return migration.sql }
        return migration.sql.replacingOccurrences(of: "search_path = public, pg_temp", with: "search_path = \"\(schema)\", pg_temp")
    }

    private func recordApplied(_ migration: Migration, milliseconds: Int, on conn: PostgresConnection) throws {
        if let line = table.line {
            try conn.execute("""
                INSERT INTO \(table.qualifiedName) (line, version, name, checksum, applied_at, execution_ms)
                VALUES ($1, $2, $3, $4, clock_timestamp(), $5)
                """, [line, migration.version, migration.name, migration.checksum, milliseconds])
        } else {
            try conn.execute("""
                INSERT INTO \(table.qualifiedName) (version, name, checksum, applied_at, execution_ms)
                VALUES ($1, $2, $3, clock_timestamp(), $4)
                """, [migration.version, migration.name, migration.checksum, milliseconds])
        }
    }

    /// Copies the adoptable rows of the old `schema_migrations` into `table`, in one transaction (under the
    /// caller's advisory lock). The old rows stay: an older build reading them still finds its schema complete.
    private func adoptLegacyRows(on connection: PostgresConnection) throws {
        guard let line = table.line else { return }
        let recorded = Set(try lineRows(on: connection).map(\.version))
        let legacy = try legacyRows(on: connection).filter { !recorded.contains($0.version) }
        guard !legacy.isEmpty else { return }
        try connection.transaction { conn in
            for row in legacy {
                try conn.execute("""
                    INSERT INTO \(table.qualifiedName) (line, version, name, checksum, applied_at, execution_ms)
                    SELECT $1, version, name, checksum, applied_at, 0 FROM \(table.qualify("schema_migrations"))
                     WHERE version = $2
                    ON CONFLICT (line, version) DO NOTHING
                    """, [line, row.version])
            }
        }
        logger.info("recorded migrations applied by an older build", metadata: [
            "table": "\(table)", "versions": "\(legacy.map { Migration.pad($0.version) }.joined(separator: ","))"])
    }

    /// `migrate(on:)` with a connection checked out of `pool`.
    @discardableResult
    public func migrate(pool: PostgresPool) throws -> [Migration] {
        try pool.withConnection { try migrate(on: $0) }
    }

    // MARK: - Status

    /// Compares the recorded migrations (`table`, plus adoptable older rows) with the shipped ones. Read-only; no lock.
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
                            message: "the database schema (\(table)) is behind this binary (\(problems.joined(separator: "; "))); run `workerctl migrate`")
    }

    private func readStatus(on connection: PostgresConnection) throws -> MigrationStatus {
        var applied = try lineRows(on: connection)
        let recorded = Set(applied.map(\.version))
        applied += try legacyRows(on: connection).filter { !recorded.contains($0.version) }
        applied.sort { $0.version < $1.version }
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

    /// The rows of `table` (of this line, for a lined table); none while the table does not exist.
    private func lineRows(on connection: PostgresConnection) throws -> [MigrationStatus.Applied] {
        let exists = try connection.queryFirst("SELECT to_regclass($1) IS NOT NULL AS present", [table.qualifiedName])?.bool("present") ?? false
        guard exists else { return [] }
        let rows: PostgresRows
        if let line = table.line {
            rows = try connection.query("SELECT version, name, checksum, applied_at FROM \(table.qualifiedName) WHERE line = $1 ORDER BY version", [line])
        } else {
            rows = try connection.query("SELECT version, name, checksum, applied_at FROM \(table.qualifiedName) ORDER BY version")
        }
        return try rows.map { row in
            MigrationStatus.Applied(version: try row.int("version"), name: try row.string("name"),
                                    checksum: try row.string("checksum"), appliedAt: try row.date("applied_at"))
        }
    }

    /// The `adopting` versions an older build recorded in this schema's `schema_migrations`, same number and name.
    /// Empty when there is no such table, or when it is not ours (another tool's table of that name: Rails' has a
    /// `varchar` version and no checksum), which is then never read further.
    private func legacyRows(on connection: PostgresConnection) throws -> [MigrationStatus.Applied] {
        guard !adopting.isEmpty else { return [] }
        let legacy = table.qualify("schema_migrations")
        let ours = try connection.queryFirst("""
            SELECT count(*) = 4 AS ours FROM pg_attribute
             WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped
               AND ((attname = 'version' AND atttypid = 'bigint'::regtype)
                    OR (attname IN ('name', 'checksum') AND atttypid = 'text'::regtype)
                    OR (attname = 'applied_at' AND atttypid = 'timestamptz'::regtype))
            """, [legacy])?.bool("ours") ?? false
        guard ours else { return [] }
        return try connection.query("SELECT version, name, checksum, applied_at FROM \(legacy) ORDER BY version").compactMap { row in
            let version = try row.int("version")
            let name = try row.string("name")
            guard adopting[version] == name else { return nil }
            return MigrationStatus.Applied(version: version, name: name, checksum: try row.string("checksum"),
                                           appliedAt: try row.date("applied_at"))
        }
    }
}
