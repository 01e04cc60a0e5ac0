import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// SIGTERM while Redis is down (issue 18, "Stopping while Redis is away"): `worker`, `run` and
/// `scheduler` exit 0 within their shutdown timeout plus a few seconds, say once in the log what
/// they left for recovery, and, Redis back from its append-only file, the jobs a worker held are
/// still in its working list and another worker's orphan sweep takes them back.
///
/// Each test runs its own append-only Redis server on port 6411 (not 6393, RedisOutageTests'),
/// so stopping it disturbs nothing else.
final class StopWithoutRedisTests: XCTestCase {
    static let port = 6411
    static let url = "redis://127.0.0.1:\(port)/0"
    /// The `--shutdown-timeout` of the processes under test, in seconds.
    static let shutdownTimeout = 1.0
    /// How long a test waits for a stopped process to exit: the assertion is "it exited", so the
    /// bound is generous (shutdown timeout + settle grace + 20 s), not a measure of speed.
    static let exitBound = shutdownTimeout + 5 + 20
    static let recoveryLine = "left for recovery"

    func testWorkerStopsWhileRedisIsDownAndAnotherWorkerRecoversItsJobs() throws {
        try stopWhileRedisIsDown(command: ["worker"], schedule: nil)
    }

    func testRunStopsWhileRedisIsDownAndAnotherWorkerRecoversItsJobs() throws {
        let schedule = try scheduleFile()
        try stopWhileRedisIsDown(command: ["run", "--schedule", schedule.path], schedule: schedule)
    }

    func testSchedulerStopsWhileRedisIsDown() throws {
        let server = try AppendOnlyRedis(port: Self.port)
        defer { server.stop() }
        let schedule = try scheduleFile()
        let scheduler = try ChildProcess(executable: TestServices.workerctl,
                                         arguments: ["scheduler", "--schedule", schedule.path],
                                         environment: ["REDIS_URL": Self.url, "LOG_LEVEL": "info"])
        defer { if scheduler.isRunning { scheduler.signal(SIGKILL) } }
        XCTAssertTrue(eventually { queued() >= 3 }, scheduler.stderr)

        server.stop()
        XCTAssertTrue(eventually { scheduler.stderr.contains("scheduler round failed") }, scheduler.stderr)
        scheduler.signal(SIGTERM)
        let status = scheduler.wait(timeout: Self.exitBound)
        let log = scheduler.stderr
        XCTAssertEqual(status, 0, "the scheduler did not exit 0 after SIGTERM with Redis down\n" + log)
        XCTAssertEqual(occurrences(of: "nothing left in flight", in: log), 1, log)
        XCTAssertEqual(occurrences(of: "scheduler stopped", in: log), 1, log)

        try server.restart()
        XCTAssertTrue(eventually { queued() >= 3 }, "fired jobs lost with the append-only file")
    }

    // MARK: Helpers

    /// `command` (`worker` or `run`) runs Noop jobs, then holds two Sleep jobs when Redis goes
    /// away and SIGTERM arrives.
    private func stopWhileRedisIsDown(command: [String], schedule: URL?) throws {
        let server = try AppendOnlyRedis(port: Self.port)
        defer { server.stop() }
        let client = try RedisConnection(url: Self.url)
        for _ in 0..<3 { try enqueue(client, className: "Noop", args: "[]") }
        let stopping = try startWorker(command)
        defer { if stopping.isRunning { stopping.signal(SIGKILL) } }
        XCTAssertTrue(eventually { processed() >= 3 }, stopping.stderr)
        if schedule != nil { XCTAssertTrue(eventually { queued() >= 2 }, "no scheduler ticks\n" + stopping.stderr) }
        for _ in 0..<2 { try enqueue(client, className: "Sleep", args: "[600000]") }
        XCTAssertTrue(eventually { inFlight() == 2 }, "the Sleep jobs were not fetched\n" + stopping.stderr)

        server.stop()
        XCTAssertTrue(eventually { stopping.stderr.contains("Redis unreachable") }, stopping.stderr)
        stopping.signal(SIGTERM)
        let status = stopping.wait(timeout: Self.exitBound)
        let log = stopping.stderr
        XCTAssertEqual(status, 0, "\(command[0]) did not exit 0 after SIGTERM with Redis down\n" + log)
        XCTAssertEqual(occurrences(of: Self.recoveryLine, in: log), 1, log)
        XCTAssertTrue(log.contains("\"unwritten\":\"2\""), log)
        if schedule != nil {
            XCTAssertEqual(occurrences(of: "scheduler stopped", in: log), 1, log)
        }

        try server.restart()
        XCTAssertTrue(eventually { inFlight() == 2 }, "the in-flight jobs are not in the working list after the restart")
        let rescuer = try startWorker(["worker"])
        defer { rescuer.signal(SIGTERM); rescuer.wait() }
        XCTAssertTrue(eventually(timeout: 30) { rescuer.stderr.contains("recovered in-flight jobs of dead processes") },
                      rescuer.stderr)
        XCTAssertTrue(rescuer.stderr.contains("\"requeued\":\"2\""), rescuer.stderr)
    }

    private func startWorker(_ command: [String]) throws -> ChildProcess {
        try ChildProcess(executable: TestServices.workerctl, arguments: command + [
            "--no-database", "--concurrency", "2", "--shutdown-timeout", "\(Self.shutdownTimeout)",
            "--heartbeat-interval", "0.5", "--heartbeat-ttl", "3", "--poll-interval", "0.5",
            "--orphan-sweep-interval", "0.5", "--queue", "default"], environment: ["REDIS_URL": Self.url, "LOG_LEVEL": "info"])
    }

    /// Every second a Noop into `ticks`, a queue the workers here do not serve (so the jobs a
    /// stopping `run` holds are exactly the test's Sleep jobs).
    private func scheduleFile() throws -> URL {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("stop-\(UUID().uuidString).yaml")
        try """
            - name: every_second
              cron: "* * * * * *"
              class: Noop
              queue: ticks
              catch_up: skip
            """.write(to: file, atomically: true, encoding: .utf8)
        return file
    }

    private func enqueue(_ client: RedisConnection, className: String, args: String) throws {
        let jid = UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(24).lowercased()
        let now = Date().timeIntervalSince1970
        let payload = #"{"retry":true,"queue":"default","class":"\#(className)","args":\#(args),"jid":"\#(jid)","# +
            #""created_at":\#(now),"enqueued_at":\#(now)}"#
        _ = try client.transaction([["SADD", Keys.queues, "default"], ["LPUSH", Keys.queue("default"), payload]])
    }

    /// `stat:processed`, or -1 while Redis is down.
    private func processed() -> Int {
        guard let connection = try? RedisConnection(url: Self.url),
              let reply = try? connection.command("GET", Keys.statProcessed) else { return -1 }
        return Int(reply.string ?? "0") ?? Int(reply.integer ?? 0)
    }

    /// Jobs the scheduler fired into `queue:ticks`, or -1 while Redis is down or loading.
    private func queued() -> Int {
        guard let connection = try? RedisConnection(url: Self.url),
              let reply = try? connection.command("LLEN", Keys.queue("ticks")) else { return -1 }
        return Int(reply.integer ?? -1)
    }

    /// Jobs in every process's working lists, or -1 while Redis is down or loading.
    private func inFlight() -> Int {
        guard let connection = try? RedisConnection(url: Self.url),
              let keys = try? connection.command("KEYS", "working:*").array else { return -1 }
        var total = 0
        for key in keys.compactMap(\.string) {
            guard let length = try? connection.command("LLEN", key).integer else { return -1 }
            total += Int(length)
        }
        return total
    }

    private func occurrences(of text: String, in log: String) -> Int {
        log.components(separatedBy: text).count - 1
    }
}

/// A private redis-server with an append-only file (fsync always) in a temporary directory, which a
/// test stops and starts again on the same data.
private final class AppendOnlyRedis {
    let port: Int
    let directory: URL
    private var server: ChildProcess

    init(port: Int) throws {
        self.port = port
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("stop-redis-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        server = try Self.launch(port: port, directory: directory)
        try waitUntilServing()
        try RedisConnection(url: "redis://127.0.0.1:\(port)/0").command("FLUSHALL")
    }

    /// Stops the server (SIGTERM, as an operator or a crash-free restart would) and waits for it.
    func stop() {
        guard server.isRunning else { return }
        server.signal(SIGTERM)
        server.wait()
    }

    /// Starts the server again on the same append-only file and waits until it has loaded it.
    func restart() throws {
        server = try Self.launch(port: port, directory: directory)
        try waitUntilServing()
    }

    private func waitUntilServing() throws {
        let url = "redis://127.0.0.1:\(port)/0"
        guard eventually(timeout: 20, { (try? RedisConnection(url: url).command("DBSIZE"))?.integer != nil }) else {
            throw RedisError.connectionFailed(address: "127.0.0.1:\(port)", reason: "redis-server did not start: \(server.stderr)\(server.stdout)")
        }
    }

    private static func launch(port: Int, directory: URL) throws -> ChildProcess {
        let redisServer = try XCTUnwrap(TestServices.which("redis-server"))
        return try ChildProcess(executable: redisServer, arguments: [
            "--port", "\(port)", "--bind", "127.0.0.1", "--dir", directory.path, "--save", "",
            "--appendonly", "yes", "--appendfsync", "always"])
    }
}
