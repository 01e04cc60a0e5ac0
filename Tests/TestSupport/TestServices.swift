import Foundation
import Synchronization
import XCTest

/// Where the tests find the real Redis and PostgreSQL that `scripts/services start` runs.
///
/// `REDIS_URL` / `DATABASE_URL` override the defaults (the private ports 6390 / 5440).
/// Tests that need a clean Redis use their own database index (`redisURL(db:)`) so that
/// test targets running in parallel processes do not see each other's keys.
public enum TestServices {
    /// How many databases the test Redis has: `--databases` of scripts/services. A server restored from its files (a
    /// copied AOF, an RDB) needs as many, or it refuses to load a file that selects a higher index.
    public static let redisDatabases = 256

    /// database index → the test file that claimed it first in this process (`redisURL(db:claimedBy:)`).
    private static let databaseClaims = Mutex<[Int: String]>([:])

    public static var redisBaseURL: String {
        ProcessInfo.processInfo.environment["REDIS_URL"] ?? "redis://127.0.0.1:6390/0"
    }

    /// The test Redis URL with the database index replaced by `db` (0...255: `scripts/services` runs 256).
    ///
    /// Invariant: one test file per database. The first file that asks for `db` claims it for the run; another file
    /// asking for it fails the asking test (two files on one database met each other's keys and connections: a
    /// `CLIENT LIST` count broke when a new file took 58, which four others held). `file` is the caller's, passed on
    /// by `TestRedis`; helpers that choose a database for their callers take the caller's `#fileID` too.
    public static func redisURL(db: Int, claimedBy file: String = #fileID) -> String {
        let owner = databaseClaims.withLock { claims in
            if let owner = claims[db] { return owner }
            claims[db] = file
            return file
        }
        if owner != file {
            XCTFail("Redis database \(db) is claimed by \(owner); \(file) needs a database of its own (free: 128 and up, below \(redisDatabases))")
        }
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

    /// Test data kept in the repository (`Tests/Fixtures`): Apple's published App Store Server test data
    /// (copies of `../shared/fixtures`, so a bare clone (CI) has them), and Sidekiq 7/8 payloads (`sidekiq-7-8/`).
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

extension TestServices {
    public struct NoClosedPort: Error, CustomStringConvertible {
        public var description: String { "cannot bind a probe socket on 127.0.0.1" }
    }

    /// A loopback TCP port with nothing listening (bound to an OS-chosen port, then closed): connecting to it is
    /// refused at once.
    public static func closedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                bind(fd, sa, len) == 0 && getsockname(fd, sa, &len) == 0
            }
        }
        guard ok else { throw NoClosedPort() }
        return Int(UInt16(bigEndian: addr.sin_port))
    }
}

extension TestServices {
    /// A redis-server of the test's own on 127.0.0.1:`port`, without persistence unless `arguments` ask for it
    /// (`arguments` come last, so they win); the caller kills it. The one way the tests start a private Redis.
    public static func startRedisServer(port: Int, _ arguments: [String] = []) throws -> ChildProcess {
        guard let redisServer = which("redis-server") else { throw NoRedisServer() }
        return try ChildProcess(executable: redisServer, arguments: [
            "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"] + arguments)
    }

    public struct NoRedisServer: Error, CustomStringConvertible {
        public var description: String { "redis-server is not installed (scripts/services install)" }
    }
}
