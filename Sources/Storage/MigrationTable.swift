/// Where a `Migrator` records the migrations it applied, and where it applies them.
///
/// Two shapes:
/// - `.app`: `schema_migrations (version bigint PRIMARY KEY, name, checksum, applied_at, execution_ms)`, the app's
///   table (and, before the runtime's line existed, every migration's). Found through the session's `search_path`.
/// - `lined(_:schema:)`: `workers_migrations (line, version, name, checksum, applied_at, execution_ms,
///   PRIMARY KEY (line, version))`, the shape of River's `river_migration`: several sets of migrations ("lines")
///   share one table without sharing version numbers. With a `schema`, the table and every object the migrations
///   create live in that schema (created if missing); without one, in the session's `search_path` (normally `public`).
///
/// Immutable value; the schema and table names are checked identifiers (lowercase letters, digits, `_`), quoted
/// when written into SQL, never outside text spliced in.
public struct MigrationTable: Sendable, Equatable, CustomStringConvertible {
    /// The schema holding the table and the migrations' objects; nil: the session's `search_path`.
    public let schema: String?
    /// The table's name (unqualified).
    public let name: String
    /// The line (set of migrations) this migrator records, for a lined table; nil for `.app`.
    public let line: String?

    /// `schema_migrations`, the app's table.
    public static let app = MigrationTable(schema: nil, name: "schema_migrations", line: nil)

    /// `workers_migrations` (or `table`) in `schema` (nil: the `search_path`), recording `line`.
    /// Throws a `.usage` `PostgresError` for a schema, table or line that is not a plain lowercase identifier.
    public static func lined(_ line: String, table: String = "workers_migrations", schema: String? = nil) throws -> MigrationTable {
        guard MigrationTable.isIdentifier(line) else {
            throw PostgresError(category: .usage, message: "migration line \(line.debugDescription) must be 1-63 of a-z, 0-9, _ (starting with a letter or _)")
        }
        guard MigrationTable.isIdentifier(table) else {
            throw PostgresError(category: .usage, message: "migration table \(table.debugDescription) must be 1-63 of a-z, 0-9, _ (starting with a letter or _)")
        }
        if let schema, !MigrationTable.isIdentifier(schema) || schema.hasPrefix("pg_") {
            throw PostgresError(category: .usage, message: "schema \(schema.debugDescription) must be 1-63 of a-z, 0-9, _ (starting with a letter or _, not pg_)")
        }
        return MigrationTable(schema: schema, name: table, line: line)
    }

    /// The table as SQL: `name`, or `"schema".name`.
    var qualifiedName: String { qualify(name) }

    /// `relation` in this table's schema, as SQL.
    func qualify(_ relation: String) -> String {
        schema.map { "\"\($0)\".\(relation)" } ?? relation
    }

    public var description: String { (schema.map { "\($0).\(name)" } ?? name) + (line.map { " (line \($0))" } ?? "") }

    /// `[a-z_][a-z0-9_]{0,62}`: safe to quote into SQL, and the same name whether quoted or not.
    static func isIdentifier(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard let first = bytes.first, bytes.count <= 63, (97...122).contains(first) || first == 95 else { return false }
        return bytes.allSatisfy { (97...122).contains($0) || (48...57).contains($0) || $0 == 95 }
    }

    var createSQL: String {
        if line == nil {
            return """
                CREATE TABLE IF NOT EXISTS \(qualifiedName) (
                    version      bigint PRIMARY KEY,
                    name         text NOT NULL,
                    checksum     text NOT NULL,
                    applied_at   timestamptz NOT NULL DEFAULT now(),
                    execution_ms integer NOT NULL DEFAULT 0
                )
                """
        }
        return (schema.map { "CREATE SCHEMA IF NOT EXISTS \"\($0)\";\n" } ?? "") + """
            CREATE TABLE IF NOT EXISTS \(qualifiedName) (
                line         text NOT NULL CHECK (char_length(line) BETWEEN 1 AND 63),
                version      bigint NOT NULL CHECK (version >= 1),
                name         text NOT NULL,
                checksum     text NOT NULL,
                applied_at   timestamptz NOT NULL DEFAULT now(),
                execution_ms integer NOT NULL DEFAULT 0,
                PRIMARY KEY (line, version)
            )
            """
    }
}
