import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The metrics endpoint against slow clients and many queues (review M6, L7).
extension MetricsEndpointTests {
    /// A client that connects to `port` and sends a request one byte a second (each byte well inside the old
    /// per-read timeout of 2 s), so it never finishes by itself; `stop()` ends it.
    final class TricklingClient: @unchecked Sendable {
        private let fd: Int32
        private let lock = NSLock()
        private var stopped = false

        init(port: Int) throws {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { throw XCTSkip("cannot connect a test client to 127.0.0.1:\(port)") }
            let thread = Thread { [self] in
                for byte in Array("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: \(String(repeating: "a", count: 200))\r\n\r\n".utf8) {
                    if lock.withLock({ stopped }) { return }
                    var value = byte
                    if send(fd, &value, 1, Int32(MSG_NOSIGNAL)) != 1 { return }
                    Thread.sleep(forTimeInterval: 1)
                }
            }
            thread.start()
        }

        func stop() {
            lock.withLock { stopped = true }
            shutdown(fd, Int32(SHUT_RDWR))
            close(fd)
        }
    }

    /// M6: three clients trickle a request one byte a second while `/healthz` is asked four times and `/metrics`
    /// once: each answers (curl's `-m 15` is only a hang guard). Before, the one serving thread read the first
    /// slow client for as long as it kept sending.
    func testSlowClientsDoNotStallHealthz() throws {
        let redis = try TestRedis(database: 26)
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--no-database", "--metrics-port", "0", "--queue", "idle"],
                                      environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { worker.signal(SIGTERM); worker.wait() }
        let url = try metricsURL(of: worker)
        let port = try XCTUnwrap(url.firstMatch(of: /:(\d+)\//).flatMap { Int($0.1) })
        let slow = try (0..<3).map { _ in try TricklingClient(port: port) }
        defer { slow.forEach { $0.stop() } }
        let curl = try XCTUnwrap(TestServices.which("curl"))
        for attempt in 0..<4 {
            let health = try ChildProcess.run(curl, ["-s", "-m", "15", url.replacingOccurrences(of: "/metrics", with: "/healthz")])
            XCTAssertEqual(health.status, 0, "attempt \(attempt): curl \(health.status) \(health.stderr)")
            XCTAssertTrue(health.stdout.hasPrefix("ok"), health.stdout)
        }
        let scrape = try ChildProcess.run(curl, ["-s", "-m", "15", url])
        XCTAssertEqual(scrape.status, 0, scrape.stderr)
        XCTAssertTrue(scrape.stdout.contains("workers_set_size"), scrape.stdout)
    }
}

extension MetricsEndpointTests {
    /// L7: 60,000 names in the `queues` set: `/metrics` exports at most 1,000 queues' gauges and says how many it
    /// left out, the largest among them once every name was compared (2,000 per scrape, M5); once the names are
    /// gone, their gauges are gone from the next scrape.
    func testManyQueueNamesGiveABoundedScrapeAndVanishedQueuesLoseTheirGauges() throws {
        // Our client accepts only short names of [A-Za-z0-9_.:-]; the 60,000 below come from "another producer".
        for bad in ["q<i>", "café", "a/b", String(repeating: "q", count: JobClient.maxQueueNameLength + 1)] {
            XCTAssertThrowsError(try JobClient.validateQueue(bad), bad)
        }
        XCTAssertNoThrow(try JobClient.validateQueue("mail.eu-1:low_" + String(repeating: "q", count: 114)))
        let redis = try TestRedis(database: 114)
        let connection = try redis.connection()
        for batch in 0..<60 {
            let names: [any RedisArgument] = (0..<1000).map { "q\(batch * 1000 + $0)" }
            _ = try connection.send(["SADD", Keys.queues] + names).checked()
        }
        try redis.client.enqueueMany((0..<3).map { _ in NewJob("Noop", queue: "idle-big") })
        let worker = try ChildProcess(executable: TestServices.workerctl,
                                      arguments: ["worker", "--no-database", "--metrics-port", "0", "--queue", "other"],
                                      environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "info"])
        defer { worker.signal(SIGTERM); worker.wait() }
        let url = try metricsURL(of: worker)
        // Each scrape compares the next 2,000 names of a rolling SSCAN with the largest kept so far (review M5: a
        // scrape must not read 60,000 sizes): after ⌈60,001 / 2,000⌉ = 31 scrapes every name has been compared.
        var scrape = try get(url)
        for _ in 1..<31 { scrape = try get(url) }
        XCTAssertEqual(scrape.code, 200)
        let sizeLines = scrape.body.split(separator: "\n").filter { $0.hasPrefix("workers_queue_size{") }
        XCTAssertEqual(sizeLines.count, 1000, "at most 1,000 queues exported")
        XCTAssertTrue(scrape.body.contains(#"workers_queue_size{queue="idle-big"} 3"#), "the largest queue is among them")
        XCTAssertTrue(scrape.body.contains("workers_queue_gauges_truncated 59001"), String(scrape.body.suffix(2000)))
        XCTAssertLessThan(scrape.body.utf8.count, 1_000_000, "a bounded body")

        try redis.command("DEL", Keys.queues)
        try redis.command("SADD", Keys.queues, "idle-big")
        let after = try get(url)
        let remaining = after.body.split(separator: "\n").filter { $0.hasPrefix("workers_queue_size{") }
        XCTAssertEqual(remaining.count, 1, "the vanished queues' gauges are gone: \(remaining.prefix(3))")
        XCTAssertTrue(remaining.first?.hasPrefix(#"workers_queue_size{queue="idle-big"} 3"#) ?? false, "\(remaining.prefix(3))")
        XCTAssertTrue(after.body.contains("workers_queue_gauges_truncated 0"))
    }
}
