import Foundation
import WorkersQueue
import WorkersTestServices
import XCTest

/// Batches through real worker processes (docs/batches.md): each callback is pushed exactly once,
/// with the right counts, while workers are SIGKILLed mid-run, jobs fail and retry, some die, and
/// jobs run twice. The callbacks go to a queue no worker here serves (`batch-callbacks`), so the
/// test sees every push.
final class BatchTests: XCTestCase {
    static let callbackQueue = "batch-callbacks"

    func workerArguments() -> [String] {
        ["worker", "--bench-jobs", "--queue", "default", "--concurrency", "4", "--heartbeat-interval", "0.3",
         "--heartbeat-ttl", "2", "--orphan-sweep-interval", "0.5", "--poll-interval", "0.3"]
    }

    /// The callbacks pushed so far, as (event, status object, options).
    func callbacks(_ redis: TestRedis) throws -> [(className: String, status: JSONObject, options: JSONValue)] {
        try redis.payloads(list: Keys.queue(Self.callbackQueue)).map { payload in
            let args = payload.fields["args"]?.arrayValue ?? []
            return (payload.className, args.first?.objectValue ?? [:], args.count > 1 ? args[1] : .null)
        }
    }

    func status(_ redis: TestRedis, bid: String, event: String) throws -> JSONObject? {
        let matching = try callbacks(redis).filter { $0.status["bid"] == .string(bid) && $0.status["event"] == .string(event) }
        XCTAssertLessThanOrEqual(matching.count, 1, "\(event) callback of \(bid) pushed \(matching.count) times")
        return matching.first?.status
    }

    /// 1,000 jobs in two batches over three worker processes, one of them SIGKILLed (and replaced)
    /// five times while jobs run: batch A has 600 jobs that succeed, 60 that fail once and then
    /// succeed, and 40 that fail twice and die; batch B has 270 + 30 that all end in success. 50 jobs of
    /// A (10 flaky, 10 doomed, 30 ok) are delivered twice.
    func testThousandJobsWithKillsRetriesAndDeathsFireEachCallbackOnceWithTheRightCounts() throws {
        let redis = try TestRedis(database: 76)
        let environment = ["REDIS_URL": redis.url, "LOG_LEVEL": "info"]
        let onComplete = BatchCallback("BatchDone", options: .object(["day": "A"]), queue: Self.callbackQueue)
        let onSuccess = BatchCallback("BatchSucceeded", options: .object(["day": "A"]), queue: Self.callbackQueue)
        var jobsA = (0..<600).map { _ in NewJob("BatchProbe", args: ["ok", 15]) }
        jobsA += (0..<60).map { _ in NewJob("BatchProbe", args: ["flaky", 15]) }
        jobsA += (0..<40).map { _ in NewJob("BatchProbe", args: ["doomed", 15], retry: 1) }
        jobsA.shuffle()
        var jobsB = (0..<270).map { _ in NewJob("BatchProbe", args: ["ok", 15]) }
        jobsB += (0..<30).map { _ in NewJob("BatchProbe", args: ["flaky", 15]) }
        jobsB.shuffle()
        let a = try redis.client.createBatch(NewBatch(description: "A", jobs: jobsA, onComplete: onComplete, onSuccess: onSuccess))
        let b = try redis.client.createBatch(NewBatch(description: "B", jobs: jobsB, onComplete: onComplete, onSuccess: onSuccess))
        XCTAssertEqual(try redis.int("LLEN", Keys.queue("default")), 1000)
        // 50 jobs of A delivered twice (a redelivery after a lost acknowledgement, or a re-push): byte-identical
        // copies at the head, so each copy runs after its original has been counted.
        let queued = try redis.command("LRANGE", Keys.queue("default"), 0, -1).strings.filter { $0.contains(a.bid) }
        let copies = queued.filter { $0.contains("\"flaky\"") }.prefix(10) + queued.filter { $0.contains("\"doomed\"") }.prefix(10)
            + queued.filter { $0.contains("\"ok\"") }.prefix(30)
        XCTAssertEqual(copies.count, 50)
        for copy in copies { try redis.command("LPUSH", Keys.queue("default"), copy) }

        var workers = try (0..<3).map { _ in
            try ChildProcess(executable: TestServices.workerctl, arguments: workerArguments(), environment: environment)
        }
        defer { for worker in workers where worker.isRunning { worker.signal(SIGTERM); worker.wait() } }
        var killed: [ChildProcess] = []
        var lastLeft = 1050
        while killed.count < 5 {
            // Kill once another 100 jobs have left the queue, so every kill lands while jobs run.
            XCTAssertTrue(try eventually(timeout: 60) { try redis.int("LLEN", Keys.queue("default")) <= lastLeft - 100 },
                          workers[0].stderr)
            lastLeft = try redis.int("LLEN", Keys.queue("default"))
            if lastLeft < 150 { break }
            let victim = workers.removeFirst()
            victim.signal(SIGKILL)
            victim.wait()
            killed.append(victim)
            workers.append(try ChildProcess(executable: TestServices.workerctl, arguments: workerArguments(), environment: environment))
        }
        XCTAssertGreaterThanOrEqual(killed.count, 3, "the workers finished before they could be killed often enough")

        XCTAssertTrue(try eventually(timeout: 120) {
            try status(redis, bid: a.bid, event: "complete") != nil && status(redis, bid: b.bid, event: "success") != nil
        }, workers.map(\.stderr).joined())
        // Let any late duplicate settle before counting pushes.
        XCTAssertTrue(try eventually(timeout: 30) {
            try redis.int("LLEN", Keys.queue("default")) == 0 && redis.int("ZCARD", Keys.retry) == 0
                && redis.workingKeys().allSatisfy { try redis.int("LLEN", $0) == 0 }
        })

        // The kills landed mid-run: jobs in flight in killed workers were taken back and delivered again.
        XCTAssertTrue(workers.contains { $0.stderr.contains("recovered in-flight jobs of dead processes") },
                      workers.map(\.stderr).joined())

        let deadA = try redis.payloads(zset: Keys.dead).filter { $0.fields["bid"] == .string(a.bid) }
        XCTAssertEqual(Set(deadA.compactMap(\.jid)).count, 40, "exactly the doomed jobs died")
        let completeA = try XCTUnwrap(try status(redis, bid: a.bid, event: "complete"))
        XCTAssertEqual(completeA["total"], 700)
        XCTAssertEqual(completeA["pending"], 40, "the 40 dead jobs never succeeded")
        XCTAssertEqual(completeA["failures"], 40, "the flaky jobs left the failures when they succeeded")
        XCTAssertEqual(completeA["dead"], 40)
        XCTAssertNil(try status(redis, bid: a.bid, event: "success"), "a batch with dead jobs never succeeds")

        let completeB = try XCTUnwrap(try status(redis, bid: b.bid, event: "complete"))
        let successB = try XCTUnwrap(try status(redis, bid: b.bid, event: "success"))
        for event in [completeB, successB] {
            XCTAssertEqual(event["total"], 300)
            XCTAssertEqual(event["pending"], 0)
            XCTAssertEqual(event["failures"], 0)
            XCTAssertEqual(event["dead"], 0)
        }
        XCTAssertEqual(try callbacks(redis).count, 3, "complete(A), complete(B), success(B): nothing else")
        let payloads = try redis.payloads(list: Keys.queue(Self.callbackQueue))
        XCTAssertEqual(Set(payloads.compactMap(\.jid)), Set([a.completeJid, b.completeJid, b.successJid].compactMap { $0 }))
        XCTAssertEqual(try callbacks(redis).map(\.options), [JSONValue](repeating: .object(["day": "A"]), count: 3))

        let shownA = try XCTUnwrap(try BatchAdmin.summary(redis.connection(), bid: a.bid))
        XCTAssertEqual([shownA.total, shownA.pending, shownA.failures, shownA.dead], [700, 40, 40, 40])
        XCTAssertEqual(shownA.state, "complete")
        XCTAssertEqual(try BatchAdmin.summary(redis.connection(), bid: b.bid)?.state, "success")
    }

    /// A job whose acknowledgement was lost and that was delivered again (here: two copies of the
    /// same payload, as a sweep or an outbox re-push leaves) runs twice and is counted once.
    func testJobRedeliveredAfterItsAckWasLostIsCountedOnce() throws {
        let redis = try TestRedis(database: 76)
        let callback = BatchCallback("BatchDone", queue: Self.callbackQueue)
        let batch = try redis.client.createBatch(NewBatch(jobs: [NewJob("BatchProbe", args: ["ok", 0]),
                                                                 NewJob("BatchProbe", args: ["ok", 300])],
                                                          onComplete: callback, onSuccess: callback))
        // The first job again, byte for byte: its second delivery.
        let first = try XCTUnwrap(try redis.command("LINDEX", Keys.queue("default"), -1).string)
        try redis.command("LPUSH", Keys.queue("default"), first)
        let worker = try ChildProcess(executable: TestServices.workerctl, arguments: workerArguments(),
                                      environment: ["REDIS_URL": redis.url])
        defer { worker.signal(SIGTERM); worker.wait() }
        XCTAssertTrue(try eventually { try redis.processed() == 3 }, worker.stderr)
        XCTAssertTrue(try eventually { try callbacks(redis).count == 2 }, worker.stderr)
        let summary = try XCTUnwrap(try BatchAdmin.summary(redis.connection(), bid: batch.bid))
        XCTAssertEqual([summary.total, summary.pending, summary.failures, summary.dead], [2, 0, 0, 0])
        for event in ["complete", "success"] {
            let status = try XCTUnwrap(try status(redis, bid: batch.bid, event: event))
            XCTAssertEqual(status["pending"], 0)
            XCTAssertEqual(status["total"], 2)
        }

        // What an operator sees.
        let cli = WorkerctlRunner(redisURL: redis.url)
        let list = try cli.run("batches", "ls", "--json")
        XCTAssertEqual(list.status, 0, list.stderr)
        let listed = try XCTUnwrap(list.object?["batches"]?.arrayValue?.first?.objectValue, list.stdout)
        XCTAssertEqual(listed["bid"], .string(batch.bid))
        XCTAssertEqual(listed["state"], "success")
        XCTAssertEqual(listed["on_success"], "BatchDone")
        let shown = try cli.run("batches", "show", batch.bid)
        XCTAssertEqual(shown.status, 0, shown.stderr)
        XCTAssertTrue(shown.stdout.contains("total 2  pending 0  failures 0  dead 0"), shown.stdout)
        let missing = try cli.run("batches", "show", "nosuchbatch")
        XCTAssertEqual(missing.status, 1)
        XCTAssertTrue(missing.stderr.contains("no batch nosuchbatch"), missing.stderr)
        XCTAssertEqual(try cli.run("batches", "show", "bad bid!").status, 2)
    }
}
