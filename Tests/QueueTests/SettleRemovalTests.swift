import Foundation
import Queue
import TestSupport
import XCTest

/// Which settlements of one settle call take effect: exactly those whose job one `LREM working -1 raw` per job, in
/// the call's order with its plain acks first (they travel in the script's compact form), removes — checked against a copy of the lists in another database, with jobs near the tail
/// (as a worker settles them) and anywhere else, absent jobs (taken back by a sweep), the same bytes twice in a list
/// and in a batch, and several in-flight lists in one call; the lists left behind must be the same too, entry for
/// entry and in order — which is what the script's tail cut (one LTRIM and one RPUSH of the entries that stay,
/// instead of one LREM per acknowledged job) must keep.
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

    private func list(_ redis: TestRedis, _ key: String) throws -> [String] {
        try redis.command("LRANGE", key, 0, -1).array?.compactMap(\.string) ?? []
    }

    func testSettlementTakesEffectExactlyAsOneLREMPerJobWould() throws {
        let redis = try TestRedis(database: 95)
        let reference = try TestRedis(database: 96)
        let connection = try redis.connection()
        var random = Generator(state: 0x5EED)
        let keys = ["working:queue:a:host:1:x", "working:queue:b:host:1:x"]
        for round in 0..<30 {
            try redis.flush()
            try reference.flush()
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
            // Plain acks (sent in the script's compact form, which it applies first): about a third of the batch in
            // even rounds, nine in ten in odd ones (a drain's batch: the script then cuts the list's tail off and
            // pushes back what stays, instead of one LREM each); the others a `retry` whose payload names its
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
    /// the jobs acknowledged sit past the list's last n entries (in the script's read of the last n + 32, or beyond it
    /// when k > 32: then `LREM`ed one by one). The list left behind is entry for entry the one n `LREM -1`s leave, and
    /// each job is counted once.
    func testABatchWithOlderJobsStillRunningLeavesTheListAsOneLREMPerJobWould() throws {
        let redis = try TestRedis(database: 95)
        let reference = try TestRedis(database: 96)
        let connection = try redis.connection()
        var random = Generator(state: 0x7A11)
        let key = "working:queue:a:host:1:x"
        for round in 0..<40 {
            try redis.flush()
            try reference.flush()
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

    /// The cut is planned from a read of the list and written in a transaction watching it: a list written in between
    /// (here a sweep takes the tail job back, as `recoverOrphans` would) aborts the transaction, and the cut is planned
    /// again from a fresh read. A cut written blind would trim the wrong entries: a job still in flight lost.
    func testAListWrittenBetweenTheReadAndTheCutIsReadAgainNotCutBlind() throws {
        let redis = try TestRedis(database: 95)
        try redis.flush()
        let connection = try redis.connection()
        let sweeper = try redis.connection()
        let key = "working:queue:a:host:1:x"
        let entries = (0..<10).map { job($0) }
        _ = try connection.send(["RPUSH", key] + entries)
        var reads = 0
        let result = try ReliableQueue.acknowledge(connection, [(key, Array(entries.suffix(3)))], now: 1_764_028_800) {
            reads += 1
            if reads == 1 { _ = try? sweeper.send(["RPOP", key]) }
        }
        XCTAssertEqual(reads, 2, "read again after the aborted transaction")
        XCTAssertEqual(result.settled, 2, "the two acknowledged jobs still in flight")
        XCTAssertEqual(result.leftovers, [[2]], "the one the sweep took is left to the script's LREM (which finds nothing)")
        XCTAssertEqual(try list(redis, key), entries.prefix(7).map { String(decoding: $0, as: UTF8.self) })
        XCTAssertEqual(try redis.int("GET", Keys.statProcessed), 2)
    }

    /// A list written before every attempt (a busy fetcher pushing at its head) cuts nothing and counts nothing: all its
    /// jobs are left to the settle script, one `LREM` each — and `settle` still settles each of them once.
    func testAListWrittenBeforeEveryAttemptLeavesItsJobsToTheScript() throws {
        let redis = try TestRedis(database: 95)
        try redis.flush()
        let connection = try redis.connection()
        let fetcher = try redis.connection()
        let key = "working:queue:a:host:1:x"
        let entries = (0..<10).map { job($0) }
        _ = try connection.send(["RPUSH", key] + entries)
        let acknowledged = Array(entries.suffix(4))
        var reads = 0
        let result = try ReliableQueue.acknowledge(connection, [(key, acknowledged)], now: 1_764_028_800, attempts: 3) {
            reads += 1
            _ = try? fetcher.send(["LPUSH", key, job(100 + reads)])
        }
        XCTAssertEqual(reads, 3)
        XCTAssertEqual(result.settled, 0)
        XCTAssertEqual(result.leftovers, [[0, 1, 2, 3]])
        XCTAssertEqual(try redis.command("LLEN", key).integer, 13, "nothing cut")
        XCTAssertEqual(try redis.command("GET", Keys.statProcessed).isNull, true, "nothing counted")
        let items = acknowledged.map { (job: FetchedJob(queue: "a", raw: $0, workingKey: key), settlement: Settlement.ack,
                                        counts: RunCounts.processed) }
        XCTAssertEqual(try ReliableQueue.settle(connection, items), 4)
        XCTAssertEqual(try ReliableQueue.settle(connection, items), 0, "sent again: nothing twice")
        XCTAssertEqual(try redis.int("GET", Keys.statProcessed), 4)
        XCTAssertEqual(try redis.command("LLEN", key).integer, 9)
    }
}
