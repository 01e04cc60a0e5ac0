import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

final class KeysAndEndpointTests: XCTestCase {
    func testWorkingKeysParseLikeTheGitlabCleaner() {
        XCTAssertEqual(Keys.parseWorking("working:queue:default:vm:123:abc123")?.queue, "default")
        XCTAssertEqual(Keys.parseWorking("working:queue:default:vm:123:abc123")?.identity, "vm:123:abc123")
        let colon = Keys.parseWorking("working:queue:ns:colon:host:9:ff00")
        XCTAssertEqual(colon?.queue, "ns:colon")
        XCTAssertEqual(colon?.identity, "host:9:ff00")
        XCTAssertNil(Keys.parseWorking("working:queue:default:host:notapid:ff"))
        XCTAssertNil(Keys.parseWorking("queue:default"))
        XCTAssertEqual(Keys.fetcherHeartbeat(identity: "vm:1:ab"), "reliable-fetcher-heartbeat-vm-1-ab")
    }

    func testIdentifiers() {
        let jid = Identifiers.jid()
        XCTAssertTrue(Identifiers.isValidJID(jid), jid)
        XCTAssertNotEqual(jid, Identifiers.jid())
        let identity = Identifiers.processIdentity(hostname: "host", pid: 42)
        XCTAssertNotNil(identity.range(of: #"^host:42:[0-9a-f]{12}$"#, options: .regularExpression))
    }

    func testHostnameIsTheOneSidekiqReports() throws {
        // Sidekiq names processes after Ruby's Socket.gethostname (unless $DYNO is set).
        guard ProcessInfo.processInfo.environment["DYNO"] == nil, let ruby = TestServices.which("ruby") else {
            throw XCTSkip("needs ruby and no DYNO")
        }
        let result = try ChildProcess.run(ruby, ["-rsocket", "-e", "print Socket.gethostname.tr(':', '-')"])
        XCTAssertEqual(result.status, 0, result.stderr)
        XCTAssertEqual(Identifiers.hostname, result.stdout)
    }

    func testEndpointURLs() throws {
        let full = try RedisEndpoint(url: "redis://user:p%40ss@redis.example:6380/3")
        XCTAssertEqual(full.host, "redis.example")
        XCTAssertEqual(full.port, 6380)
        XCTAssertEqual(full.database, 3)
        XCTAssertEqual(full.username, "user")
        XCTAssertEqual(full.password, "p@ss")
        XCTAssertFalse(full.description.contains("p@ss"))
        let passwordOnly = try RedisEndpoint(url: "redis://:secret@localhost")
        XCTAssertNil(passwordOnly.username)
        XCTAssertEqual(passwordOnly.password, "secret")
        XCTAssertEqual(passwordOnly.port, 6379)
        XCTAssertThrowsError(try RedisEndpoint(url: "http://localhost"))
        XCTAssertThrowsError(try RedisEndpoint(url: "redis://localhost/abc"))
    }

    func testSentinelURLs() throws {
        let endpoint = try RedisEndpoint(url: "redis+sentinel://:s%40cret@h1:26380,h2,[::1]:26400/mymaster/3")
        XCTAssertEqual(endpoint.sentinel, SentinelTarget(sentinels: [
            .init(host: "h1", port: 26380), .init(host: "h2", port: 26379), .init(host: "::1", port: 26400)],
            masterName: "mymaster"))
        XCTAssertEqual(endpoint.database, 3)
        XCTAssertNil(endpoint.username)
        XCTAssertEqual(endpoint.password, "s@cret")
        XCTAssertEqual(endpoint.description, "sentinel:mymaster/3")
        XCTAssertEqual(try RedisEndpoint(url: "redis+sentinel://u:p@h1:1/m").username, "u")
        XCTAssertEqual(try RedisEndpoint(url: "redis+sentinel://h1/m").database, 0)
        XCTAssertEqual(try RedisEndpoint(url: "redis+sentinel://h1/m/").database, 0)
        XCTAssertThrowsError(try RedisEndpoint(url: "redis+sentinel://h1:26379"))        // no master name
        XCTAssertThrowsError(try RedisEndpoint(url: "redis+sentinel://h1:26379/m/x"))    // database not a number
        XCTAssertThrowsError(try RedisEndpoint(url: "redis+sentinel://h1:0/m"))          // port out of range
        XCTAssertThrowsError(try RedisEndpoint(url: "redis+sentinel://h1,,h2/m"))        // empty Sentinel
        XCTAssertThrowsError(try RedisEndpoint(url: "redis+sentinel://:secret@h1:x/m")) { error in
            XCTAssertFalse("\(error)".contains("secret"), "\(error)")
        }
    }

    /// Issue 32, L2: no Redis URL error shows the password, whatever characters it holds and whichever check
    /// refuses the URL (the review's `rediss://` and `#` reproductions, and the fuzz corpus's redis-url seeds).
    func testRedisURLErrorsNeverShowThePassword() {
        let refused = [
            "ftp://:s3cretpw@h:1/0",                             // review L2: not a Redis scheme (rediss:// is one now)
            "redis://:s3cret#pw@h:1/0",                          // review L2: URLComponents cannot parse it
            "redis://user:s3cretpw@:1/0",                        // no host
            "redis://:s3cretpw@h:1/notanumber",                  // database not a number
            "redis+sentinel://:s3cret/pw@s1/m",                  // '/' in the password: read as a Sentinel address
            "redis+sentinel://:s3cretpw@s1:99999999999999999999/m/0",
            "redis+sentinel://:s3cretpw@/m",
            "http://:s3cretpw@h/0",
            "rediss://h:1/0?password=s3cretpw",                  // found by fuzzing: the query quoted
        ]
        for url in refused {
            XCTAssertThrowsError(try RedisEndpoint(url: url), url) { error in
                XCTAssertFalse("\(error)".contains("s3cret"), "\(url) -> \(error)")
                XCTAssertTrue("\(error)".contains("invalid Redis URL"), "\(error)")
            }
        }
        XCTAssertEqual(RedisEndpoint.redacted("rediss://:s3cretpw@h:1/0"), "rediss://…@h:1/0")
        XCTAssertEqual(RedisEndpoint.redacted("redis://:s3cret#pw@h:1/0"), "redis://…@h:1/0")
        XCTAssertEqual(RedisEndpoint.redacted("redis://h:1/0"), "redis://h:1/0")
        XCTAssertEqual(RedisEndpoint.redacted("redis+sentinel://:pw@s1:26379,[::1]:26380/mymaster/2"),
                       "redis+sentinel://…@s1:26379,[::1]:26380/mymaster/2")
        XCTAssertEqual(RedisEndpoint.redacted("redis://h?x@y&password=s3cretpw"), "redis://…@y…")
        XCTAssertThrowsError(try RedisEndpoint(url: "redis+sentinel://u:s3cret/pw@h/m")) { error in
            XCTAssertFalse("\(error)".contains("s3cret"), "\(error)")
        }
        XCTAssertEqual(RedisEndpoint.redacted("rediss://h:1/0?password=s3cretpw"), "rediss://h:1/0…")  // redis-py's form
        XCTAssertThrowsError(try RedisEndpoint(url: "redis://:s3cretpw@h:1/x")) { error in
            XCTAssertEqual("\(error)", "invalid Redis URL: database 'x' is not a number")
        }
    }

    func testReplicaWaitSettings() throws {
        XCTAssertNil(try ReplicaWait.from(environment: [:]))
        XCTAssertNil(try ReplicaWait.from(environment: ["REDIS_WAIT_REPLICAS": "0"]))
        XCTAssertEqual(try ReplicaWait.from(environment: ["REDIS_WAIT_REPLICAS": "1"]), ReplicaWait(replicas: 1, timeoutMilliseconds: 500))
        XCTAssertEqual(try ReplicaWait.from(environment: ["REDIS_WAIT_REPLICAS": "2", "REDIS_WAIT_TIMEOUT_MS": "40"]),
                       ReplicaWait(replicas: 2, timeoutMilliseconds: 40))
        XCTAssertThrowsError(try ReplicaWait.from(environment: ["REDIS_WAIT_REPLICAS": "-1"]))
        XCTAssertThrowsError(try ReplicaWait.from(environment: ["REDIS_WAIT_REPLICAS": "1", "REDIS_WAIT_TIMEOUT_MS": "0"]))
    }

    func testNoSentinelAnsweringNamesEachSentinel() {
        XCTAssertThrowsError(try RedisConnection(url: "redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster/0")) { error in
            XCTAssertTrue("\(error)".contains("127.0.0.1:1") && "\(error)".contains("127.0.0.1:2"), "\(error)")
            XCTAssertTrue((error as? RedisError)?.isConnectionFailure ?? false)
        }
    }

    func testUnreachableServerNamesTheAddress() {
        XCTAssertThrowsError(try RedisConnection(url: "redis://127.0.0.1:1/0")) { error in
            XCTAssertTrue("\(error)".contains("127.0.0.1:1"), "\(error)")
            XCTAssertTrue((error as? RedisError)?.isConnectionFailure ?? false)
        }
    }

    func testDayKeysAreUTC() {
        XCTAssertEqual(Clock.utcDay(1795330293), "2026-11-22")
        XCTAssertEqual(Clock.utcDay(0), "1970-01-01")
    }
}
