import Foundation
import Logging
import WorkersQueue
import WorkersTestServices
import XCTest

@testable import Workers

/// The fetcher's back-pressure (`WorkerConfiguration.settleBacklog`): while that many settlements wait for the
/// settler it fetches nothing, so finished jobs cannot pile up in memory and in the in-flight list; once the settler
/// has written them it fetches again. A real fetcher thread on a real Redis; the settlement queue is driven by hand
/// in place of the settler.
final class SettleBacklogTests: XCTestCase {
    func testNoFetchWhileTheSettlerIsBehindThenFetchingResumes() throws {
        let redis = try TestRedis(database: 97)
        for start in stride(from: 0, to: 50, by: 25) {
            try redis.client.enqueueMany((start..<start + 25).map { NewJob("Noop", args: [.int(Int64($0))]) })
        }
        var configuration = WorkerConfiguration()
        configuration.redisURL = redis.url
        configuration.settleBacklog = 3
        configuration.concurrency = 2
        configuration.prefetch = 10
        let logger = Logger(label: "test.backlog")
        let buffer = JobBuffer(capacity: configuration.concurrency + configuration.prefetch)
        let settlements = SettlementQueue()
        // Three finished runs the settler has not written yet: the backlog is full.
        let placeholder = FetchedJob(queue: "default", raw: Array("{}".utf8), workingKey: "working:queue:default:none")
        for _ in 0..<3 { settlements.add(.init(job: placeholder, settlement: .ack, counts: .processed)) }
        let parts = try RuntimeParts.forTesting(identity: "backlog-host:1:abc", configuration: configuration,
                                                buffer: buffer, settlements: settlements, logger: logger)
        let fetcher = Fetcher(parts, unique: UniqueGate(registry: JobRegistry(), configuration: configuration))
        fetcher.start()
        defer { fetcher.stopAndWait() }
        Thread.sleep(forTimeInterval: 0.5)  // a fetch would take a millisecond; half a second of none is "held back"
        XCTAssertEqual(try redis.int("LLEN", Keys.queue("default")), 50, "nothing fetched while the backlog is full")
        XCTAssertEqual(buffer.freeSlots, buffer.capacity)

        // The settler writes them: fetching resumes, up to what the buffer holds.
        XCTAssertEqual(settlements.takeBatch(limit: 10, timeout: 0).count, 3)
        settlements.markWritten(3)
        XCTAssertTrue(try eventually(timeout: 10) { try redis.int("LLEN", Keys.queue("default")) < 50 },
                      "fetching resumes once the backlog is written")
        Thread.sleep(forTimeInterval: 0.2)  // no pool takes jobs here: the fetcher stops when the buffer's allowance is full
        let buffered = buffer.capacity - buffer.freeSlots
        XCTAssertGreaterThan(buffered, 0)
        XCTAssertEqual(try redis.int("LLEN", Keys.queue("default")), 50 - buffered, "what left the queue is in the buffer")
    }
}
