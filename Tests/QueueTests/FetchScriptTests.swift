import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The fetch script moves jobs in chunks (LRANGE/LTRIM/LPUSH) instead of one LMOVE each; these tests hold it to
/// exactly what one `LMOVE queue working RIGHT LEFT` per job gives — the same jobs, oldest first, the same
/// in-flight list order, the same queue left behind — across queues, paused queues and chunk boundaries.
final class FetchScriptTests: XCTestCase {
    let identity = "fetch-host:1:abcdef"

    /// What `count` single LMOVEs from `queue` would do, computed on a copy of the lists in another database.
    private func referenceMoves(_ reference: TestRedis, queues: [(String, Int)], paused: Set<String>, limit: Int) throws -> (taken: [String], working: [String: [String]], left: [String: [String]]) {
        var taken: [String] = []
        for (queue, _) in queues where !paused.contains(queue) {
            while taken.count < limit {
                guard let job = try reference.command("LMOVE", Keys.queue(queue), Keys.working(queue: queue, identity: identity), "RIGHT", "LEFT").string else { break }
                taken.append(job)
            }
        }
        var working: [String: [String]] = [:]
        var left: [String: [String]] = [:]
        for (queue, _) in queues {
            working[queue] = try reference.command("LRANGE", Keys.working(queue: queue, identity: identity), 0, -1).array?.compactMap(\.string) ?? []
            left[queue] = try reference.command("LRANGE", Keys.queue(queue), 0, -1).array?.compactMap(\.string) ?? []
        }
        return (taken, working, left)
    }

    private func fill(_ redis: TestRedis, _ queue: String, count: Int) throws {
        for start in stride(from: 0, to: count, by: 500) {
            let jobs = (start..<min(count, start + 500)).map { NewJob("Noop", args: [.string("\(queue)-\($0)")], queue: queue) }
            try redis.client.enqueueMany(jobs)
        }
    }

    func testFetchTakesWhatOneLMOVEPerJobTakesAcrossQueuesPausesAndChunks() throws {
        let redis = try TestRedis(database: 93)
        let reference = try TestRedis(database: 94)
        // (queue, jobs): "big" spans several 1,000-job chunks; "paused" is skipped; "small" runs dry mid-batch.
        let queues = [("small", 7), ("paused", 5), ("big", 2_600), ("after", 40)]
        for (queue, count) in queues { try fill(redis, queue, count: count) }
        try redis.command("SADD", Keys.paused, "paused")
        // The same lists, byte for byte, in the reference database.
        for (queue, _) in queues {
            let jobs = try redis.command("LRANGE", Keys.queue(queue), 0, -1).array?.compactMap(\.string) ?? []
            if !jobs.isEmpty { _ = try reference.pool.withConnection { try $0.send(["RPUSH", Keys.queue(queue)] + jobs) } }
        }
        let connection = try redis.connection()
        var taken: [String] = []
        var expectedTaken: [String] = []
        for limit in [3, 2_500, 250, 250] {  // first inside one queue, then across chunks and queues, then dry
            let fetched = try ReliableQueue.fetch(connection, identity: identity, queues: queues.map(\.0), limit: limit).jobs
            XCTAssertLessThanOrEqual(fetched.count, limit)
            taken += fetched.map { String(decoding: $0.raw, as: UTF8.self) }
            for job in fetched { XCTAssertEqual(job.workingKey, Keys.working(queue: job.queue, identity: identity)) }
            expectedTaken += try referenceMoves(reference, queues: queues, paused: ["paused"], limit: limit).taken
        }
        XCTAssertEqual(taken.count, 7 + 2_600 + 40, "every job of the unpaused queues, none of the paused one")
        XCTAssertEqual(taken, expectedTaken, "the same jobs in the same order as one LMOVE each")
        let expected = try referenceMoves(reference, queues: queues, paused: ["paused"], limit: 0)
        for (queue, _) in queues {
            let working = try redis.command("LRANGE", Keys.working(queue: queue, identity: identity), 0, -1).array?.compactMap(\.string) ?? []
            XCTAssertEqual(working, expected.working[queue], "in-flight list of \(queue)")
            let left = try redis.command("LRANGE", Keys.queue(queue), 0, -1).array?.compactMap(\.string) ?? []
            XCTAssertEqual(left, expected.left[queue], "what is left of \(queue)")
        }
        XCTAssertEqual(try redis.int("LLEN", Keys.queue("paused")), 5)
        XCTAssertEqual(try redis.int("EXISTS", Keys.queue("big")), 0, "an emptied queue's key is gone, as after LMOVE")
    }
}
