import Foundation
import WorkersHTTP
import WorkersQueue
import WorkersStorage
import WorkersTestServices
import Workers
import XCTest

/// The one fixture builder of JobsTests: what a test of the job areas stands on, built the same way for each.
/// - a fresh PostgreSQL database with every bundled migration (`database`, `pool`, `jobDatabase`), dropped again
///   by `tearDown()`;
/// - optionally the test class's own Redis database (`redis`), emptied before the test;
/// - optionally fake providers (`fakes`): the process-wide shared servers with the named services reset, or servers
///   of its own (stopped by `tearDown()`).
/// libcurl is initialised for the HTTP clients the tests build. One instance per test, used from the test's thread.
final class JobsFixture {
    /// Which fake servers the test talks to.
    enum Fakes {
        case none
        /// `FakeServers.shared()`, with these services reset to their defaults.
        case shared(reset: [FakeService])
        /// Servers of this fixture's own, started with these services and stopped by `tearDown()`.
        case own([FakeService])
    }

    let database: PostgresTestDatabase
    let pool: PostgresPool
    /// The test's Redis database; nil when not asked for.
    let redisDatabase: TestRedis?
    /// The fake servers; nil with `.none`.
    let fakeServers: FakeServers?
    private let ownsFakes: Bool

    /// `prefix`: the test database's name prefix; `connections`: the pool's size; `redis`: the Redis database index
    /// the test class claims (emptied now), if it uses Redis.
    init(prefix: String, connections: Int = 8, redis: Int? = nil, fakes: Fakes = .none, claimedBy file: String = #fileID) throws {
        CurlRuntime.initialize()
        if let redis {
            let test = try TestRedis(database: redis, claimedBy: file)
            try test.flush()
            redisDatabase = test
        } else {
            redisDatabase = nil
        }
        switch fakes {
        case .none:
            fakeServers = nil
            ownsFakes = false
        case .shared(let services):
            let shared = try FakeServers.shared()
            for service in services { try shared.reset(service) }
            fakeServers = shared
            ownsFakes = false
        case .own(let services):
            fakeServers = try FakeServers(services)
            ownsFakes = true
        }
        database = try PostgresTestDatabase.create(prefix: prefix)
        pool = PostgresPool(url: database.url, maxConnections: connections)
        _ = try BundledSchema.migrate(pool: pool)
    }

    /// The job-facing handle on the test database.
    var jobDatabase: JobDatabase { JobDatabase(pool: pool) }

    /// The test's Redis database (asked for in `init`).
    var redis: TestRedis { redisDatabase! }

    /// The fake servers (asked for in `init`).
    var fakes: FakeServers { fakeServers! }

    /// The in-process driver (`JobRunnerDriver`) for `registry` against the test database.
    func driver(_ registry: JobRegistry) -> JobRunnerDriver { JobRunnerDriver(registry: registry, database: jobDatabase) }

    func tearDown() {
        if ownsFakes { fakeServers?.stop() }
        pool.shutdown()
        database.drop()
    }
}

/// Base of the JobsTests classes that stand on a `JobsFixture`: builds it (`makeFixture()`, which each class
/// overrides) and the HTTP client its jobs use (`makeHTTPClient()`) before each test, and tears the fixture down
/// after it. XCTest calls set-up, the test and tear-down on one thread; so do these members.
class JobsTestCase: XCTestCase {
    private(set) var fixture: JobsFixture!
    private(set) var http: HTTPClient!

    /// What this class's tests stand on.
    func makeFixture() throws -> JobsFixture {
        throw XCTSkip("\(type(of: self)) does not say which fixture it needs (override makeFixture)")
    }

    /// The HTTP client the jobs under test use (default: a 10 s timeout).
    func makeHTTPClient() -> HTTPClient { HTTPClient(configuration: HTTPClientConfiguration(timeout: .seconds(10))) }

    override func setUpWithError() throws {
        try super.setUpWithError()
        fixture = try makeFixture()
        http = makeHTTPClient()
    }

    override func tearDown() {
        fixture?.tearDown()
        fixture = nil
        super.tearDown()
    }

    var pool: PostgresPool { fixture.pool }
    var redis: TestRedis { fixture.redis }
    var fakes: FakeServers { fixture.fakes }
}
