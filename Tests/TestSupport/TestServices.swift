import Foundation

/// Where the tests find the real Redis and PostgreSQL that `scripts/services start` runs.
///
/// `REDIS_URL` / `DATABASE_URL` override the defaults (the private ports 6390 / 5440).
/// Tests that need a clean Redis use their own database index (`redisURL(db:)`) so that
/// test targets running in parallel processes do not see each other's keys.
public enum TestServices {
    public static var redisBaseURL: String {
        ProcessInfo.processInfo.environment["REDIS_URL"] ?? "redis://127.0.0.1:6390/0"
    }

    /// The test Redis URL with the database index replaced by `db` (0...15).
    public static func redisURL(db: Int) -> String {
        var base = redisBaseURL
        if let slash = base.range(of: "/", options: .backwards), base[..<slash.lowerBound].contains(":"),
           base.distance(from: base.startIndex, to: slash.lowerBound) > "redis://".count {
            base = String(base[..<slash.lowerBound])
        }
        return "\(base)/\(db)"
    }

    public static var databaseURL: String {
        ProcessInfo.processInfo.environment["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5440/workers"
    }

    /// The repository root (found from this file's path), for scripts and fixtures.
    public static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// Test data kept in the repository (`Tests/Fixtures`): Apple's published App Store Server test data.
    /// Copies of `../shared/fixtures`, so a bare clone (CI) has them.
    public static var fixturesDirectory: URL {
        repositoryRoot.appendingPathComponent("Tests/Fixtures")
    }

    /// The Sidekiq interop script (`Tests/Interop/sidekiq-interop-check.rb`, a copy of
    /// `../shared/interop/sidekiq-interop-check.rb`): pushes through Ruby's `Sidekiq::Client` and dumps
    /// what Sidekiq's Ruby API sees.
    public static var interopScript: URL {
        repositoryRoot.appendingPathComponent("Tests/Interop/sidekiq-interop-check.rb")
    }
}
