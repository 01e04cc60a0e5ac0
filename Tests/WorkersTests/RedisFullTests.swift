import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// A Redis at `maxmemory` with `noeviction` drains instead of wedging (docs/redis-full.md): two workers started on a
/// Redis filled with a backlog start, run every job once (each run appends its jid to a file, outside Redis and
/// PostgreSQL), keep their fetcher heartbeats alive while Redis stays full for longer than their TTL (no sweep takes
/// a live process's jobs), write nothing that grows Redis while it is full — retries, dead jobs and counters wait in
/// the process — and write those once it has room. On a Redis server of the test's own.
final class RedisFullTests: XCTestCase {
    static let maxmemory = 12 * 1024 * 1024

    func testTwoWorkersStartedOnAFullRedisDrainItOnceEachAndGrowItOnlyOnceItHasRoom() throws {
        let port = try TestServices.closedPort()
        let server = try TestServices.startRedisServer(port: port, ["--maxmemory", "\(Self.maxmemory)", "--maxmemory-policy", "noeviction"])
        defer { server.signal(SIGKILL) }
        let url = "redis://127.0.0.1:\(port)/0"
        XCTAssertTrue(eventually { (try? RedisConnection(url: url).command("PING")) != nil })
        let redis = try RedisConnection(url: url)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("redis-full-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)

        // The backlog: enqueued until Redis refuses. One job in 100 fails with `retry: 0` (dead), one in 100 fails
        // with retries left (retry); the rest succeed.
        let client = JobClient(pool: try RedisPool(url: url, maxConnections: 1))
        let pad = JSONValue.string(String(repeating: "p", count: 300))
        var refusal: (any Error)?
        var index = 0
        while refusal == nil && index < 200_000 {
            let chunk = (0..<500).map { offset -> NewJob in
                let n = index + offset
                let outcome = n % 100 == 7 || n % 100 == 57 ? "fail" : "ok"
                return NewJob("RunLogProbe", args: [.string(folder.path), .string(outcome), .int(2)],
                              retry: n % 100 == 7 ? .int(0) : .int(3), extra: ["pad": pad])
            }
            do { _ = try client.enqueueMany(chunk) } catch { refusal = error }
            index += 500
        }
        let refused = try XCTUnwrap(refusal as? RedisError, "Redis never filled")
        XCTAssertTrue(refused.isOutOfMemory, "\(refused)")
        XCTAssertTrue("\(refused)".contains("Redis is full"), "a producer's error names the cause: \(refused)")
        // What is queued is the truth (the refused chunk may have been pushed in part).
        var expectedDead = Set<String>(), expectedRetry = Set<String>(), everyJid = Set<String>()
        for raw in try redis.command("LRANGE", Keys.queue("default"), 0, -1).array ?? [] {
            let payload = try JobPayload(parsing: try XCTUnwrap(raw.bytes))
            let jid = try XCTUnwrap(payload.jid)
            everyJid.insert(jid)
            if payload.args.count > 1, payload.args[1] == .string("fail") {
                if payload.retry == .limit(0) { expectedDead.insert(jid) } else { expectedRetry.insert(jid) }
            }
        }
        XCTAssertGreaterThan(everyJid.count, 5_000, "a backlog fills the 12 MB Redis")
        XCTAssertFalse(expectedDead.isEmpty)
        XCTAssertFalse(expectedRetry.isEmpty)

        // A filler keeps Redis at maxmemory while the workers drain: whatever they free, it takes, for 6 s — three
        // times the fetcher heartbeat's TTL.
        let filler = Filler(url: url)
        filler.start()
        defer { filler.stop() }
        let arguments = ["worker", "--bench-jobs", "--no-database", "--concurrency", "4", "--heartbeat-interval", "0.5",
                         "--heartbeat-ttl", "2", "--orphan-sweep-interval", "1", "--poll-interval", "0.5"]
        let workers = try (0..<2).map { _ in
            try ChildProcess(executable: TestServices.workerctl, arguments: arguments, environment: ["REDIS_URL": url])
        }
        defer { for worker in workers where worker.isRunning { worker.signal(SIGKILL) } }
        let logs = { workers.map(\.stderr).joined(separator: "\n") }
        let fullUntil = Date(timeIntervalSinceNow: 6)
        var overMaxmemory: [Int] = []
        var settledWhileFull = 0
        var countedWhileFull = 0
        var registeredWhileFull = 0
        var heartbeatsWhileFull: Set<Int> = []
        let processedBefore = try redis.command("GET", Keys.statProcessed).string ?? "0"
        while Date() < fullUntil {
            let memory = try Self.memory(redis)
            overMaxmemory.append(memory.used - memory.max)
            settledWhileFull = max(settledWhileFull, Int(try redis.command("ZCARD", Keys.retry).integer ?? 0)
                                   + Int(try redis.command("ZCARD", Keys.dead).integer ?? 0))
            if try redis.command("GET", Keys.statProcessed).string ?? "0" != processedBefore { countedWhileFull += 1 }
            registeredWhileFull = max(registeredWhileFull, Int(try redis.command("SCARD", Keys.processes).integer ?? 0))
            if Date() > fullUntil.addingTimeInterval(-4) {  // once both have started
                heartbeatsWhileFull.insert(try redis.scanKeys(matching: Keys.fetcherHeartbeat(identity: "*")).count)
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
        let ranWhileFull = try Self.runs(in: folder).count
        for worker in workers { XCTAssertTrue(worker.isRunning, worker.stderr) }
        XCTAssertGreaterThan(ranWhileFull, 0, "the workers ran jobs on a full Redis\n" + logs())
        // What grows Redis waits in the process: no retry or dead entry, no counter, no registry entry.
        XCTAssertEqual(settledWhileFull, 0, "no retry or dead entry is written while Redis is full\n" + logs())
        XCTAssertEqual(countedWhileFull, 0, "stat:processed does not move while Redis is full")
        XCTAssertEqual(registeredWhileFull, 0, "the process registry does not grow while Redis is full")
        // Both fetcher heartbeats lived through 4 s of a full Redis, twice their TTL.
        XCTAssertEqual(heartbeatsWhileFull, [2], "the fetcher heartbeats never lapse on a full Redis")
        // No net growth: once the start-up's in-flight moves and replies have passed (a transient of a few hundred KB:
        // two fetches of 254 jobs each), used_memory stays at maxmemory, within the filler's 64 KB of noise.
        let settled = overMaxmemory.suffix(20).sorted()
        XCTAssertLessThan(settled[settled.count / 2], 64 * 1024, "used_memory minus maxmemory, every 0.1 s: \(overMaxmemory)")
        XCTAssertLessThan(settled.last ?? 0, 256 * 1024, "used_memory minus maxmemory, every 0.1 s: \(overMaxmemory)")
        XCTAssertFalse(logs().contains("recovered in-flight jobs"), "no sweep took a live process's jobs\n" + logs())
        XCTAssertTrue(logs().contains("Redis is full"), logs())

        // Room again: the drain ends, and what waited (retries, dead jobs, counters, the process records) is written.
        filler.stop()
        try redis.command("DEL", Filler.key)
        XCTAssertTrue(try eventually(timeout: 120) {
            try Self.runs(in: folder).count >= everyJid.count && redis.command("LLEN", Keys.queue("default")).integer == 0
        }, "drained \((try? Self.runs(in: folder).count) ?? -1) of \(everyJid.count)\n" + logs())
        XCTAssertTrue(try eventually(timeout: 30) {
            try redis.command("ZCARD", Keys.dead).integer == Int64(expectedDead.count)
                && redis.command("ZCARD", Keys.retry).integer == Int64(expectedRetry.count)
        }, "dead \(String(describing: try? redis.command("ZCARD", Keys.dead))), retry \(String(describing: try? redis.command("ZCARD", Keys.retry)))\n" + logs())
        XCTAssertTrue(try eventually(timeout: 30) { try redis.command("GET", Keys.statProcessed).string == "\(everyJid.count)" },
                      "stat:processed \(String(describing: try? redis.command("GET", Keys.statProcessed)))")
        XCTAssertTrue(try eventually(timeout: 30) { try redis.command("SCARD", Keys.processes).integer == 2 },
                      "both processes registered once Redis had room")
        let runs = try Self.runs(in: folder)
        XCTAssertEqual(runs.count, everyJid.count, "each job ran once: none twice, none missing")
        XCTAssertEqual(Set(runs), everyJid)
        let dead = try Self.jids(redis.command("ZRANGE", Keys.dead, 0, -1))
        let retry = try Self.jids(redis.command("ZRANGE", Keys.retry, 0, -1))
        XCTAssertEqual(dead, expectedDead)
        XCTAssertEqual(retry, expectedRetry)
        XCTAssertFalse(logs().contains("recovered in-flight jobs"), logs())
        for worker in workers {
            worker.signal(SIGTERM)
            XCTAssertEqual(worker.wait(), 0, worker.stderr)
        }
    }

    /// The jids of the payloads in `reply` (an array of payloads).
    static func jids(_ reply: RedisReply) throws -> Set<String> {
        Set(try (reply.array ?? []).map { try XCTUnwrap(JobPayload(parsing: XCTUnwrap($0.bytes)).jid) })
    }

    /// `used_memory` and `maxmemory` from `INFO memory`.
    static func memory(_ redis: RedisConnection) throws -> (used: Int, max: Int) {
        let info = try XCTUnwrap(redis.command("INFO", "memory").string)
        func field(_ name: String) throws -> Int {
            let line = try XCTUnwrap(info.split(whereSeparator: \.isNewline).first { $0.hasPrefix(name + ":") })
            return try XCTUnwrap(Int(line.dropFirst(name.count + 1)))
        }
        return (try field("used_memory"), try field("maxmemory"))
    }

    /// The jids `RunLogProbe` recorded in `folder` (every process's file), one per run.
    static func runs(in folder: URL) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix("runs.") }.flatMap {
            try String(contentsOf: folder.appendingPathComponent($0), encoding: .utf8).split(separator: "\n").map(String.init)
        }
    }

    /// Keeps a Redis at `maxmemory`: pushes 1 KB strings onto `Filler.key` (64 a round trip) until one is refused,
    /// every 5 ms, on its own thread, until stopped.
    final class Filler: @unchecked Sendable {
        static let key = "test:filler"
        private let url: String
        private let lock = NSLock()
        private var stopped = false
        private let done = DispatchSemaphore(value: 0)

        init(url: String) { self.url = url }

        func start() {
            Thread { [self] in
                defer { done.signal() }
                guard let connection = try? RedisConnection(url: url) else { return }
                let block = String(repeating: "f", count: 1024)
                let round = [[any RedisArgument]](repeating: ["RPUSH", Self.key, block], count: 64)
                while !lock.withLock({ stopped }) {
                    while let replies = try? connection.pipeline(round), !replies.contains(where: { if case .error = $0 { return true } else { return false } }) {}
                    Thread.sleep(forTimeInterval: 0.005)
                }
            }.start()
        }

        func stop() {
            let first = lock.withLock { () -> Bool in
                defer { stopped = true }
                return !stopped
            }
            if first { done.wait() }
        }
    }
}
