import WorkersBoundary
import Foundation

/// One versioned SQL file, e.g. `0002_domain.sql` → version 2, name `domain`.
///
/// Immutable value; `checksum` (SHA-256 of the file's text) is recorded in `schema_migrations` when the
/// migration is applied, so an edited file that was already applied is detected instead of ignored.
public struct Migration: Sendable, Equatable, CustomStringConvertible {
    public let version: Int
    public let name: String
    public let sql: String
    public let checksum: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
        self.checksum = Migration.checksum(of: sql)
    }

    /// SHA-256 of `sql`'s UTF-8 bytes as 64 lower-case hex digits (the form `schema_migrations` holds).
    static func checksum(of sql: String) -> String {
        ContentHash.sha256Hex(sql)
    }

    public var description: String { "\(Migration.pad(version))_\(name)" }

    /// `0001_ledger.sql` → `(1, "ledger")`; nil for any other file name.
    public static func parseFileName(_ fileName: String) -> (version: Int, name: String)? {
        guard fileName.hasSuffix(".sql") else { return nil }
        let stem = fileName.dropLast(4)
        guard let underscore = stem.firstIndex(of: "_") else { return nil }
        let digits = stem[stem.startIndex..<underscore]
        let name = stem[stem.index(after: underscore)...]
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber),
              let version = Int(digits), version > 0, !name.isEmpty
        else { return nil }
        return (version, String(name))
    }

    /// The app's migrations (the quiz backend's domain: `users`, `subscriptions`, …), shipped in this module's
    /// `Migrations/` resource directory, sorted by version; recorded in `schema_migrations`. The runtime's own
    /// migrations are `WorkersSchema.migrations()` (`WorkersMigrations/`), recorded apart.
    package static func bundled() throws -> [Migration] {
        try validated(load(directory: resourceDirectory("Migrations")), retired: retired)
    }

    /// A resource directory of this module's bundle, e.g. `Migrations`.
    static func resourceDirectory(_ name: String) throws -> URL {
        guard let directory = Bundle.module.url(forResource: name, withExtension: nil) else {
            throw PostgresError(category: .migration, message: "the \(name) resource directory is missing from the Storage bundle")
        }
        return directory
    }

    /// Every `NNNN_name.sql` file in `directory`, sorted by version. Other files are ignored; two files
    /// with the same version are an error.
    package static func load(directory: URL) throws -> [Migration] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw PostgresError(category: .migration, message: "cannot list migrations in \(directory.path): \(error)")
        }
        var migrations: [Migration] = []
        for fileName in names.sorted() {
            guard let (version, name) = parseFileName(fileName) else { continue }
            let url = directory.appendingPathComponent(fileName)
            let sql: String
            do {
                sql = try String(contentsOf: url, encoding: .utf8)
            } catch {
                throw PostgresError(category: .migration, message: "cannot read migration \(fileName): \(error)")
            }
            migrations.append(Migration(version: version, name: name, sql: sql))
        }
        return try validated(migrations)
    }

    /// Versions that shipped once and were withdrawn, with the reason. A database that applied one keeps
    /// its `schema_migrations` row (the ledger stays a true record of what ran there); the migrator reports
    /// such a row as `retired`, neither `unknown` (the schema is not ahead of this build) nor pending. A
    /// retired number is never reused.
    ///
    /// - 3 `probe`: created `probe_rows`, a bench/test table, on every database. It now comes only from
    ///   `BenchSchema` (`workerctl migrate --bench-tables`, the tests). A database that applied 0003 keeps
    ///   the table; no production code reads or writes it, and an operator may `DROP TABLE probe_rows`.
    ///
    /// - 1, 14, 16, 18–21: the runtime's own migrations (ledger, outbox, subject keys), moved to their own line
    ///   (`WorkersSchema`, table `workers_migrations`). A database migrated before the move keeps their
    ///   `schema_migrations` rows (an older build still reads it as up to date); `WorkersSchema.migrate` records them
    ///   in `workers_migrations` without running them again. The app's numbering never reuses them.
    package static let retired: [Int: String] = [
        3: "probe (bench/test table probe_rows; now created only by `workerctl migrate --bench-tables`)",
    ].merging(WorkersSchema.legacyVersions.map { ($0.key, "\($0.value): moved to the runtime's line (workers_migrations)") },
              uniquingKeysWith: { first, _ in first })

    static func validated(_ migrations: [Migration], retired: [Int: String] = [:]) throws -> [Migration] {
        if let reused = migrations.first(where: { retired[$0.version] != nil }) {
            throw PostgresError(category: .migration, message: "migration \(reused) reuses the retired version \(reused.version)")
        }
        let sorted = migrations.sorted { $0.version < $1.version }
        for (previous, next) in zip(sorted, sorted.dropFirst()) where previous.version == next.version {
            throw PostgresError(category: .migration, message: "two migrations with version \(next.version): \(previous) and \(next)")
        }
        return sorted
    }

    static func pad(_ version: Int) -> String {
        let digits = String(version)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}

/// What the database has applied compared with the migrations this binary ships.
public struct MigrationStatus: Sendable {
    /// A row of `schema_migrations`.
    public struct Applied: Sendable, Equatable {
        public let version: Int
        public let name: String
        public let checksum: String
        public let appliedAt: Date
    }

    /// Applied migrations, by version.
    public let applied: [Applied]
    /// Shipped migrations not applied yet, in the order they will be applied.
    public let pending: [Migration]
    /// Versions applied with a checksum different from the shipped file (someone edited an applied file).
    public let modified: [Int]
    /// Versions applied in the database that this binary does not ship (the schema is ahead of the code).
    public let unknown: [Int]
    /// Versions applied in the database that were withdrawn on purpose (the migrator's `retired`,
    /// `Migration.retired` for the bundled one).
    public let retired: [Int]

    /// True when every shipped migration is applied unchanged: the schema is not behind this binary.
    public var isUpToDate: Bool { pending.isEmpty && modified.isEmpty }
}
