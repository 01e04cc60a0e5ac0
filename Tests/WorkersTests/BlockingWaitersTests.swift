import Foundation
import WorkersQueue
import WorkersTestServices
import Workers
import XCTest

/// A worker serving one queue keeps `blockingWaiters` extra connections waiting in `BLMOVE` next to its fetcher's own
/// once the queue is drained (`Fetcher.waitLoop`), so jobs pushed together are each handed over in the push's own
/// event-loop iteration. What must hold: the connections do wait; every job runs once and leaves nothing in flight,
/// also when the waiting connections are killed while jobs arrive (the reconciliation that follows must not take back
/// a job a wait in flight brought); a backlog is moved by batched fetches, not one wait per job; a job a waiter took
/// from a queue it found paused goes back. Real worker, real Redis (database 126).
final class BlockingWaitersTests: XCTestCase {
    var redis: TestRedis!
    var harness: WorkerHarness!
    var process: WorkerProcess?

    override func setUpWithError() throws {
        redis = try TestRedis(database: 126)
        try redis.flush()
        harness = WorkerHarness(redis: redis)
    }

    override func tearDown() {
        process?.shutdown()  // waits end within blockingFetchTimeout (1 s here, 3 s in the paused test)
        process = nil
        try? redis.flush()
    }

    private func start(waiters: Int = 2, concurrency: Int = 4, waitTimeout: Double = 1) throws {
        var configuration = harness.configuration(concurrency: concurrency)
        configuration.blockingWaiters = waiters
        configuration.blockingFetchTimeout = .seconds(waitTimeout)
        process = try harness.start(configuration)
    }

    private func blockedConnections() throws -> Int { try redis.clientsWaitingInBLMOVE() }

    private func payload(_ value: String) throws -> String {
        try JobClient.payload(for: NewJob("Record", args: [.string(value)]), createdAt: Clock.now(), enqueuedAt: Clock.now())
            .serialized()
    }

    private func assertEachRanOnce(_ values: [String], file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertTrue(eventually(timeout: 20) { self.harness.recorder.all.count >= values.count },
                      "ran \(harness.recorder.all.count) of \(values.count)", file: file, line: line)
        XCTAssertTrue(try eventually(timeout: 20) { try redis.workingKeys().isEmpty && redis.int("LLEN", "queue:default") == 0 },
                      "jobs left in the queue or in flight", file: file, line: line)
        Thread.sleep(forTimeInterval: 0.3)  // a job run twice would show up now
        XCTAssertEqual(harness.recorder.all.sorted(), values.sorted(), "each job once", file: file, line: line)
    }

    func testTheFetcherAndEachWaiterWaitOnceTheQueueIsDrained() throws {
        try start(waiters: 2)
        XCTAssertTrue(try eventually(timeout: 10) { try blockedConnections() == 3 }, "blocked: \((try? blockedConnections()) ?? -1)")
    }

    func testJobsPushedTogetherAndOneByOneEachRunOnce() throws {
        try start(waiters: 2)
        XCTAssertTrue(try eventually(timeout: 10) { try blockedConnections() == 3 })
        var values: [String] = []
        for burst in 0..<20 {
            let names = (0..<5).map { "burst \(burst) job \($0)" }
            values += names
            try redis.command("LPUSH", "queue:default", try payload(names[0]), try payload(names[1]), try payload(names[2]),
                              try payload(names[3]), try payload(names[4]))
            let single = "single \(burst)"
            values.append(single)
            try redis.client.enqueue(NewJob("Record", args: [.string(single)]))
        }
        try assertEachRanOnce(values)
    }

    /// Each kill makes the fetcher reconcile while the job just pushed is on its way from a reply to a pool thread.
    /// Before pool threads listed a job as they took it (`RunningJobs.Slot.held`), a reconciliation that read the
    /// buffer after the take and the running set before the run began put the job back: 4 of 8 runs ran one twice.
    func testKilledWaitingConnectionsLoseNoJobAndRunNoneTwice() throws {
        try start(waiters: 3)
        XCTAssertTrue(try eventually(timeout: 10) { try blockedConnections() == 4 })
        var values: [String] = []
        for round in 0..<30 {
            let name = "round \(round)"
            values.append(name)
            try redis.client.enqueue(NewJob("Record", args: [.string(name)]))
            if round % 3 == 0 {
                // Every connection of the worker on this database: waits in flight break, a job may have been moved
                // by a wait whose reply is lost, and the fetcher reconciles.
                try redis.killClientsInBLMOVE()
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        try assertEachRanOnce(values)
    }

    func testABacklogIsMovedByBatchedFetchesNotOneWaitPerJob() throws {
        let count = 3000
        try redis.client.enqueueMany((0..<count).map { NewJob("Record", args: [.string("backlog \($0)")]) })
        let before = try commandCalls()
        try start(waiters: 2)
        try assertEachRanOnce((0..<count).map { "backlog \($0)" })
        // Each fetch goes with the fetcher's own wait (one EVAL, one BLMOVE: `fetchThenWait`); the waiters wait only
        // once a fetch found the queue drained, i.e. a few times at the end here. Waiters waiting during the backlog
        // would take a share of it one job per round trip.
        let after = try commandCalls()
        let waitsBeyondTheFetchers = (after.blmove - before.blmove) - (after.eval - before.eval)
        XCTAssertLessThan(waitsBeyondTheFetchers, 30, "waits beside the fetcher's own while draining \(count) jobs")
    }

    /// `BLMOVE` and `EVAL` calls Redis has served so far (all databases; tests run one at a time). The worker sends
    /// `EVAL` only for the fetch that goes with its wait (other scripts go by `EVALSHA`).
    private func commandCalls() throws -> (blmove: Int, eval: Int) {
        let info = try redis.command("INFO", "commandstats").string ?? ""
        func calls(_ name: String) -> Int {
            guard let line = info.split(separator: "\r\n").first(where: { $0.hasPrefix("cmdstat_\(name):") }),
                  let calls = line.split(separator: ",").first?.split(separator: "=").last else { return 0 }
            return Int(calls) ?? 0
        }
        return (calls("blmove"), calls("eval"))
    }

    func testJobsWaitsTookFromAPausedQueueGoBack() throws {
        try start(waiters: 2, waitTimeout: 3)
        XCTAssertTrue(try eventually(timeout: 10) { try blockedConnections() == 3 })
        try redis.command("SADD", Keys.paused, "default")
        // Redis hands pushed jobs to the waiting connections in the order they blocked. The three waits sent before
        // the pause take the first three jobs, which run (as the fetcher's own wait's job does, docs/architecture.md);
        // each connection then waits again with the paused check in the same round trip, so the next three jobs, one
        // per connection (the fetcher's and both waiters'), go back to the queue. The first three go to the waits
        // sent before the pause whatever the spacing (those block first); the spacing lets each connection wait again
        // before the next push, so that each connection's give-back is exercised.
        let names = (0..<6).map { "pushed after the pause \($0)" }
        for name in names {
            try redis.client.enqueue(NewJob("Record", args: [.string(name)]))
            Thread.sleep(forTimeInterval: 0.15)
        }
        XCTAssertTrue(try eventually(timeout: 10) { try redis.int("LLEN", "queue:default") == 3 && redis.workingKeys().isEmpty },
                      "the jobs taken after the pause was seen are not back in the queue")
        XCTAssertTrue(try eventually(timeout: 10) { try blockedConnections() == 0 }, "still waiting on a paused queue")
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertEqual(harness.recorder.all.sorted(), Array(names.prefix(3)), "only the waits sent before the pause ran a job")
        try redis.command("SREM", Keys.paused, "default")
        try assertEachRanOnce(names)
    }
}
