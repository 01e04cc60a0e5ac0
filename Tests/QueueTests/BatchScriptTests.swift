import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The batch counting inside the settle and recover scripts, against the real Redis
/// (docs/batches.md). The worker-level proofs are in WorkersTests/BatchTests.
final class BatchScriptTests: XCTestCase {
    let identity = "batch-host:1:abcdef"

    func fetchAll(_ connection: RedisConnection) throws -> [FetchedJob] {
        try ReliableQueue.fetch(connection, identity: identity, queues: ["default"], limit: 100).jobs
    }

    /// A settle batch sent again after its reply was lost counts nothing twice, and the callbacks are
    /// pushed once.
    func testSettlementSentAgainAfterALostReplyCountsOnce() throws {
        let redis = try TestRedis(database: 77)
        let connection = try redis.connection()
        let callback = BatchCallback("Done", options: .object(["k": "v"]), queue: "cb")
        let batch = try Batches.create(connection, NewBatch(description: "two", jobs: [NewJob("Noop"), NewJob("Noop")],
                                                            onComplete: callback, onSuccess: callback))
        let jobs = try fetchAll(connection)
        XCTAssertEqual(jobs.count, 2)
        let first = [(job: jobs[0], settlement: Settlement.ack, counts: RunCounts.processed)]
        XCTAssertEqual(try ReliableQueue.settle(connection, first), 1)
        XCTAssertEqual(try ReliableQueue.settle(connection, first), 0, "the resend finds nothing in flight")
        XCTAssertEqual(try BatchAdmin.summary(connection, bid: batch.bid)?.pending, 1)
        XCTAssertEqual(try redis.int("LLEN", "queue:cb"), 0)
        let second = [(job: jobs[1], settlement: Settlement.ack, counts: RunCounts.processed)]
        try ReliableQueue.settle(connection, second)
        try ReliableQueue.settle(connection, second)
        let summary = try XCTUnwrap(try BatchAdmin.summary(connection, bid: batch.bid))
        XCTAssertEqual([summary.total, summary.pending, summary.failures, summary.dead], [2, 0, 0, 0])
        let pushed = try redis.payloads(list: "queue:cb")
        XCTAssertEqual(pushed.count, 2, "complete and success, once each")
        // LPUSH: the newest (success) is at the head.
        XCTAssertEqual(pushed.map(\.jid), [batch.successJid, batch.completeJid])
        XCTAssertEqual(pushed[0].fields["args"], [.object(["bid": .string(batch.bid), "event": "success", "total": 2, "pending": 0,
                                                  "failures": 0, "dead": 0]), .object(["k": "v"])])
        XCTAssertNotNil(pushed[0].fields["enqueued_at"])
        XCTAssertEqual(try redis.command("SISMEMBER", Keys.queues, "cb").integer, 1)

        // A late copy of a counted job that fails (and later dies) changes nothing.
        try redis.command("LPUSH", "queue:default", jobs[0].raw)
        let copy = try XCTUnwrap(try fetchAll(connection).first)
        try ReliableQueue.settle(connection, [(copy, .retry(payload: String(decoding: copy.raw, as: UTF8.self), at: 1e10), [.processed, .failed])])
        try ReliableQueue.moveDue(connection, from: Keys.retry, now: 2e10)
        let again = try XCTUnwrap(try fetchAll(connection).first)
        try ReliableQueue.settle(connection, [(again, .dead(payload: String(decoding: again.raw, as: UTF8.self)), [.processed, .failed])])
        let after = try XCTUnwrap(try BatchAdmin.summary(connection, bid: batch.bid))
        XCTAssertEqual([after.total, after.pending, after.failures, after.dead], [2, 0, 0, 0])
        XCTAssertEqual(try redis.int("LLEN", "queue:cb"), 2)
    }

    /// A failure then a death: the failure is counted in `failures`, the death in `dead`, and
    /// `complete` fires while `success` never does. A job that dies in the orphan sweep (interrupted
    /// too often) counts as dead too.
    func testRetryThenDeadAndOrphanSweepDeathCountForComplete() throws {
        let redis = try TestRedis(database: 77)
        let connection = try redis.connection()
        let batch = try Batches.create(connection, NewBatch(jobs: [NewJob("Fail", args: ["x"]), NewJob("Fail", args: ["y"])],
                                                            onComplete: BatchCallback("Done", queue: "cb"),
                                                            onSuccess: BatchCallback("Yay", queue: "cb")))
        var jobs = try fetchAll(connection)
        let retried = String(decoding: jobs[0].raw, as: UTF8.self)
        try ReliableQueue.settle(connection, [(jobs[0], .retry(payload: retried, at: 0), [.processed, .failed])])
        XCTAssertEqual(try BatchAdmin.summary(connection, bid: batch.bid)?.failures, 1)
        try ReliableQueue.moveDue(connection, from: Keys.retry)
        jobs = try fetchAll(connection)
        XCTAssertEqual(jobs.count, 1, "the retried job is back; the other is still in flight")
        try ReliableQueue.settle(connection, [(jobs[0], .dead(payload: String(decoding: jobs[0].raw, as: UTF8.self)), [.processed, .failed])])
        XCTAssertEqual(try BatchAdmin.summary(connection, bid: batch.bid)?.dead, 1)
        XCTAssertEqual(try redis.int("LLEN", "queue:cb"), 0)
        // The other job's process died (no heartbeat): the sweep kills it at the interrupt limit.
        let report = try ReliableQueue.recoverOrphans(connection, ownIdentity: "someone-else:2:abcdef", interruptLimit: 1)
        XCTAssertEqual(report.killed, 1)
        let summary = try XCTUnwrap(try BatchAdmin.detail(connection, bid: batch.bid))
        XCTAssertEqual([summary.summary.total, summary.summary.pending, summary.summary.failures, summary.summary.dead], [2, 2, 1, 2])
        XCTAssertEqual(summary.deadJids.count, 2)
        let pushed = try redis.payloads(list: "queue:cb")
        XCTAssertEqual(pushed.map(\.className), ["Done"])
        XCTAssertEqual(pushed.first?.fields["args"]?.arrayValue?.first?.objectValue?["dead"], 2)
        XCTAssertEqual(try BatchAdmin.list(connection).map(\.bid), [batch.bid])

        // Both dead jobs retried by hand, and this time they succeed: the deaths are undone, `success`
        // fires once, and `complete` (already fired) is not pushed again.
        let admin = JobAdmin(connection: connection)
        XCTAssertEqual(try admin.performAll(.retry, state: .dead).done, 2)
        jobs = try fetchAll(connection)
        XCTAssertEqual(jobs.count, 2)
        try ReliableQueue.settle(connection, jobs.map { ($0, Settlement.ack, RunCounts.processed) })
        let revived = try XCTUnwrap(try BatchAdmin.summary(connection, bid: batch.bid))
        XCTAssertEqual([revived.pending, revived.failures, revived.dead], [0, 0, 0])
        XCTAssertEqual(try redis.payloads(list: "queue:cb").map(\.className), ["Yay", "Done"])
        XCTAssertEqual(revived.state, "success")
    }

    /// A batch job an operator kills (`workerctl retry kill`) counts as dead, once.
    func testJobKilledByAnOperatorCountsAsDead() throws {
        let redis = try TestRedis(database: 77)
        let connection = try redis.connection()
        let batch = try Batches.create(connection, NewBatch(jobs: [NewJob("Fail", args: ["x"])],
                                                            onComplete: BatchCallback("Done", queue: "cb")))
        let job = try XCTUnwrap(try fetchAll(connection).first)
        try ReliableQueue.settle(connection, [(job, .retry(payload: String(decoding: job.raw, as: UTF8.self), at: 1e10), [.processed, .failed])])
        XCTAssertEqual(try JobAdmin(connection: connection).performAll(.kill, state: .retry).done, 1)
        let summary = try XCTUnwrap(try BatchAdmin.summary(connection, bid: batch.bid))
        XCTAssertEqual([summary.total, summary.pending, summary.failures, summary.dead], [1, 1, 1, 1])
        XCTAssertEqual(try redis.payloads(list: "queue:cb").map(\.className), ["Done"])
    }

    /// An empty batch is complete and successful at once; a bid used twice is refused, nothing written.
    func testEmptyBatchFiresAtOnceAndABidIsUsedOnce() throws {
        let redis = try TestRedis(database: 77)
        let connection = try redis.connection()
        let batch = try Batches.create(connection, NewBatch(jobs: [], onComplete: BatchCallback("Done", queue: "cb")), bid: "day-2026-11-22")
        XCTAssertEqual(try redis.payloads(list: "queue:cb").map(\.jid), [batch.completeJid])
        XCTAssertThrowsError(try Batches.create(connection, NewBatch(jobs: [NewJob("Noop")]), bid: "day-2026-11-22")) { error in
            XCTAssertEqual(error as? BatchError, .alreadyExists(bid: "day-2026-11-22"))
        }
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 0)
        // A batch created a lifetime later drops the old one from the listing.
        try Batches.create(connection, NewBatch(jobs: []), bid: "later", lifetime: .seconds(100), now: Clock.now() + 101)
        XCTAssertEqual(try redis.command("ZRANGE", Keys.batches, 0, -1).strings, ["later"])
        XCTAssertThrowsError(try Batches.create(connection, NewBatch(jobs: []), bid: "bad bid")) { error in
            XCTAssertEqual(error as? BatchError, .invalidBid("bad bid"))
        }
    }

    /// A batch's Redis memory is bounded: at most `Batches.maxJobs` jobs (only their jids stay for the batch's
    /// lifetime) and `Batches.maxPayloadBytes` of payloads (one script call); over either, nothing is written.
    func testABatchOverItsJobOrByteLimitIsRefusedWithNothingWritten() throws {
        let redis = try TestRedis(database: 77)
        try redis.flush()
        let connection = try redis.connection()
        let tooMany = NewBatch(jobs: Array(repeating: NewJob("Noop"), count: Batches.maxJobs + 1))
        XCTAssertThrowsError(try Batches.create(connection, tooMany, bid: "too-many")) { error in
            XCTAssertEqual(error as? BatchError, .tooLarge(jobs: Batches.maxJobs + 1, payloadBytes: 0))
            XCTAssertTrue("\(error)".contains("split the work"), "\(error)")
        }
        // 70 jobs of ~1 MB: past 64 MiB at the 65th or so; the bytes counted when refused are over the limit.
        let large = NewJob("Noop", args: [.string(String(repeating: "x", count: 1_000_000))])
        XCTAssertThrowsError(try Batches.create(connection, NewBatch(jobs: Array(repeating: large, count: 70)), bid: "too-big")) { error in
            guard case .tooLarge(let jobs, let bytes)? = error as? BatchError else { return XCTFail("\(error)") }
            XCTAssertEqual(jobs, 70)
            XCTAssertGreaterThan(bytes, Batches.maxPayloadBytes)
        }
        XCTAssertEqual(try redis.int("DBSIZE"), 0, "nothing written")
        // At the limits' edge it is created: 60 such jobs are under 64 MiB.
        let created = try Batches.create(connection, NewBatch(jobs: Array(repeating: large, count: 60)), bid: "just-fits")
        XCTAssertEqual(created.jids.count, 60)
        XCTAssertEqual(try redis.int("LLEN", "queue:default"), 60)
        try redis.flush()
    }
}
