import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// The settle script (`Scripts.complete`) and a unique job's lock, op by op, where features meet: a unique job
/// rescheduled because it is over a fleet-wide limit (`schedule`, docs/limiters.md) is still live, so it keeps its
/// lock, extended to its new time + `unique_for` like a retry; `ack` releases it.
final class UniqueSettleTests: XCTestCase {
    private let policy = UniquePolicy(for: .seconds(60), until: .success)

    /// Pushes one unique job, takes it into the in-flight list as a worker would, and returns it with its lock key.
    private func fetchedUniqueJob(_ redis: TestRedis) throws -> (job: FetchedJob, jid: String, lock: String) {
        let job = NewJob("Sleep", args: [1])
        let jid = try redis.client.enqueueUnique(job, policy: policy).jid
        let lock = UniqueLockKey(className: "Sleep", queue: "default", key: "[1]").redisKey
        XCTAssertEqual(try redis.command("GET", lock).string, jid, "the push took the lock")
        let connection = try redis.connection()
        var fetched = try XCTUnwrap(try ReliableQueue.fetch(connection, identity: "host:1:test", queues: ["default"],
                                                            limit: 1).jobs.first)
        fetched.uniqueJid = jid
        return (fetched, jid, lock)
    }

    func testOverLimitRescheduleKeepsAndExtendsTheLockAndSuccessReleasesIt() throws {
        let redis = try TestRedis(database: 88)
        let (job, jid, lock) = try fetchedUniqueJob(redis)
        let connection = try redis.connection()
        let later = Clock.now() + 600
        let settled = try ReliableQueue.settle(connection, [(job, .schedule(payload: String(decoding: job.raw, as: UTF8.self),
                                                                                at: later), RunCounts())])
        XCTAssertEqual(settled, 1)
        XCTAssertEqual(try redis.command("GET", lock).string, jid, "an over-limit job is still live: it keeps its lock")
        let ttl = try redis.int("PTTL", lock)
        XCTAssertGreaterThan(ttl, 600_000, "the lock outlives the wait until the job's new time (+ unique_for)")
        XCTAssertEqual(try redis.int("ZCARD", "schedule"), 1)

        // The job comes back, runs and succeeds: its lock goes with it.
        try redis.command("DEL", "schedule")
        try redis.command("LPUSH", "queue:default", job.raw)
        var again = try XCTUnwrap(try ReliableQueue.fetch(connection, identity: "host:1:test", queues: ["default"],
                                                          limit: 1).jobs.first)
        again.uniqueJid = jid
        XCTAssertEqual(try ReliableQueue.settle(connection, [(again, .ack, .processed)]), 1)
        XCTAssertTrue(try redis.command("GET", lock).isNull, "success releases the lock")
    }
}
