import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// `workers ls|quiet|stop|prune` and busy jobs against a real `workerctl worker` child process
/// (database 43).
final class WorkersCommandTests: XCTestCase {
    var redis: TestRedis!
    var ctl: WorkerctlRunner!

    override func setUpWithError() throws {
        redis = try TestRedis(database: 43)
        ctl = WorkerctlRunner(redisURL: redis.url)
    }

    func startWorker() throws -> ChildProcess {
        try ChildProcess(executable: TestServices.workerctl,
                         arguments: ["worker", "--queue", "default", "--concurrency", "2", "--heartbeat-interval", "0.2",
                                     "--poll-interval", "0.2", "--shutdown-timeout", "5"],
                         environment: ["REDIS_URL": redis.url])
    }

    func processes() throws -> [JSONObject] {
        try ctl.run("workers", "ls", "--json").object?["processes"]?.arrayValue?.compactMap(\.objectValue) ?? []
    }

    func testListQuietAndStopARunningWorker() throws {
        let worker = try startWorker()
        defer { worker.signal(SIGKILL) }
        XCTAssertTrue(try eventually { try processes().count == 1 }, worker.stderr)
        let entry = try XCTUnwrap(processes().first)
        XCTAssertEqual(entry.keys, ["identity", "hostname", "pid", "tag", "concurrency", "busy", "started_at", "beat",
                                    "quiet", "queues", "labels", "rss_kb", "rtt_us"])
        XCTAssertEqual(entry["pid"]?.intValue, Int64(worker.pid))
        XCTAssertEqual(entry["concurrency"], 2)
        XCTAssertEqual(entry["queues"], ["default"])
        XCTAssertEqual(entry["quiet"], false)
        let identity = try XCTUnwrap(entry["identity"]?.stringValue)
        XCTAssertTrue(try ctl.run("workers", "ls").stdout.contains(identity))

        // A running job shows up as busy.
        let sleeper = try redis.client.enqueue(NewJob("Sleep", args: [1500]))
        XCTAssertTrue(try eventually {
            let busy = try ctl.run("jobs", "ls", "--state", "busy", "--json").object?["jobs"]?.arrayValue ?? []
            return busy.first?.objectValue?["jid"]?.stringValue == sleeper
                && busy.first?.objectValue?["process"]?.stringValue == identity
        })
        XCTAssertEqual(try ctl.run("jobs", "show", sleeper, "--json").object?["state"], "busy")

        // Quiet by a unique prefix of the identity: the process says quiet and stops fetching.
        let prefix = String(identity.dropLast(6))
        let quiet = try ctl.run("workers", "quiet", prefix)
        XCTAssertEqual(quiet.status, 0, quiet.stderr)
        XCTAssertTrue(quiet.stdout.contains(identity), quiet.stdout)
        XCTAssertTrue(try eventually { try processes().first?["quiet"] == true })
        let waiting = try redis.client.enqueue(NewJob("Noop"))
        Thread.sleep(forTimeInterval: 1)
        XCTAssertEqual(try JobAdmin(connection: redis.connection()).findOne(jid: waiting).state, .enqueued)

        let stop = try ctl.run("workers", "stop", identity)
        XCTAssertEqual(stop.status, 0, stop.stderr)
        XCTAssertTrue(eventually(timeout: 15) { !worker.isRunning }, "worker did not stop")
        XCTAssertEqual(try processes().count, 0)
    }

    /// Signals go through the `IDENTITY-signals` list that Ruby's processes read (§10.2).
    func testSignalsUseSidekiqsSignalListAndPruneRemovesStaleEntries() throws {
        let ruby = "rubyhost:4242:0123456789ab"
        try redis.command("SADD", Keys.processes, ruby, "gone:1:aaaaaaaaaaaa")
        try redis.command("HSET", ruby, "info", #"{"hostname":"rubyhost","pid":4242,"concurrency":5,"queues":["default"],"identity":"\#(ruby)"}"#,
                          "busy", 0, "beat", Clock.now(), "quiet", "false")
        XCTAssertEqual(try ctl.run("workers", "quiet", ruby).status, 0)
        XCTAssertEqual(try ctl.run("workers", "stop", "rubyhost").status, 0)
        XCTAssertEqual(try redis.command("LRANGE", Keys.signals(ruby), 0, -1).strings, ["TERM", "TSTP"])
        XCTAssertGreaterThan(try redis.int("TTL", Keys.signals(ruby)), 0)

        let all = try ctl.run("workers", "quiet", "--all")
        XCTAssertEqual(all.status, 2)
        XCTAssertTrue(all.stderr.contains("pass --yes"), all.stderr)

        XCTAssertEqual(try ctl.run("workers", "quiet", "nothere").status, 1)
        let prune = try ctl.run("workers", "prune", "--json")
        XCTAssertEqual(prune.object?["pruned"], 1, prune.stdout + prune.stderr)
        XCTAssertEqual(try redis.command("SMEMBERS", Keys.processes).strings, [ruby])
    }

    /// `--blocking-waiters` and `blocking_waiters` reach the fetcher: one queue served and drained, the fetcher's own
    /// connection and each waiter's wait in `BLMOVE` (the flag wins over the file).
    func testBlockingWaitersFromTheFlagAndTheConfigFile() throws {
        func blocked() throws -> Int { try redis.clientsWaitingInBLMOVE() }
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("waiters-\(UUID().uuidString).yaml")
        try "blocking_waiters: 1\nqueues:\n  - default\n".write(to: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: config) }
        for (extra, expected) in [([String](), 2), (["--blocking-waiters", "3"], 4), (["--blocking-waiters", "0"], 1)] {
            let worker = try ChildProcess(executable: TestServices.workerctl,
                                          arguments: ["worker", "--no-database", "--config", config.path] + extra,
                                          environment: ["REDIS_URL": redis.url])
            XCTAssertTrue(try eventually(timeout: 15) { try blocked() == expected },
                          "\(extra): \((try? blocked()) ?? -1) connections waiting, expected \(expected); \(worker.stderr)")
            worker.signal(SIGKILL)
            XCTAssertTrue(eventually(timeout: 10) { !worker.isRunning })
            XCTAssertTrue(try eventually(timeout: 10) { try blocked() == 0 }, "the killed worker's connections")
        }
        let refused = try ctl.run("worker", "--no-database", "--blocking-waiters", "17")
        XCTAssertEqual(refused.status, 2, refused.stderr)
    }
}
