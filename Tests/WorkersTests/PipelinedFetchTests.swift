import Foundation
import WorkersQueue
import WorkersTestServices
import Workers
import XCTest

/// A fetcher serving one queue sends its fetch, the paused check and its wait for the next job (`BLMOVE`) in one
/// round trip (`ReliableQueue.fetchThenWait`). What must hold: the jobs the fetch brought run while the wait is still
/// open (they are not held until it ends), unique jobs among them are checked on the fetcher's second connection,
/// and a job the wait took from a paused queue goes back. The wait here is long (`blockingFetchTimeout` 30 s) and the
/// tests' patience shorter (10 s), so a fetch whose jobs waited for the wait's end cannot pass.
final class PipelinedFetchTests: XCTestCase {
    var redis: TestRedis!
    var harness: WorkerHarness!
    var process: WorkerProcess?

    override func setUpWithError() throws {
        redis = try TestRedis(database: 125)
        try redis.flush()
        harness = WorkerHarness(redis: redis)
    }

    override func tearDown() {
        if let process {
            // The fetcher notices the stop when its wait ends: a job pushed after the stop began ends it at once
            // (the job goes back to its queue untouched); the database is emptied once that push is done.
            let redis = self.redis!
            let pushed = DispatchGroup()
            pushed.enter()
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.3) {
                _ = try? redis.client.enqueue(NewJob("Record", args: ["wake the fetcher"]))
                pushed.leave()
            }
            process.shutdown()
            pushed.wait()
            try? redis.flush()
        }
        process = nil
    }

    private func start(concurrency: Int = 4) throws -> WorkerProcess {
        var configuration = harness.configuration(concurrency: concurrency)
        configuration.blockingFetchTimeout = .seconds(30)
        configuration.blockingWaiters = 0  // the fetcher's own wait alone (BlockingWaitersTests has the waiters)
        let started = try harness.start(configuration)
        process = started
        return started
    }

    /// Waits until the fetcher is blocked in `BLMOVE` on the (empty) queue.
    private func waitUntilTheFetcherWaits() throws {
        XCTAssertTrue(try eventually(timeout: 10) {
            try redis.command("CLIENT", "LIST").string?.contains("cmd=blmove") ?? false
        }, "the fetcher never waited in BLMOVE")
    }

    func testJobsAFetchBroughtRunWhileItsWaitIsOpen() throws {
        _ = try start()
        try waitUntilTheFetcherWaits()
        // One push of three: the open wait takes one; the next round trip's fetch brings the other two and its new
        // wait blocks on the then empty queue for up to 30 s — they must run before it ends.
        func payload(_ value: String) throws -> String {
            try JobClient.payload(for: NewJob("Record", args: [.string(value)]), createdAt: Clock.now(),
                                  enqueuedAt: Clock.now()).serialized()
        }
        try redis.command("LPUSH", "queue:default", try payload("one"), try payload("two"), try payload("three"))
        XCTAssertTrue(eventually(timeout: 10) { Set(self.harness.recorder.all) == ["one", "two", "three"] },
                      "ran: \(harness.recorder.all)")
        try waitUntilTheFetcherWaits()
        XCTAssertTrue(try eventually(timeout: 10) { try redis.workingKeys().isEmpty }, "jobs left in flight")
    }

    func testUniqueJobsAFetchBroughtAreCheckedWhileItsWaitIsOpen() throws {
        _ = try start()
        try waitUntilTheFetcherWaits()
        // Two copies of one unique job and a plain one, pushed together: the wait takes the first pushed, the fetch
        // the other two, whose unique check needs Redis while the wait is open (the fetcher's second connection).
        func payload(_ job: NewJob) throws -> String {
            try JobClient.payload(for: job, createdAt: Clock.now(), enqueuedAt: Clock.now()).serialized()
        }
        var unique = NewJob("Sleep", args: [300])
        unique.extra["unique_for"] = .double(60)
        try redis.command("LPUSH", "queue:default", try payload(NewJob("Record", args: ["plain"])), try payload(unique),
                          try payload(unique))
        XCTAssertTrue(eventually(timeout: 10) { self.harness.recorder.all == ["plain"] }, "ran: \(harness.recorder.all)")
        // One of the two copies ran (or runs), the other was dropped at fetch: none is left anywhere.
        XCTAssertTrue(try eventually(timeout: 10) {
            try redis.int("LLEN", "queue:default") == 0 && redis.workingKeys().isEmpty
        }, "jobs left in the queue or in flight")
    }

    func testAJobTheWaitTookFromAPausedQueueGoesBack() throws {
        _ = try start()
        try waitUntilTheFetcherWaits()
        try redis.command("SADD", Keys.paused, "default")
        // The open wait takes this job (it was sent before the pause): the fetcher learns of the pause in its next
        // round trip only if that one is sent — this job ends the wait, then the next round trip's paused check
        // answers 1, and anything its wait took is given back.
        try redis.client.enqueue(NewJob("Record", args: ["taken before the pause was seen"]))
        XCTAssertTrue(eventually(timeout: 10) { self.harness.recorder.all.count == 1 })
        try redis.client.enqueue(NewJob("Record", args: ["paused"]))
        XCTAssertTrue(try eventually(timeout: 10) { try redis.int("LLEN", "queue:default") == 1 && redis.workingKeys().isEmpty },
                      "the paused queue's job is not back in its queue")
        Thread.sleep(forTimeInterval: 0.3)
        XCTAssertEqual(harness.recorder.all, ["taken before the pause was seen"])
        try redis.command("SREM", Keys.paused, "default")
        XCTAssertTrue(eventually(timeout: 10) { self.harness.recorder.all.count == 2 }, "ran: \(harness.recorder.all)")
    }
}
