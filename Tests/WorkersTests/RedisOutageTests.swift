import Foundation
import Queue
import TestSupport
import XCTest

/// Redis unreachable for 30 s: a worker and a scheduler keep running, log the outage once (not
/// once per thread per retry), reconnect with backoff and resume. Uses its own Redis server (port
/// 6393, append-only in a temporary directory) so that stopping it disturbs nothing else.
final class RedisOutageTests: XCTestCase {
    func testWorkerAndSchedulerRideOutAThirtySecondOutage() throws {
        let port = 6393
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outage-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let redisServer = try XCTUnwrap(TestServices.which("redis-server"))
        func startRedis() throws -> ChildProcess {
            try ChildProcess(executable: redisServer, arguments: [
                "--port", "\(port)", "--bind", "127.0.0.1", "--dir", directory.path, "--save", "",
                "--appendonly", "yes", "--appendfsync", "always"])
        }
        var server = try startRedis()
        defer { server.signal(SIGKILL) }
        let url = "redis://127.0.0.1:\(port)/0"
        XCTAssertTrue(eventually { (try? RedisConnection(url: url)) != nil })
        let redis = try RedisConnection(url: url)
        try redis.command("FLUSHALL")

        let schedule = directory.appendingPathComponent("schedule.yaml")
        try """
            - name: every_second
              cron: "* * * * * *"
              class: Noop
              catch_up: skip
            """.write(to: schedule, atomically: true, encoding: .utf8)
        let environment = ["REDIS_URL": url, "LOG_LEVEL": "info"]
        let worker = try ChildProcess(executable: TestServices.workerctl, arguments: [
            "worker", "--no-database", "--heartbeat-interval", "0.5", "--heartbeat-ttl", "5", "--poll-interval", "0.5"],
            environment: environment)
        let scheduler = try ChildProcess(executable: TestServices.workerctl,
                                         arguments: ["scheduler", "--schedule", schedule.path], environment: environment)
        defer {
            worker.signal(SIGTERM); scheduler.signal(SIGTERM)
            worker.wait(); scheduler.wait()
        }
        /// The processed counter, or -1 while Redis is down or still loading its append-only file.
        func processed() -> Int {
            guard let connection = try? RedisConnection(url: url),
                  let reply = try? connection.command("GET", Keys.statProcessed) else { return -1 }
            return Int(reply.integer ?? 0)
        }
        XCTAssertTrue(eventually { processed() >= 3 }, worker.stderr + scheduler.stderr)

        // The outage: the server goes away for 30 seconds.
        server.signal(SIGTERM)
        server.wait()
        Thread.sleep(forTimeInterval: 30)
        XCTAssertTrue(worker.isRunning, worker.stderr)
        XCTAssertTrue(scheduler.isRunning, scheduler.stderr)
        server = try startRedis()
        XCTAssertTrue(eventually { processed() >= 0 }, "Redis did not come back")
        let before = processed()
        XCTAssertTrue(eventually(timeout: 30) { processed() >= before + 3 },
                      "no progress after the outage\n" + worker.stderr + scheduler.stderr)

        XCTAssertTrue(eventually { worker.stderr.contains("Redis reachable again") }, worker.stderr)
        XCTAssertTrue(eventually { scheduler.stderr.contains("succeeded again") }, scheduler.stderr)
        let workerLog = worker.stderr
        XCTAssertEqual(workerLog.components(separatedBy: "Redis unreachable").count - 1, 1, workerLog)
        let schedulerLog = scheduler.stderr
        let schedulerErrors = schedulerLog.split(separator: "\n").filter { $0.contains("\"level\":\"error\"") }
        XCTAssertLessThanOrEqual(schedulerErrors.count, 2, schedulerLog)
    }
}
