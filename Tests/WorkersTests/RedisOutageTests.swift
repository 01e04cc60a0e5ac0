import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Redis unreachable for 30 s: a worker and a scheduler keep running, log the outage once (not
/// once per thread per retry), reconnect with backoff and resume. Uses its own Redis server (port
/// 6393, append-only in a temporary directory) so that stopping it disturbs nothing else.
final class RedisOutageTests: XCTestCase {
    func testWorkerAndSchedulerRideOutAThirtySecondOutage() throws {
        let port = 6393
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outage-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        func startRedis() throws -> ChildProcess {
            try TestServices.startRedisServer(port: port, ["--dir", directory.path, "--appendonly", "yes", "--appendfsync", "always"])
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

/// Redis gone for longer than every interval of the runtime: each thread that talks to Redis (fetcher, settler,
/// heartbeat, housekeeper, scheduler, outbox relay and its lost-job finder, the metrics endpoint's readers under a
/// steady scrape) backs off by the one reconnect rule (`ReconnectBackoff`, `ConnectThrottle`), so the whole process
/// makes a few connection attempts a second and idles. Counted from the server side: "Redis" is a listener that
/// accepts and closes every connection (`AcceptCounter`); the CPU is the process's own clock ticks. Nothing here
/// is timed: attempts and ticks are counted over the outage and compared with its length.
final class RedisOutageBackoffTests: XCTestCase {
    func testAnOutageLongerThanEveryIntervalCostsAFewConnectsASecondAndNoCore() throws {
        let port = try TestServices.closedPort()
        var server: ChildProcess? = try TestServices.startRedisServer(port: port)
        defer { server?.signal(SIGKILL) }
        let url = "redis://127.0.0.1:\(port)/0"
        XCTAssertTrue(eventually { (try? RedisConnection(url: url)) != nil })
        try RedisConnection(url: url).command("FLUSHALL")

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("outage-backoff-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let schedule = directory.appendingPathComponent("schedule.yaml")
        try """
            - name: every_second
              cron: "* * * * * *"
              class: Noop
              catch_up: skip
            """.write(to: schedule, atomically: true, encoding: .utf8)
        // Every interval of the runtime well under the outage: sweep 1 s, poll and heartbeat 0.5 s, cron 1 s, relay
        // 0.2 s, lost-job finder 1 s, and /readyz and /metrics scraped five times a second.
        let worker = try ChildProcess(executable: TestServices.workerctl, arguments: [
            "run", "--schedule", schedule.path, "--concurrency", "2", "--heartbeat-interval", "0.5", "--heartbeat-ttl", "3",
            "--poll-interval", "0.5", "--orphan-sweep-interval", "1", "--outbox-relay", "--outbox-poll-interval", "0.2",
            "--lost-job-interval", "1", "--metrics-port", "0"],
            environment: ["REDIS_URL": url, "DATABASE_URL": TestServices.databaseURL, "LOG_LEVEL": "info"])
        defer { if worker.isRunning { worker.signal(SIGKILL) } }
        func processed() -> Int {
            guard let connection = try? RedisConnection(url: url),
                  let reply = try? connection.command("GET", Keys.statProcessed) else { return -1 }
            return Int(reply.integer ?? 0)
        }
        XCTAssertTrue(eventually(timeout: 30) { processed() >= 2 }, worker.stderr)
        var metricsBase: String?
        // (An assignment is `()`, never nil: the closure sets and then tests.)
        XCTAssertTrue(eventually {
            metricsBase = worker.stderr.firstMatch(of: /"metrics_url":"([^"]+)\/metrics"/).map { String($0.1) }
            return metricsBase != nil
        },
                      worker.stderr)
        let curl = try XCTUnwrap(TestServices.which("curl"))

        // The outage: Redis dies; its port answers every connection with a hang-up.
        server?.signal(SIGKILL)
        server?.wait()
        server = nil
        let listener = try AcceptCounter(port: port)
        defer { listener.stop() }
        // The first seconds let every thread meet the outage; the rest is counted.
        for _ in 0..<10 { if let metricsBase { _ = try? ChildProcess.run(curl, ["-s", "-m", "2", "\(metricsBase)/readyz"]) } }
        let windowStart = Date().timeIntervalSince1970
        let ticksBefore = try Self.cpuTicks(of: worker.pid)
        var scrapes = 0
        while Date().timeIntervalSince1970 - windowStart < 12 {
            if let metricsBase {
                _ = try? ChildProcess.run(curl, ["-s", "-m", "2", "\(metricsBase)/readyz"])
                _ = try? ChildProcess.run(curl, ["-s", "-m", "2", "-o", "/dev/null", "\(metricsBase)/metrics"])
                scrapes += 2
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
        let ticks = try Self.cpuTicks(of: worker.pid) - ticksBefore
        let seconds = Date().timeIntervalSince1970 - windowStart
        let attempts = listener.count(since: windowStart)
        XCTAssertTrue(worker.isRunning, worker.stderr)
        XCTAssertGreaterThan(scrapes, 20, "the metrics endpoint was scraped during the outage")
        XCTAssertGreaterThan(attempts, 0, "the process kept trying to reach Redis")
        // A few attempts a second for the whole process (the rule allows about one every 1-2 s per server).
        XCTAssertLessThanOrEqual(Double(attempts), 3 * seconds,
                                 "\(attempts) connection attempts in \(seconds) s; busiest second \(listener.busiestSecond)")
        // An idle process: well under a fifth of one core (a tight reconnect loop takes all of it).
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        XCTAssertLessThan(Double(ticks), 0.2 * seconds * ticksPerSecond, "\(ticks) CPU ticks in \(seconds) s of outage")
        print("outage of \(String(format: "%.1f", seconds)) s: \(attempts) connection attempts (busiest second \(listener.busiestSecond)), \(ticks) CPU ticks at \(Int(ticksPerSecond))/s")

        // Redis back: the process resumes.
        listener.stop()
        server = try TestServices.startRedisServer(port: port)
        XCTAssertTrue(eventually { processed() >= 0 }, "Redis did not come back")
        // That Redis came back empty (no persistence): three new jobs run.
        let client = JobClient(pool: try RedisPool(url: url, maxConnections: 1))
        for _ in 0..<3 { try client.enqueue(NewJob("Noop")) }
        XCTAssertTrue(eventually(timeout: 30) { processed() >= 3 }, "no progress after the outage\n" + worker.stderr)
        worker.signal(SIGTERM)
        XCTAssertEqual(worker.wait(), 0, worker.stderr)
    }

    /// User plus system CPU time of process `pid`, in clock ticks (`/proc/PID/stat`, fields 14 and 15).
    static func cpuTicks(of pid: Int32) throws -> Int {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        let afterName = try XCTUnwrap(stat.lastIndex(of: ")"))
        let fields = stat[stat.index(after: afterName)...].split(separator: " ")
        // fields[0] is field 3 (state): utime is field 14, stime field 15.
        return try XCTUnwrap(Int(fields[11])) + XCTUnwrap(Int(fields[12]))
    }
}
