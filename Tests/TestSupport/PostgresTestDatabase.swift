import Foundation
import WorkersStorage

/// A throwaway database on the shared test server, so test classes (and test targets running in other
/// processes) never see each other's tables.
///
/// `create()` makes `<prefix>_<random hex>` from `template0`; `drop()` removes it (`WITH (FORCE)`, which
/// also ends any session still connected). Thread-safe: immutable after creation; `drop()` may be called
/// more than once.
public final class PostgresTestDatabase: Sendable {
    /// The database name, `[a-z0-9_]` only.
    public let name: String
    /// `TestServices.databaseURL` with the database replaced by `name`.
    public let url: String
    private let adminURL: String

    /// Creates a fresh, empty database. `prefix` must be lowercase letters, digits and underscores.
    public static func create(prefix: String = "storage_test") throws -> PostgresTestDatabase {
        let adminURL = TestServices.databaseURL
        let suffix = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(12)
        let name = "\(prefix)_\(suffix)"
        // CREATE DATABASE takes an identifier, not a parameter: the name is checked to be a plain
        // identifier we generated, never outside input.
        guard name.utf8.allSatisfy({ (97...122).contains($0) || (48...57).contains($0) || $0 == 95 }), name.count <= 63 else {
            throw PostgresError(category: .usage, message: "invalid test database name \(name)")
        }
        let admin = try PostgresConnection(url: adminURL)
        defer { admin.close() }
        try admin.executeScript("CREATE DATABASE \(name) TEMPLATE template0 ENCODING 'UTF8'")
        return PostgresTestDatabase(name: name, url: try replacingDatabase(in: adminURL, with: name), adminURL: adminURL)
    }

    private init(name: String, url: String, adminURL: String) {
        self.name = name
        self.url = url
        self.adminURL = adminURL
    }

    /// Drops the database (best effort: a failure is printed, not thrown, so teardown never masks a test failure).
    public func drop() {
        do {
            let admin = try PostgresConnection(url: adminURL)
            defer { admin.close() }
            try admin.executeScript("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
        } catch {
            print("warning: could not drop test database \(name): \(error)")
        }
    }

    /// A new connection to this database.
    public func connect() throws -> PostgresConnection {
        try PostgresConnection(url: url)
    }

    /// `url` with its path (database name) replaced by `database`.
    public static func replacingDatabase(in url: String, with database: String) throws -> String {
        guard var components = URLComponents(string: url) else {
            throw PostgresError(category: .usage, message: "cannot parse database URL \(PostgresURL.redacted(url))")
        }
        components.path = "/" + database
        guard let result = components.string else {
            throw PostgresError(category: .usage, message: "cannot rebuild database URL \(PostgresURL.redacted(url))")
        }
        return result
    }
}
