import Foundation
import Logging
import WorkersQueue
import WorkersTestServices
import Workers
import XCTest

/// The metrics/health endpoint as a part of the runtime library (`MetricsEndpoint`), for services that run workers
/// in executables of their own: a `WorkerProcess` built and started through the library API (no workerctl) serves
/// `/metrics`, `/healthz` (its own health) and `/readyz` on the port it was given, and frees the port at shutdown.
/// Its Redis is a private `redis-server` on a free port (no shared test database).
final class MetricsEndpointPartTests: XCTestCase {
    /// GET without `-f`: the status code (0: no HTTP answer) and body.
    func get(_ url: String) throws -> (code: Int, body: String) {
        let result = try ChildProcess.run(try XCTUnwrap(TestServices.which("curl")),
                                          ["-s", "-m", "20", "-o", "-", "-w", "\n%{http_code}", url])
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    func testWorkerProcessServesHealthAndMetricsOnTheGivenPortUntilShutdown() throws {
        let redisPort = try TestServices.closedPort()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("endpoint-redis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let redisServer = try ChildProcess(executable: try XCTUnwrap(TestServices.which("redis-server")), arguments: [
            "--port", "\(redisPort)", "--bind", "127.0.0.1", "--dir", directory.path, "--save", "", "--appendonly", "no"])
        defer { redisServer.signal(SIGKILL); redisServer.wait() }
        let redisURL = "redis://127.0.0.1:\(redisPort)/0"
        XCTAssertTrue(eventually { (try? RedisConnection(url: redisURL)) != nil }, redisServer.stderr)

        var configuration = WorkerConfiguration()
        configuration.redisURL = redisURL
        configuration.concurrency = 2
        configuration.heartbeatInterval = .seconds(0.2)
        configuration.pollInterval = .seconds(0.2)
        configuration.shutdownTimeout = .seconds(2)
        let port = try TestServices.closedPort()
        let endpoint = MetricsEndpoint(port: port, metrics: { "library_probe_total 1\n" },
                                       readiness: { health in (health.ok, #"{"process":"\#(health.detail)"}"#) })
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let process = try WorkerProcess(configuration: configuration, registry: .builtins(), logger: logger,
                                        metricsEndpoint: endpoint)
        XCTAssertNil(process.metricsPort, "not listening before start")
        try process.start()
        var stopped = false
        defer { if !stopped { process.shutdown() } }
        XCTAssertEqual(process.metricsPort, port)
        let base = "http://127.0.0.1:\(port)"

        let metrics = try get(base + "/metrics")
        XCTAssertEqual(metrics.code, 200)
        XCTAssertEqual(metrics.body, "library_probe_total 1\n")
        var health = (code: 0, body: "")
        XCTAssertTrue(try eventually { health = try get(base + "/healthz"); return health.code == 200 }, health.body)
        XCTAssertTrue(health.body.hasPrefix("ok: 0 busy of 2"), health.body)
        let ready = try get(base + "/readyz")
        XCTAssertEqual(ready.code, 200)
        XCTAssertTrue(ready.body.hasPrefix(#"{"process":"ok: 0 busy of 2"#), ready.body)

        process.shutdown()
        stopped = true
        XCTAssertNil(process.metricsPort)
        XCTAssertEqual(try get(base + "/healthz").code, 0, "the port is closed after shutdown")
    }

    /// `/readyz` is answered while a `/metrics` scrape is stuck (issue 51 point 5: it queued behind it): the metrics
    /// closure blocks until the test releases it, and a readiness probe sent meanwhile gets its answer first. No
    /// timing: with one serving thread the probe cannot be answered before the release.
    func testAReadinessProbeIsAnsweredWhileAScrapeIsStuck() throws {
        let release = DispatchSemaphore(value: 0)
        let port = try TestServices.closedPort()
        let endpoint = MetricsEndpoint(port: port, metrics: { release.wait(); return "stuck_total 1\n" },
                                       readiness: { _ in (true, #"{"ready":true}"#) })
        let server = try endpoint.start(health: { (true, "ok") }, logger: Logger(label: "test"))
        defer { server.stop() }
        let base = "http://127.0.0.1:\(port)"
        let scrape = try ChildProcess(executable: try XCTUnwrap(TestServices.which("curl")), arguments: ["-s", "-m", "60", base + "/metrics"])
        Thread.sleep(forTimeInterval: 0.3)  // the scrape reaches its serving thread (either order proves the point)
        let ready = try get(base + "/readyz")
        XCTAssertTrue(scrape.isRunning, "the scrape is still stuck")
        release.signal()
        _ = scrape.wait()
        XCTAssertEqual(ready.code, 200, "the probe was answered while the scrape was stuck")
        XCTAssertEqual(ready.body.trimmingCharacters(in: .whitespacesAndNewlines), #"{"ready":true}"#)
        XCTAssertEqual(scrape.stdout, "stuck_total 1\n")
    }
}
