import Foundation
import Logging

/// The runtime's own PostgreSQL schema, as an API (River's `rivermigrate` is the model): the tables and functions the
/// library itself reads and writes — `job_ledger` (exactly-once), `job_outbox`, `job_outbox_relays`, `workers_enqueue`
/// and its helpers (transactional enqueue), `subject_keys`, `subject_key_encryption_keys`, `subject_key_erasures`,
/// `workers_personal_fields` (encrypted personal arguments) — and nothing of any app (`users`, … are the app's own
/// migrations, `Migrator.bundled()`).
///
/// The files are `Sources/Storage/WorkersMigrations/NNNN_name.sql`; what was applied is recorded in
/// `workers_migrations` under the line `workers` (`MigrationTable.lined`), never in `schema_migrations` (a table
/// Rails, Ecto and golang-migrate own too). With `schema:` the table and every runtime object go into that schema
/// (created if missing); the processes then need it on their `search_path`, e.g. a URL ending in
/// `?options=-c%20search_path%3Dmyschema`. A database migrated by a build from before the split (all in
/// `schema_migrations`) is adopted: those versions are recorded in `workers_migrations`, none runs again.
///
/// Every call takes the migrators' advisory lock for `migrate` (any number of processes at once: one applies, the
/// others find nothing to do) and none for `status`/`pending`/`current`. Stateless; any thread.
public enum WorkersSchema {
    /// One migration file of the runtime's line (`version`, `name`, `description` = `NNNN_name`).
    public typealias Migration = WorkersStorage.Migration
    /// What a database has applied of the runtime's line: `applied`, `pending`, `modified`, `isUpToDate`.
    public typealias Status = MigrationStatus

    /// The line of `workers_migrations` the runtime's migrations are recorded under.
    public static let line = "workers"
    /// The table the runtime's applied migrations are recorded in.
    public static let tableName = "workers_migrations"

    /// The runtime's migrations as numbered before the split, when they were recorded in `schema_migrations` with the
    /// app's: adopted from there by number and name. Frozen: a runtime migration added later is never looked for in
    /// `schema_migrations` (where the app's own numbers live), and the app never reuses these numbers
    /// (`Migration.retired`).
    public static let legacyVersions: [Int: String] = [
        1: "ledger", 14: "job_outbox", 16: "outbox_faults", 18: "subject_keys", 19: "subject_key_erasures",
        20: "subject_key_person_digest", 21: "outbox_sealed_size",
    ]

    /// The runtime's migrations this build ships, by version.
    public static func migrations() throws -> [Migration] {
        try Migration.validated(Migration.load(directory: Migration.resourceDirectory("WorkersMigrations")))
    }

    /// A migrator for the runtime's line in `schema` (nil: the session's `search_path`). Throws `.usage` for a
    /// schema that is not a plain lowercase identifier.
    package static func migrator(schema: String? = nil, logger: Logger = Logger(label: "workers.schema")) throws -> Migrator {
        try Migrator(migrations: migrations(), table: MigrationTable.lined(line, table: tableName, schema: schema),
                     adopting: legacyVersions, logger: logger)
    }

    // MARK: - By URL (one short session each)

    /// Applies the runtime's pending migrations to the database at `url` (`postgres://…`) and returns the ones this
    /// call applied (empty when up to date). Throws `PostgresError` (`.connection`, `.migration` naming the file that
    /// failed or was modified after being applied, `.usage`).
    @discardableResult
    public static func migrate(url: String, schema: String? = nil, logger: Logger = Logger(label: "workers.schema")) throws -> [Migration] {
        let migrator = try migrator(schema: schema, logger: logger)
        return try withSession(url) { try migrator.migrate(on: $0) }
    }

    /// The runtime's migrations this build ships that the database at `url` has not applied, in the order
    /// `migrate` would apply them.
    public static func pending(url: String, schema: String? = nil) throws -> [Migration] {
        try status(url: url, schema: schema).pending
    }

    /// The highest version of the runtime's line applied in the database at `url`; nil when none is.
    public static func current(url: String, schema: String? = nil) throws -> Int? {
        try status(url: url, schema: schema).applied.map(\.version).max()
    }

    /// Applied, pending, modified and unknown migrations of the runtime's line in the database at `url`. Read-only.
    public static func status(url: String, schema: String? = nil) throws -> Status {
        let migrator = try migrator(schema: schema)
        return try withSession(url) { try migrator.status(on: $0) }
    }

    // MARK: - On a session or pool the caller holds

    @discardableResult
    public static func migrate(on connection: PostgresConnection, schema: String? = nil,
                               logger: Logger = Logger(label: "workers.schema")) throws -> [Migration] {
        try migrator(schema: schema, logger: logger).migrate(on: connection)
    }

    public static func status(on connection: PostgresConnection, schema: String? = nil) throws -> Status {
        try migrator(schema: schema).status(on: connection)
    }

    /// Throws `WorkersSchemaBehind` (naming each pending or modified migration and how to apply them) unless the
    /// runtime's line is complete in `pool`'s database; `PostgresError` when it cannot be read. What `WorkerProcess`
    /// checks before it starts when it has a database.
    public static func requireCurrent(pool: PostgresPool, schema: String? = nil) throws {
        let status = try pool.withConnection { try WorkersSchema.status(on: $0, schema: schema) }
        if !status.isUpToDate { throw WorkersSchemaBehind(status: status, schema: schema) }
    }

    private static func withSession<T>(_ url: String, _ body: (PostgresConnection) throws -> T) throws -> T {
        let connection = try PostgresConnection(url: url, options: PostgresConnectionOptions(applicationName: "workers-schema"))
        defer { connection.close() }
        return try body(connection)
    }
}

/// The database's runtime schema is behind this build: `pending` migrations are not applied, or `modified` ones were
/// applied from a different file. Thrown by `WorkerProcess` (with a database) before it starts, and by
/// `WorkersSchema.requireCurrent`.
public struct WorkersSchemaBehind: Error, Sendable, Equatable, CustomStringConvertible {
    /// The pending migrations, as `NNNN_name`, in the order they would be applied.
    public let pending: [String]
    /// Versions applied from a file other than the one shipped.
    public let modified: [Int]
    /// The schema given to the check; nil: the `search_path`.
    public let schema: String?

    public init(status: WorkersSchema.Status, schema: String?) {
        pending = status.pending.map(\.description)
        modified = status.modified
        self.schema = schema
    }

    public var description: String {
        var problems: [String] = []
        if !pending.isEmpty { problems.append("pending: \(pending.joined(separator: ", "))") }
        if !modified.isEmpty {
            problems.append("applied from a different file: \(modified.map(Migration.pad).joined(separator: ", "))")
        }
        let argument = schema.map { ", schema: \"\($0)\"" } ?? ""
        return "the runtime's database schema (\(WorkersSchema.tableName), line \(WorkersSchema.line)) is behind this build "
            + "(\(problems.joined(separator: "; "))); apply it with `WorkersSchema.migrate(url: …\(argument))` or `workerctl migrate`"
    }
}
