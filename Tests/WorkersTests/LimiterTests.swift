import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Fleet-wide limiters (docs/limiters.md) through real `workerctl worker` processes and real Redis. The probe
/// jobs (`Sources/BenchJobs/LimitProbeJobs.swift`, `--bench-jobs`) measure what the limiters let through
/// themselves, in Redis; no assertion depends on how fast this machine is.
final class LimiterTests: XCTestCase {
    func workerArguments(concurrency: Int, queue: String = "default") -> [String] {
        ["worker", "--no-database", "--bench-jobs", "--concurrency", "\(concurrency)", "--queue", queue,
         "--heartbeat-interval", "0.3", "--heartbeat-ttl", "2", "--orphan-sweep-interval", "0.5", "--poll-interval", "0.1"]
    }

    func startWorkers(_ count: Int, redis: TestRedis, concurrency: Int, queue: String = "default") throws -> [ChildProcess] {
        try (0..<count).map { _ in
            try ChildProcess(executable: TestServices.workerctl, arguments: workerArguments(concurrency: concurrency, queue: queue),
                             environment: ["REDIS_URL": redis.url, "LOG_LEVEL": "warning"])
        }
    }

    func stop(_ workers: [ChildProcess]) {
        for worker in workers { worker.signal(SIGTERM) }
        for worker in workers { worker.wait() }
    }

    /// concurrent(3) across 4 processes × 10 threads: the jobs' own INCR-on-start / DECR-at-end never
    /// sees more than 3 inside `perform`, and does see 3 (the limit is reached, not just respected).
    func testConcurrentLimitOfThreeHoldsAcrossFourProcessesOfTenThreads() throws {
        let redis = try TestRedis(database: 68)
        let total = 60
        try redis.client.enqueueMany((0..<total).map { _ in NewJob("LimitProbeConcurrent", args: [150]) })
        let workers = try startWorkers(4, redis: redis, concurrency: 10)
        defer { stop(workers) }
        XCTAssertTrue(try eventually(timeout: 120) { try redis.int("GET", "probe:limits:done:probe-concurrent") == total },
                      workers.map(\.stderr).joined())
        XCTAssertEqual(try redis.int("GET", "probe:limits:max:probe-concurrent"), 3, "most jobs inside perform at once")
        // `done` moves inside the last run's perform; `processed` when its settlement is written, a moment later.
        XCTAssertTrue(try eventually { try redis.processed() >= total }, "every run settled")
        XCTAssertEqual(try redis.failed(), 0)
        XCTAssertEqual(try redis.processed(), total, "over-limit reschedules are not runs")
        XCTAssertEqual(try redis.int("ZCARD", Keys.retry) + redis.int("ZCARD", Keys.dead), 0)
        XCTAssertTrue(try eventually { try redis.int("ZCARD", "limit:probe-concurrent") == 0 }, "every lease released")
        print("concurrent figures: jobs \(total), max inside perform \(try redis.int("GET", "probe:limits:max:probe-concurrent"))")
    }

    /// window(20 per 1 s) under a demand far above it: over 10 consecutive whole windows of Redis time it admits
    /// 200 ± 1, and no window admits more than 20.
    func testWindowLimitOfTwentyPerSecondAdmitsTwoHundredInTenWindows() throws {
        let redis = try TestRedis(database: 69)
        try redis.client.enqueueMany((0..<400).map { _ in NewJob("LimitProbeWindow") })
        let workers = try startWorkers(2, redis: redis, concurrency: 10)
        defer { stop(workers) }
        func windows() throws -> [Int: Int] {
            let flat = try redis.command("HGETALL", "probe:limits:windows").strings
            var out: [Int: Int] = [:]
            for index in stride(from: 0, to: flat.count - 1, by: 2) { out[Int(flat[index])!] = Int(flat[index + 1])! }
            return out
        }
        // The first window is partial (the workers start inside it); windows first+1 … first+10 are whole.
        // Wait until window first+11 has admissions: first+10 is then over.
        XCTAssertTrue(try eventually(timeout: 120) {
            let seen = try windows()
            guard let first = seen.keys.min() else { return false }
            return seen[first + 11] != nil
        }, workers.map(\.stderr).joined())
        let seen = try windows()
        let first = try XCTUnwrap(seen.keys.min())
        let counts = (first + 1...first + 10).map { seen[$0] ?? 0 }
        print("window figures: admissions per window \(counts), sum \(counts.reduce(0, +))")
        XCTAssertEqual(Double(counts.reduce(0, +)), 200, accuracy: 1, "admissions over 10 whole windows: \(counts)")
        XCTAssertLessThanOrEqual(seen.values.max() ?? 0, 20, "no window admits more than 20: \(seen)")
        XCTAssertEqual(try redis.failed(), 0)
    }

    /// A lease is renewed while its job runs longer than the lease (4 s, leases of 2 s): a second job with the same
    /// key does not get in meanwhile. A SIGKILLed process's lease is not renewed: its slot is taken by a job in
    /// another process once the lease has expired, while the killed job is still in nobody's hands.
    func testSlotOfAKilledProcessIsFreedAndALiveOneIsKept() throws {
        let redis = try TestRedis(database: 70)
        // Part 1: renewal keeps the slot while the holder lives.
        try redis.client.enqueue(NewJob("LimitProbeMutex", args: [4000, "a"]))
        let live = try startWorkers(1, redis: redis, concurrency: 4)
        XCTAssertTrue(try eventually { try redis.int("GET", "probe:limits:running:probe-mutex-a") == 1 }, live[0].stderr)
        try redis.client.enqueue(NewJob("LimitProbeMutex", args: [0, "a"]))
        XCTAssertTrue(try eventually(timeout: 60) { try redis.int("GET", "probe:limits:done:probe-mutex-a") == 2 }, live[0].stderr)
        XCTAssertEqual(try redis.int("GET", "probe:limits:max:probe-mutex-a"), 1, "the renewed lease kept the second job out")
        stop(live)

        // Part 2: a killed holder's slot comes free. The holder serves queue `held`; the other process serves
        // only `default`, so the killed job stays recovered-but-unrun and cannot take the slot back.
        let holder = try startWorkers(1, redis: redis, concurrency: 2, queue: "held")
        try redis.client.enqueue(NewJob("LimitProbeMutex", args: [600_000, "b"], queue: "held"))
        XCTAssertTrue(try eventually { try redis.int("GET", "probe:limits:running:probe-mutex-b") == 1 }, holder[0].stderr)
        XCTAssertEqual(try redis.int("ZCARD", "limit:probe-mutex:b"), 1)
        holder[0].signal(SIGKILL)
        holder[0].wait()
        let other = try startWorkers(1, redis: redis, concurrency: 2)
        defer { stop(other) }
        try redis.client.enqueue(NewJob("LimitProbeMutex", args: [0, "b"]))
        XCTAssertTrue(try eventually(timeout: 30) { try redis.int("GET", "probe:limits:done:probe-mutex-b") == 1 }, other[0].stderr)
        XCTAssertEqual(try redis.int("GET", "probe:limits:running:probe-mutex-b"), 1, "the killed job never finished")
        let heldInFlight = try redis.workingKeys().filter { $0.hasPrefix("working:queue:held:") }
            .reduce(0) { $0 + (try redis.int("LLEN", $1)) }
        XCTAssertEqual(try redis.int("LLEN", "queue:held") + heldInFlight, 1, "the killed job waits to be run again, not lost")
    }

    /// Over the limit: the job goes to `schedule` with `overrated` and none of the failure fields, is not counted as
    /// processed or failed, and runs later. Past the reschedule cap (5 for this class) the next refusal is a normal
    /// failure: `retry` with `error_class` OverLimit and `retry_count`.
    func testOverLimitJobIsRescheduledWithoutRetryFieldsAndRunsLater() throws {
        let redis = try TestRedis(database: 71)
        try redis.client.enqueue(NewJob("LimitProbeMutex", args: [2500, "c"]))
        let workers = try startWorkers(1, redis: redis, concurrency: 4)
        defer { stop(workers) }
        XCTAssertTrue(try eventually { try redis.int("GET", "probe:limits:running:probe-mutex-c") == 1 }, workers[0].stderr)
        let waiting = try redis.client.enqueue(NewJob("LimitProbeMutex", args: [0, "c"]))
        var cappedJob = NewJob("LimitProbeMutex", args: [0, "c"])
        cappedJob.runtimeFields["overrated"] = 5
        let capped = try redis.client.enqueue(cappedJob)

        // The operator's view while the holder runs: `workerctl limits ls --json` (Queue/Admin/LimitAdmin.swift).
        let listed = try WorkerctlRunner(redisURL: redis.url).run(["limits", "ls", "--json"])
        XCTAssertEqual(listed.status, 0, listed.stderr)
        let rows = listed.object?["limits"]?.arrayValue?.compactMap(\.objectValue) ?? []
        let row = try XCTUnwrap(rows.first { $0["name"]?.stringValue == "probe-mutex" && $0["key"]?.stringValue == "c" },
                                listed.stdout)
        XCTAssertEqual(row["kind"]?.stringValue, "concurrent")
        XCTAssertEqual(row["max"]?.intValue, 1)
        XCTAssertEqual(row["used"]?.doubleValue, 1, listed.stdout)
        XCTAssertEqual(row["period_s"]?.doubleValue, 2)
        // The same as a table: one line per live limiter under the header.
        let table = try WorkerctlRunner(redisURL: redis.url).run(["limits", "ls"])
        XCTAssertEqual(table.status, 0, table.stderr)
        let lines = table.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
        XCTAssertEqual(lines.first, ["LIMIT", "KEY", "KIND", "MAX", "PERIOD", "USED", "RESETS", "IN"], table.stdout)
        let tableRow = try XCTUnwrap(lines.first { $0.first == "probe-mutex" && $0.dropFirst().first == "c" }, table.stdout)
        XCTAssertEqual(Array(tableRow.prefix(4)), ["probe-mutex", "c", "concurrent", "1"], table.stdout)
        XCTAssertEqual(tableRow.dropFirst(5).first, "1", "USED: the running holder; \(table.stdout)")
        XCTAssertTrue(try eventually { try redis.payloads(zset: Keys.schedule).contains { $0.jid == waiting } }, workers[0].stderr)
        let scheduled = try XCTUnwrap(try redis.payloads(zset: Keys.schedule).first { $0.jid == waiting })
        XCTAssertEqual(scheduled.fields["overrated"]?.intValue, 1)
        XCTAssertNotNil(scheduled.fields["overrated_at"])
        for field in ["retry_count", "error_message", "error_class", "failed_at", "retried_at"] {
            XCTAssertNil(scheduled.fields[field], "an over-limit reschedule carries no \(field)")
        }
        XCTAssertTrue(try eventually { try redis.payloads(zset: Keys.retry).contains { $0.jid == capped } }, workers[0].stderr)
        let failed = try XCTUnwrap(try redis.payloads(zset: Keys.retry).first { $0.jid == capped })
        XCTAssertEqual(failed.fields["error_class"]?.stringValue.map { $0.hasSuffix("OverLimit") }, true, "\(failed.fields)")
        XCTAssertEqual(failed.fields["retry_count"]?.intValue, 0)

        XCTAssertTrue(try eventually(timeout: 30) { try redis.int("GET", "probe:limits:done:probe-mutex-c") == 2 }, workers[0].stderr)
        XCTAssertEqual(try redis.int("GET", "probe:limits:max:probe-mutex-c"), 1)
        XCTAssertTrue(try eventually { try redis.processed() >= 3 }, "every run settled")  // `done` moves before the settlement
        XCTAssertEqual(try redis.processed(), 3, "two runs and the capped failure; reschedules are not runs")
        XCTAssertEqual(try redis.failed(), 1, "only the capped job failed")
    }

    /// bucket(1 token per 200 ms) on 10 threads: every admission is at least 200 ms of Redis time after the previous.
    func testTokenBucketOfOnePerTwoHundredMillisecondsSpacesAdmissions() throws {
        let redis = try TestRedis(database: 68)
        try redis.client.enqueueMany((0..<15).map { _ in NewJob("LimitProbeBucket") })
        let workers = try startWorkers(1, redis: redis, concurrency: 10)
        defer { stop(workers) }
        XCTAssertTrue(try eventually(timeout: 60) { try redis.int("LLEN", "probe:limits:bucket") == 15 }, workers[0].stderr)
        let times = try redis.command("LRANGE", "probe:limits:bucket", 0, -1).strings.compactMap(Int.init).sorted()
        let gaps = zip(times.dropFirst(), times).map { $0 - $1 }
        print("bucket figures: gaps between admissions (ms) \(gaps)")
        XCTAssertGreaterThanOrEqual(gaps.min() ?? 0, 200, "\(gaps)")
        XCTAssertEqual(try redis.failed(), 0)
    }
}
