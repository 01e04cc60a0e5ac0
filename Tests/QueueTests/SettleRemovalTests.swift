import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Which settlements of one settle call take effect: exactly those whose job one `LREM working -1 raw` per job, in
/// the call's order with its plain acks first (`ReliableQueue.acknowledge` cuts them off the tail before the script
/// runs), removes — checked against a copy of the lists in another database, with jobs near the tail (as a worker
/// settles them) and anywhere else, absent jobs (taken back by a sweep), the same bytes twice in a list and in a batch,
/// and several in-flight lists in one call; the lists left behind must be the same too, entry for entry and in order —
/// which is what the tail cut (one LTRIM and one RPUSH of the entries that stay, instead of one LREM per acknowledged
/// job) must keep, and what the transaction around it keeps when the list's other writers act between its read and
/// its cut.
final class SettleRemovalTests: XCTestCase {
    /// A deterministic generator, so that a failure can be replayed.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return state
        }
    }

    private func job(_ index: Int) -> [UInt8] { Array(#"{"class":"Noop","args":[\#(index)],"jid":"\#(String(format: "%024x", index))"}"#.utf8) }

    /// The fetcher heartbeat of the lists' owner (`host:1:abc`): alive, as a settling process is, so that plain acks
    /// are cut off the tail (without it every one is `LREM`ed: `testNoCutOnceTheOwnersHeartbeatIsGone`).
    private let heartbeat = Keys.fetcherHeartbeat(identity: "host:1:abc")

    /// The one in-flight list the `acknowledge` tests work on (`key`), holding jobs 0..<count (job 0 at the head), in a
    /// flushed database; its owner's heartbeat set when `alive`.
    private let key = "working:queue:a:host:1:abc"
    private func inFlightList(_ count: Int, alive: Bool = true) throws -> (redis: TestRedis, connection: RedisConnection,
                                                                            entries: [[UInt8]]) {
        let redis = try TestRedis(database: 95)
        try redis.flush()
        let connection = try redis.connection()
        if alive { try redis.command("SET", heartbeat, "1") }
        let entries = (0..<count).map { job($0) }
        _ = try connection.send(["RPUSH", key] + entries)
        return (redis, connection, entries)
    }

    private func list(_ redis: TestRedis, _ key: String) throws -> [String] {
        try redis.command("LRANGE", key, 0, -1).array?.compactMap(\.string) ?? []
    }

    func testSettlementTakesEffectExactlyAsOneLREMPerJobWould() throws {
        let redis = try TestRedis(database: 95)
        let reference = try TestRedis(database: 96)
        let connection = try redis.connection()
        var random = Generator(state: 0x5EED)
        let keys = ["working:queue:a:host:1:abc", "working:queue:b:host:1:abc"]
        for round in 0..<30 {
            try redis.flush()
            try reference.flush()
            try redis.command("SET", heartbeat, "1")
            // Each list: up to 300 jobs drawn from a small pool, so that some bytes appear twice.
            for key in keys {
                let entries = (0..<Int.random(in: 0...300, using: &random)).map { _ in job(Int.random(in: 0..<400, using: &random)) }
                for start in stride(from: 0, to: entries.count, by: 100) {
                    let chunk = Array(entries[start..<min(entries.count, start + 100)])
                    _ = try redis.pool.withConnection { try $0.send(["RPUSH", key] + chunk) }
                    _ = try reference.pool.withConnection { try $0.send(["RPUSH", key] + chunk) }
                }
            }
            // A batch: mostly jobs near the tail (as a worker settles), some from anywhere, some absent, some twice.
            var batch: [(key: String, raw: [UInt8])] = []
            let lists = try Dictionary(uniqueKeysWithValues: keys.map { ($0, try list(reference, $0)) })
            for _ in 0..<Int.random(in: 1...120, using: &random) {
                let key = keys.randomElement(using: &random)!
                let present = lists[key] ?? []
                let pick = Int.random(in: 0..<10, using: &random)
                if pick < 6, !present.isEmpty {
                    let nearTail = present.count - 1 - Int.random(in: 0..<min(present.count, 40), using: &random)
                    batch.append((key, Array(present[nearTail].utf8)))
                } else if pick < 8, !present.isEmpty {
                    batch.append((key, Array(present.randomElement(using: &random)!.utf8)))
                } else {
                    batch.append((key, job(Int.random(in: 0..<500, using: &random))))
                }
            }
            // Plain acks (cut off the tail first, the rest of them then `LREM`ed by the script): about a third of the
            // batch in even rounds, nine in ten in odd ones (a drain's batch: the tail is cut off and what stays pushed
            // back, instead of one LREM each); the others a `retry` whose payload names its
            // position: the retry set shows which of those took effect.
            let mostlyAcks = round % 2 == 1
            let acks = batch.indices.filter { _ in
                mostlyAcks ? Int.random(in: 0..<10, using: &random) != 0 : Int.random(in: 0..<3, using: &random) == 0
            }
            let items = batch.enumerated().map { index, entry in
                (job: FetchedJob(queue: "a", raw: entry.raw, workingKey: entry.key),
                 settlement: acks.contains(index) ? Settlement.ack : .retry(payload: "item-\(index)", at: Double(index)),
                 counts: RunCounts.processed)
            }
            let settled = try ReliableQueue.settle(connection, items)
            var expected: [String] = []
            var acked = 0
            for index in acks where try reference.int("LREM", batch[index].key, -1, batch[index].raw) == 1 { acked += 1 }
            for (index, entry) in batch.enumerated() where !acks.contains(index) {
                if try reference.int("LREM", entry.key, -1, entry.raw) == 1 { expected.append("item-\(index)") }
            }
            let tookEffect = try redis.command("ZRANGE", Keys.retry, 0, -1).array?.compactMap(\.string) ?? []
            XCTAssertEqual(tookEffect, expected, "round \(round): which settlements took effect")
            XCTAssertEqual(settled, acked + expected.count, "round \(round)")
            XCTAssertEqual(try redis.int("GET", Keys.statProcessed), acked + expected.count, "round \(round): counted once each")
            for key in keys {
                XCTAssertEqual(try list(redis, key), try list(reference, key), "round \(round): \(key) left behind")
            }
        }
    }

    /// A worker's usual batch: its n oldest finished jobs, with k older ones still running among them, so that some of
    /// the jobs acknowledged sit past the list's last n entries (in the cut's read of the last n + 32, or beyond it when
    /// k > 32: then left to the script, one `LREM` each). The list left behind is entry for entry the one n `LREM -1`s
    /// leave, and each job is counted once.
    func testABatchWithOlderJobsStillRunningLeavesTheListAsOneLREMPerJobWould() throws {
        let redis = try TestRedis(database: 95)
        let reference = try TestRedis(database: 96)
        let connection = try redis.connection()
        var random = Generator(state: 0x7A11)
        for round in 0..<40 {
            try redis.flush()
            try reference.flush()
            try redis.command("SET", heartbeat, "1")
            let entries = (0..<Int.random(in: 1...200, using: &random)).map { job(round * 1000 + $0) }
            for target in [redis, reference] {
                _ = try target.pool.withConnection { try $0.send(["RPUSH", key] + entries) }
            }
            // The tail's n + k entries: k of them (not the newest) still running, the other n acknowledged.
            let n = Int.random(in: 1...min(60, entries.count), using: &random)
            let k = Int.random(in: 0...min(n, 40, entries.count - n), using: &random)
            let stretch = Array(entries.suffix(n + k))
            var running = Set<Int>()
            while running.count < k { running.insert(Int.random(in: 1..<max(2, stretch.count), using: &random)) }
            let acked = stretch.indices.filter { !running.contains($0) }.map { stretch[$0] }.shuffled(using: &random)
            let items = acked.map { (job: FetchedJob(queue: "a", raw: $0, workingKey: key), settlement: Settlement.ack,
                                     counts: RunCounts.processed) }
            let settled = try ReliableQueue.settle(connection, items)
            for raw in acked { _ = try reference.int("LREM", key, -1, raw) }
            XCTAssertEqual(settled, n, "round \(round) (n \(n), k \(k))")
            XCTAssertEqual(try redis.int("GET", Keys.statProcessed), n, "round \(round): counted once each")
            XCTAssertEqual(try list(redis, key), try list(reference, key), "round \(round) (n \(n), k \(k)): the list left behind")
        }
    }

    /// The cut is planned from a read of the list and written in a transaction watching the owner's fetcher heartbeat:
    /// a sweep can take jobs back only once the heartbeat is gone, and a heartbeat that moved in between (here it
    /// expired, the sweep took the tail job back as `recoverOrphans` would, and the process's heartbeat came back)
    /// aborts the transaction; the cut is planned again from a fresh read. A cut written blind would trim the wrong
    /// entries: a job still in flight lost.
    func testASweepBetweenTheReadAndTheCutAbortsItAndTheCutIsPlannedAgain() throws {
        let (redis, connection, entries) = try inFlightList(10)
        let sweeper = try redis.connection()
        var reads = 0
        let result = try ReliableQueue.acknowledge(connection, [(key, Array(entries.suffix(3)))], now: 1_764_028_800) {
            reads += 1
            if reads == 1 {
                _ = try? sweeper.send(["DEL", heartbeat])
                _ = try? sweeper.send(["RPOP", key])
                _ = try? sweeper.send(["SET", heartbeat, "1"])
            }
        }
        XCTAssertEqual(reads, 2, "read again after the aborted transaction")
        XCTAssertEqual(result.settled, 2, "the two acknowledged jobs still in flight")
        XCTAssertEqual(result.leftovers, [[2]], "the one the sweep took is left to the script's LREM (which finds nothing)")
        XCTAssertEqual(try list(redis, key), entries.prefix(7).map { String(decoding: $0, as: UTF8.self) })
        XCTAssertEqual(try redis.int("GET", Keys.statProcessed), 2)
    }

    /// A fetch pushing at the list's head between the read and the cut does not make it wrong (the cut counts from the
    /// tail), so it does not abort it: the acknowledged jobs go, the pushed ones stay, in order.
    func testAFetchPushingAtTheHeadBetweenTheReadAndTheCutLeavesItRight() throws {
        let (redis, connection, entries) = try inFlightList(5)
        let fetcher = try redis.connection()
        // The list's last 4 entries, the second newest of them still running: the whole list is in the region read.
        let acknowledged = [entries[1], entries[3], entries[4]]
        var reads = 0
        let result = try ReliableQueue.acknowledge(connection, [(key, acknowledged)], now: 1_764_028_800) {
            reads += 1
            _ = try? fetcher.send(["LPUSH", key, job(100), job(101)])
        }
        XCTAssertEqual(reads, 1, "not read again")
        XCTAssertEqual(result.settled, 3)
        XCTAssertEqual(try list(redis, key), [job(101), job(100), entries[0], entries[2]].map { String(decoding: $0, as: UTF8.self) })
        XCTAssertEqual(try redis.int("GET", Keys.statProcessed), 3)
    }

    /// With the owner's fetcher heartbeat gone (expired: the process stalled, a sweep may take its list back at any
    /// moment) nothing is cut: every job is left to the settle script's `LREM`, which acts only on what is still there.
    func testNoCutOnceTheOwnersHeartbeatIsGone() throws {
        let (redis, connection, entries) = try inFlightList(6, alive: false)
        var reads = 0
        let result = try ReliableQueue.acknowledge(connection, [(key, Array(entries.suffix(2)))], now: 1_764_028_800) {
            reads += 1
        }
        XCTAssertEqual(reads, 0, "no cut planned")
        XCTAssertEqual(result.settled, 0)
        XCTAssertEqual(result.leftovers, [[0, 1]])
        XCTAssertEqual(try redis.command("LLEN", key).integer, 6, "nothing cut")
        XCTAssertEqual(try redis.command("GET", Keys.statProcessed).isNull, true, "nothing counted")
    }

    /// A heartbeat moved before every attempt (refreshed, each time, between the read and the cut) cuts nothing and
    /// counts nothing: all the jobs are left to the settle script, one `LREM` each — and `settle` still settles each
    /// of them once.
    func testAHeartbeatMovedBeforeEveryAttemptLeavesTheJobsToTheScript() throws {
        let (redis, connection, entries) = try inFlightList(10)
        let heart = try redis.connection()
        let acknowledged = Array(entries.suffix(4))
        var reads = 0
        let result = try ReliableQueue.acknowledge(connection, [(key, acknowledged)], now: 1_764_028_800, attempts: 3) {
            reads += 1
            _ = try? heart.send(["SET", heartbeat, "1", "EX", 30])
        }
        XCTAssertEqual(reads, 3)
        XCTAssertEqual(result.settled, 0)
        XCTAssertEqual(result.leftovers, [[0, 1, 2, 3]])
        XCTAssertEqual(try redis.command("LLEN", key).integer, 10, "nothing cut")
        XCTAssertEqual(try redis.command("GET", Keys.statProcessed).isNull, true, "nothing counted")
        let items = acknowledged.map { (job: FetchedJob(queue: "a", raw: $0, workingKey: key), settlement: Settlement.ack,
                                        counts: RunCounts.processed) }
        XCTAssertEqual(try ReliableQueue.settle(connection, items), 4)
        XCTAssertEqual(try ReliableQueue.settle(connection, items), 0, "sent again: nothing twice")
        XCTAssertEqual(try redis.int("GET", Keys.statProcessed), 4)
        XCTAssertEqual(try redis.command("LLEN", key).integer, 6)
    }
}
